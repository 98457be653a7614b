"""Shared helpers of the mxmoe pytest suite.

Everything numerical here is written by hand from docs/NUMERICS.md (element tables, packing),
independently of mxmoe's encoder, so tests can use it as a second opinion.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "assets" / "golden" / "vectors.json"

# ----------------------------------------------------------------------------------------------
# MX element values and packing, by hand (NUMERICS.md sections 1 and 9).


def _minifloat_values(ebits: int, mbits: int, bias: int) -> np.ndarray:
    """Values of every sign-magnitude code of a minifloat without Inf/NaN (FP4, FP6):
    exponent field 0 is subnormal (m / 2^mbits * 2^(1 - bias)), else (1 + m / 2^mbits) *
    2^(e - bias); the top bit is the sign."""
    n = 1 << (1 + ebits + mbits)
    out = np.zeros(n, dtype=np.float64)
    for code in range(n):
        sign = -1.0 if code >> (ebits + mbits) else 1.0
        e = (code >> mbits) & ((1 << ebits) - 1)
        m = code & ((1 << mbits) - 1)
        if e == 0:
            v = m / (1 << mbits) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
        out[code] = sign * v
    return out


# FP4 E2M1 written out (NUMERICS.md section 1): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives.
FP4_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
)
ELEMENT_VALUES = {
    "mxfp4": FP4_VALUES,
    "mxfp6_e2m3": _minifloat_values(2, 3, 1),  # max 7.5
    "mxfp6_e3m2": _minifloat_values(3, 2, 3),  # max 28
}
assert np.array_equal(_minifloat_values(2, 1, 1), FP4_VALUES)
assert ELEMENT_VALUES["mxfp6_e2m3"][0x1F] == 7.5 and ELEMENT_VALUES["mxfp6_e3m2"][0x1F] == 28.0

BLOCK_BYTES = {"mxfp4": 16, "mxfp6_e2m3": 24, "mxfp6_e3m2": 24}


def unpack_codes(packed: np.ndarray, fmt: str) -> np.ndarray:
    """Packed bytes [..., P] -> one code per element [..., K] (NUMERICS.md 9)."""
    p = np.asarray(packed, dtype=np.uint8)
    if fmt == "mxfp4":
        # byte i = code[2i] | code[2i+1] << 4: element 2i in the low nibble.
        lo, hi = p & 0x0F, p >> 4
        return np.stack([lo, hi], axis=-1).reshape(p.shape[:-1] + (p.shape[-1] * 2,))
    if fmt.startswith("mxfp6"):
        # w = c0 | c1<<6 | c2<<12 | c3<<18, bytes [w & 0xFF, w>>8 & 0xFF, w>>16].
        t = p.reshape(p.shape[:-1] + (p.shape[-1] // 3, 3)).astype(np.uint32)
        w = t[..., 0] | (t[..., 1] << 8) | (t[..., 2] << 16)
        c = np.stack([(w >> (6 * j)) & 0x3F for j in range(4)], axis=-1)
        return c.reshape(p.shape[:-1] + (p.shape[-1] // 3 * 4,)).astype(np.uint8)
    if fmt in ("mxfp8_e4m3", "mxfp8_e5m2", "mxint8"):
        return p.copy()
    raise ValueError(fmt)


def pack_codes(codes: np.ndarray, fmt: str) -> np.ndarray:
    """The inverse of unpack_codes, by hand."""
    c = np.asarray(codes, dtype=np.uint32)
    if fmt == "mxfp4":
        c = c.reshape(c.shape[:-1] + (c.shape[-1] // 2, 2))
        return (c[..., 0] | (c[..., 1] << 4)).astype(np.uint8)
    if fmt.startswith("mxfp6"):
        c = c.reshape(c.shape[:-1] + (c.shape[-1] // 4, 4))
        w = c[..., 0] | (c[..., 1] << 6) | (c[..., 2] << 12) | (c[..., 3] << 18)
        b = np.stack([w & 0xFF, (w >> 8) & 0xFF, (w >> 16) & 0xFF], axis=-1)
        return b.reshape(b.shape[:-2] + (b.shape[-2] * 3,)).astype(np.uint8)
    return c.astype(np.uint8)


def np_dequantize(packed: np.ndarray, scales: np.ndarray, fmt: str) -> np.ndarray:
    """NumPy dequantizer of FP4/FP6 packed data (float64): decode(code) * 2^(byte - 127);
    scale byte 255 gives NaN (NUMERICS.md 5.4)."""
    codes = unpack_codes(packed, fmt)
    vals = ELEMENT_VALUES[fmt][codes]
    s = np.asarray(scales, dtype=np.int64)
    scale = np.where(s == 255, np.nan, np.ldexp(1.0, s - 127))
    scale = np.repeat(scale, 32, axis=-1)
    return vals * scale


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-for-bit float32 equality, any NaN matching any NaN."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if a.shape != b.shape:
        return False
    nan = np.isnan(a) & np.isnan(b)
    return bool(np.all(nan | (a.view(np.uint32) == b.view(np.uint32))))


def rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    g = np.asarray(got, np.float64)
    w = np.asarray(want, np.float64)
    den = np.sqrt(np.sum(w * w))
    num = np.sqrt(np.sum((g - w) ** 2))
    return float(num / den) if den else float(num)


# ----------------------------------------------------------------------------------------------
# safetensors files: the `safetensors` package when installed, else a tiny reader/writer of the
# format (8-byte little-endian header length, JSON header, raw little-endian data).

_ST_DTYPES = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(np.uint8): "U8",
    np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64",
}
_ST_NP = {v: k for k, v in _ST_DTYPES.items()}

try:  # pragma: no cover - depends on the environment
    import safetensors.numpy as _stnp
except Exception:  # noqa: BLE001
    _stnp = None


def st_save(path: Path, tensors: dict, metadata: dict | None = None) -> None:
    tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    if _stnp is not None:
        _stnp.save_file(tensors, str(path), metadata=metadata)
        return
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    blobs = []
    for name in sorted(tensors):
        a = tensors[name]
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {
            "dtype": _ST_DTYPES[a.dtype],
            "shape": list(a.shape),
            "data_offsets": [off, off + len(b)],
        }
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_load(path: Path) -> dict:
    if _stnp is not None:
        return dict(_stnp.load_file(str(path)))
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dt = _ST_NP[t["dtype"]].newbyteorder("<")
        out[name] = np.frombuffer(raw[base + a : base + b], dtype=dt).reshape(t["shape"])
    return out


# ----------------------------------------------------------------------------------------------
# The CLI binary: $MXMOE_BIN, else target/release/mxmoe or target/debug/mxmoe of this checkout.


def find_mxmoe_bin() -> Path | None:
    env = os.environ.get("MXMOE_BIN")
    if env:
        return Path(env)
    for p in (REPO / "target" / "release" / "mxmoe", REPO / "target" / "debug" / "mxmoe"):
        if p.is_file():
            return p
    w = shutil.which("mxmoe")
    return Path(w) if w else None


@pytest.fixture(scope="session")
def mxmoe_bin() -> Path:
    p = find_mxmoe_bin()
    if p is None:
        pytest.skip("no mxmoe binary (set MXMOE_BIN, or build it: cargo build --release)")
    if not p.is_file():
        pytest.fail(f"MXMOE_BIN={p} does not exist")
    return p


def run_cli(bin_: Path, *args, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [str(bin_), *map(str, args)], capture_output=True, text=True, timeout=600
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"mxmoe {' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        )
    return r


@pytest.fixture(scope="session")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


def parse_float(s: str) -> np.float32:
    """A golden-vector float: decimal, NaN, inf, -inf, -0.0 or 0x + 8 hex digits (fp32 bits)."""
    if s.startswith("0x"):
        return np.array([int(s, 16)], dtype=np.uint32).view(np.float32)[0]
    return np.float32(float(s))
