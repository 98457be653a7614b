"""Round trips, shapes and input conversions of quantize / dequantize / qdq."""

from pathlib import Path

import numpy as np
import pytest

import mxmoe
from conftest import same_bits

FORMATS = mxmoe.info()["formats"]
MODES = mxmoe.info()["scale_modes"]
PACKED_PER_BLOCK = {
    "mxfp4": 16,
    "mxfp6_e2m3": 24,
    "mxfp6_e3m2": 24,
    "mxfp8_e4m3": 32,
    "mxfp8_e5m2": 32,
    "mxint8": 32,
}


def awkward(shape, seed=0):
    """Heavy-tailed values with zeros, -0.0, subnormals, huge and tiny blocks."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_t(3, size=shape) * np.exp2(rng.integers(-20, 20, size=shape[:-1] + (1,)))).astype(np.float32)
    flat = x.reshape(-1)
    flat[:: 17] = 0.0
    flat[5:: 31] = -0.0
    flat[7:: 53] = np.float32(1e-40)
    flat[11:: 97] = np.float32(1e30)
    return x


def test_format_table_matches_the_packing():
    specs = mxmoe.info()["format_specs"]
    assert sorted(specs) == sorted(FORMATS)
    for f, bb in PACKED_PER_BLOCK.items():
        assert specs[f]["block_bytes"] == bb


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", MODES)
def test_round_trip_and_qdq(fmt, mode):
    x = awkward((3, 5, 96), seed=hash((fmt, mode)) % 1000)
    packed, scales = mxmoe.quantize(x, fmt, mode)
    assert packed.dtype == np.uint8 and scales.dtype == np.uint8
    assert packed.shape == (3, 5, 3 * PACKED_PER_BLOCK[fmt])
    assert scales.shape == (3, 5, 3)
    y = mxmoe.dequantize(packed, scales, fmt)
    assert y.dtype == np.float32 and y.shape == x.shape
    # QDQ == dequantize(quantize(x)), bit for bit.
    assert same_bits(mxmoe.qdq(x, fmt, mode), y)
    # The dequantized values are representable: quantizing them again changes nothing.
    p2, s2 = mxmoe.quantize(y, fmt, mode)
    assert same_bits(mxmoe.dequantize(p2, s2, fmt), y)
    # -0.0 keeps its sign except in MXINT8 (no -0).
    negz = np.signbit(x) & (x == 0)
    if fmt != "mxint8":
        assert np.all(np.signbit(y[negz]))


def test_scale_mode_aliases_and_default():
    x = awkward((4, 64))
    assert same_bits(mxmoe.qdq(x, "mxfp4"), mxmoe.qdq(x, "mxfp4", "even"))
    assert same_bits(mxmoe.qdq(x, "fp4", "even_round"), mxmoe.qdq(x, "mxfp4", "even"))
    assert same_bits(mxmoe.qdq(x, "e2m3", "round_up"), mxmoe.qdq(x, "mxfp6_e2m3", "rceil"))


def test_one_dimensional_and_high_rank():
    x = awkward((2, 2, 2, 64)).reshape(-1)[:64].copy()
    p, s = mxmoe.quantize(x, "mxfp4")
    assert p.shape == (32,) and s.shape == (2,)
    assert mxmoe.dequantize(p, s, "mxfp4").shape == (64,)
    y = awkward((2, 2, 2, 64))
    assert same_bits(mxmoe.qdq(y, "mxfp6_e3m2").reshape(-1, 64), mxmoe.qdq(y.reshape(-1, 64), "mxfp6_e3m2"))


def test_results_are_writable_numpy_arrays():
    x = awkward((2, 32))
    p, s = mxmoe.quantize(x, "mxfp4")
    y = mxmoe.qdq(x, "mxfp4")
    for a in (p, s, y):
        assert isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable
    y[0, 0] = 1.0


def test_f16_and_bf16_inputs_are_converted_exactly():
    x16 = awkward((4, 64)).clip(-60000, 60000).astype(np.float16)
    assert same_bits(mxmoe.qdq(x16, "mxfp4"), mxmoe.qdq(x16.astype(np.float32), "mxfp4"))
    ml = pytest.importorskip("ml_dtypes")
    xb = awkward((4, 64)).astype(ml.bfloat16)
    assert same_bits(mxmoe.qdq(xb, "mxfp6_e2m3"), mxmoe.qdq(xb.astype(np.float32), "mxfp6_e2m3"))
    p, s = mxmoe.quantize(xb, "mxfp4")
    p32, s32 = mxmoe.quantize(xb.astype(np.float32), "mxfp4")
    assert np.array_equal(p, p32) and np.array_equal(s, s32)


def test_non_contiguous_and_views():
    x = awkward((8, 128))
    v = x[::2, 32:96]  # strided view, K = 64
    assert same_bits(mxmoe.qdq(v, "mxfp4"), mxmoe.qdq(np.ascontiguousarray(v), "mxfp4"))
    assert same_bits(mxmoe.qdq(x.T.copy().T, "mxfp4"), mxmoe.qdq(x, "mxfp4"))


def test_scales_as_e8m0_dtype_and_int8_packed():
    ml = pytest.importorskip("ml_dtypes")
    x = awkward((2, 64))
    p, s = mxmoe.quantize(x, "mxfp4")
    y = mxmoe.dequantize(p.view(np.int8), s.view(ml.float8_e8m0fnu), "mxfp4")
    assert same_bits(y, mxmoe.dequantize(p, s, "mxfp4"))


class _DlpackOnly:
    """An object that offers only DLPack (like a tensor from another framework)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_buffer_protocol_and_dlpack_inputs():
    x = awkward((2, 64))
    want = mxmoe.qdq(x, "mxfp4")
    assert same_bits(mxmoe.qdq(memoryview(x), "mxfp4"), want)
    if hasattr(x, "__dlpack__"):
        assert same_bits(mxmoe.qdq(_DlpackOnly(x), "mxfp4"), want)


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    x = awkward((2, 64))
    want = mxmoe.qdq(x, "mxfp4")
    assert same_bits(mxmoe.qdq(torch.from_numpy(x), "mxfp4"), want)
    xb = torch.from_numpy(x).to(torch.bfloat16)
    assert same_bits(mxmoe.qdq(xb, "mxfp4"), mxmoe.qdq(xb.float().numpy(), "mxfp4"))
    p, s = mxmoe.quantize(torch.from_numpy(x), "mxfp4")
    t = torch.from_numpy(mxmoe.dequantize(torch.from_numpy(p), torch.from_numpy(s), "mxfp4"))
    assert t.dtype == torch.float32


def _xref(name):
    from safetensors.numpy import load_file

    return load_file(str(Path(__file__).resolve().parents[2] / "xref" / "vectors" / name))


def test_profiles_match_the_peer_vectors():
    # The vectors were written by the real implementations (xref/); see tests/xref.rs.
    q = _xref("quark.safetensors")
    for fmt, mode in [("mxfp4", "even"), ("mxint8", "floor"), ("mxfp6_e2m3", "ceil")]:
        got = mxmoe.qdq(q[f"{fmt}.input"], fmt, mode, profile="quark")
        assert same_bits(got, q[f"{fmt}.{mode}.qdq"]), (fmt, mode)
    t = _xref("torchao.safetensors")
    p, s = mxmoe.quantize(t["mxfp8_e4m3.input"], "mxfp8_e4m3", "rceil", profile="torchao")
    assert np.array_equal(s.reshape(-1), t["mxfp8_e4m3.rceil.scale"])
    assert np.array_equal(p, t["mxfp8_e4m3.rceil.codes"])
    g = _xref("ggml.safetensors")
    keep = g["defined"] == 1
    p, s = mxmoe.quantize(g["input"][keep], "mxfp4", profile="ggml")   # its own mode: floor
    assert np.array_equal(np.concatenate([s, p], axis=1), g["blocks"][keep])
    assert same_bits(mxmoe.dequantize(p, s, "mxfp4", profile="ggml"), g["dequant"][keep])
    # The contract differs from the peers on these vectors.
    assert not same_bits(mxmoe.qdq(q["mxfp4.input"], "mxfp4", "even"), q["mxfp4.even.qdq"])


def test_profile_errors():
    x = awkward((1, 32))
    for fn in (lambda: mxmoe.quantize(x, "mxfp4", profile=None), lambda: mxmoe.qdq(x, "mxfp4", profile=None)):
        fn()
    with pytest.raises(ValueError, match="unknown profile 'vllm'"):
        mxmoe.quantize(x, "mxfp4", profile="vllm")
    with pytest.raises(ValueError, match="no 'even' scale mode"):
        mxmoe.qdq(x, "mxfp4", "even", profile="microxcaling")
    with pytest.raises(ValueError, match="has no mxfp8_e4m3"):
        mxmoe.qdq(x, "mxfp8_e4m3", profile="ggml")
    with pytest.raises(ValueError, match="CPU reference only"):
        mxmoe.qdq(x, "mxfp4", profile="quark", backend="wgpu")
    p, s = mxmoe.quantize(x, "mxfp4")
    with pytest.raises(ValueError, match="unknown profile 'x'"):
        mxmoe.dequantize(p, s, "mxfp4", profile="x")


def test_gil_is_released_threads_agree():
    # Several threads at once give the same bits as one (the GIL is released while computing).
    from concurrent.futures import ThreadPoolExecutor

    xs = [awkward((64, 256), seed=i) for i in range(6)]
    want = [mxmoe.qdq(x, "mxfp6_e2m3") for x in xs]
    with ThreadPoolExecutor(3) as ex:
        got = list(ex.map(lambda x: mxmoe.qdq(x, "mxfp6_e2m3"), xs))
    assert all(same_bits(a, b) for a, b in zip(got, want))
