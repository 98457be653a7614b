"""mxmoe: the exact reference for OCP MX-quantized Mixture-of-Experts, from Python.

The same library as the ``mxmoe`` command line (Rust, through PyO3): bit-exact MX quantize,
dequantize and QDQ under the four scale modes (``floor``, ``even``, ``ceil``, ``rceil``; see
docs/NUMERICS.md), the exact MoE forward of the five OCP MX schemes of AMD Quark as vLLM runs
them (and the weight-only and MXFP8 ones), and ``verify``: the verdict of ``mxmoe verify`` on
your kernel's output (BIT-EXACT, WITHIN TOLERANCE or WRONG, the matched reference variant, and a
diagnosis by fault injection).

Arrays are NumPy arrays. Float inputs may be float32, float16 or bfloat16 (``ml_dtypes``, or a
torch tensor); they are converted to float32 (exactly). Packed data and scales are uint8 (int8
and 1-byte float dtypes such as ``float8_e8m0fnu`` are reinterpreted as uint8), ids int32.
PyTorch CPU tensors are accepted as they are (``__array__``, DLPack); results are NumPy arrays
(``torch.from_numpy(result)`` makes them tensors without a copy). Bad dtypes raise
``TypeError``, bad shapes and values ``ValueError``, both naming the argument; an op a backend
cannot run raises ``NotImplementedError``, a backend that cannot be opened ``RuntimeError``.
The GIL is released while the library computes.

Example::

    >>> import numpy as np, mxmoe
    >>> x = np.array([[5.0, 0.25, -2.5] + [0.0] * 29], dtype=np.float32)
    >>> packed, scales = mxmoe.quantize(x, "mxfp4", "even")
    >>> packed.shape, scales.shape, int(scales[0, 0])
    ((1, 16), (1, 1), 127)
    >>> mxmoe.dequantize(packed, scales, "mxfp4")[0, :3]
    array([ 4.,  0., -2.], dtype=float32)
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import _mxmoe

__all__ = [
    "__version__",
    "quantize",
    "dequantize",
    "qdq",
    "MoeLayer",
    "moe",
    "verify",
    "backends",
    "info",
]

__version__: str = _mxmoe.__version__

_BLOCK = 32
_FLOATS = ("float32", "float16", "bfloat16")


# ----------------------------------------------------------------------------------------------
# Array conversion.


def _torch_to_numpy(x: Any, name: str) -> np.ndarray:
    """A torch tensor to NumPy without importing torch: CPU only; bf16 goes through f32 (exact);
    1-byte dtypes numpy lacks (float8_e8m0fnu scales, packed float4) are viewed as uint8."""
    dev = getattr(x, "device", None)
    if dev is not None and getattr(dev, "type", "cpu") != "cpu":
        raise TypeError(
            f"{name}: a torch tensor on {dev}; mxmoe computes on the host, pass {name}.cpu()"
        )
    t = x.detach()
    dt = str(t.dtype)
    if dt == "torch.bfloat16":
        t = t.float()
    elif t.element_size() == 1 and dt not in ("torch.uint8", "torch.int8", "torch.bool"):
        import torch  # present: x is a torch tensor

        t = t.view(torch.uint8)
    try:
        return t.numpy()
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"{name}: cannot read this torch tensor as an array ({e})") from None


def _as_array(x: Any, name: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if x is None:
        raise TypeError(f"{name}: expected an array, got None")
    if type(x).__module__.split(".")[0] == "torch":
        return _torch_to_numpy(x, name)
    if not hasattr(x, "__array__") and not hasattr(x, "__array_interface__"):
        if hasattr(x, "__dlpack__"):
            try:
                return np.from_dlpack(x)
            except Exception as e:  # noqa: BLE001
                raise TypeError(f"{name}: cannot import it through DLPack ({e})") from None
    try:
        return np.asarray(x)
    except Exception as e:  # noqa: BLE001
        raise TypeError(
            f"{name}: expected an array (numpy, torch CPU tensor, buffer), got "
            f"{type(x).__name__} ({e})"
        ) from None


def _floats(x: Any, name: str) -> np.ndarray:
    """float32/float16/bfloat16 -> C-contiguous float32 (exact)."""
    a = _as_array(x, name)
    if a.dtype.name not in _FLOATS:
        raise TypeError(
            f"{name}: dtype {a.dtype} is not accepted; pass float32, float16 or bfloat16 "
            f"(e.g. {name}.astype(numpy.float32))"
        )
    if a.ndim == 0:
        raise ValueError(f"{name}: expected an array with at least one dimension, got a scalar")
    return np.ascontiguousarray(a, dtype=np.float32)


def _bytes_u8(x: Any, name: str) -> np.ndarray:
    """uint8 (int8 and other 1-byte dtypes reinterpreted) -> C-contiguous uint8."""
    a = _as_array(x, name)
    if a.dtype == np.uint8:
        pass
    elif a.dtype == np.int8 or (a.dtype.itemsize == 1 and a.dtype.name.startswith("float8_")):
        # Raw bytes under another name (torch int8 storage, float8_e8m0fnu scales, FP8 codes).
        a = a.view(np.uint8)
    else:
        raise TypeError(
            f"{name}: dtype {a.dtype} is not accepted; packed MX data and E8M0 scales are "
            f"uint8 bytes (int8 and 1-byte float8_* dtypes are reinterpreted)"
        )
    if a.ndim == 0:
        raise ValueError(f"{name}: expected an array with at least one dimension, got a scalar")
    return np.ascontiguousarray(a)


def _ints(x: Any, name: str) -> np.ndarray:
    """Integer ids -> C-contiguous int32 (checked to fit)."""
    a = _as_array(x, name)
    if a.dtype.kind not in ("i", "u"):
        raise TypeError(f"{name}: dtype {a.dtype} is not accepted; pass integers (int32)")
    if a.dtype != np.int32:
        if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
            raise ValueError(f"{name}: values do not fit in int32")
        a = a.astype(np.int32)
    return np.ascontiguousarray(a)


def _str(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{name}: expected a str, got {type(v).__name__}")
    return v


def _profile(profile: Any) -> str:
    """``None`` -> the contract; else a profile name (checked by the native side)."""
    if profile is None:
        return "contract"
    return _str(profile, "profile")


def _mode(scale_mode: Any) -> str:
    """``None`` -> "" (the native side takes the profile's own mode: ``even`` for the contract)."""
    if scale_mode is None:
        return ""
    return _mxmoe.scale_mode_name(_str(scale_mode, "scale_mode"))


def _f32_out(b: bytearray, shape: Tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(b, dtype=np.float32).reshape(shape)


def _block_axis(a: np.ndarray, name: str) -> int:
    k = a.shape[-1]
    if k == 0 or k % _BLOCK != 0:
        raise ValueError(
            f"{name}: the last dimension is K = {k}, which is not a multiple of the MX block "
            f"size 32 (shape {tuple(a.shape)})"
        )
    return k


def _format(fmt: Any, name: str = "format") -> Tuple[str, int]:
    """Canonical format name and packed bytes per 32-block."""
    canon, _bits, block_bytes = _mxmoe.format_spec(_str(fmt, name))
    return canon, block_bytes


# ----------------------------------------------------------------------------------------------
# Formats.


def quantize(
    x: Any,
    format: str,
    scale_mode: Optional[str] = None,
    *,
    backend: str = "cpu",
    adapter: Optional[str] = None,
    profile: Optional[str] = None,
) -> Tuple[np.ndarray, np.ndarray]:
    """Quantize ``x`` ``[..., K]`` (K a multiple of 32) to an MX format, bit-exact.

    Returns ``(packed, scales)``: ``packed`` uint8 ``[..., packed(K)]`` packed as
    docs/NUMERICS.md section 9 says (FP4: two codes per byte, element 2i in the low nibble,
    K/2 bytes; FP6: four codes in three bytes, 3K/4; FP8/INT8: one byte per code, K), and
    ``scales`` uint8 E8M0 bytes ``[..., K/32]`` (value 2^(byte-127); 255 marks a NaN/Inf block).
    ``format`` is a name or alias (``mxfp4``, ``mxfp6_e2m3``, ``mxfp6_e3m2``, ``mxfp8_e4m3``,
    ``mxfp8_e5m2``, ``mxint8``); ``scale_mode`` one of ``floor``, ``even`` (AMD Quark / vLLM,
    the default), ``ceil``, ``rceil`` (NVIDIA). ``backend`` ``cpu`` (the reference), ``wgpu``
    or ``auto`` (all bit-exact); ``adapter`` filters GPU adapters by name. ``profile``
    (``None``: the contract) reproduces another implementation bit for bit: ``ocp``,
    ``quark``, ``torchao``, ``nvidia``, ``microxcaling``, ``ggml`` (docs/NUMERICS.md 17; CPU
    only; ``scale_mode=None`` takes the profile's own mode, ``even`` for the contract).

    Example::

        >>> x = np.zeros((2, 64), np.float32); x[0, 0] = 6.0
        >>> packed, scales = mxmoe.quantize(x, "mxfp4")
        >>> packed.shape, scales.tolist()
        ((2, 32), [[127, 0], [0, 0]])
    """
    prof = _profile(profile)
    a = _floats(x, "x")
    k = _block_axis(a, "x")
    fmt, bb = _format(format)
    mode = _mode(scale_mode)
    packed, scales = _mxmoe.quantize(
        a.tobytes(), list(a.shape), fmt, mode, _str(backend, "backend"), adapter, prof
    )
    lead = a.shape[:-1]
    return (
        np.frombuffer(packed, dtype=np.uint8).reshape(lead + (k // _BLOCK * bb,)),
        np.frombuffer(scales, dtype=np.uint8).reshape(lead + (k // _BLOCK,)),
    )


def dequantize(
    packed: Any,
    scales: Any,
    format: str,
    *,
    backend: str = "cpu",
    adapter: Optional[str] = None,
    profile: Optional[str] = None,
) -> np.ndarray:
    """Dequantize packed MX data: ``packed`` uint8 ``[..., packed(K)]`` and ``scales`` uint8
    E8M0 ``[..., K/32]`` to float32 ``[..., K]``, exactly (``decode(code) * 2^(byte-127)``;
    scale byte 255 gives NaN). The inverse layout of :func:`quantize`. ``profile``: see
    :func:`quantize` (``ggml`` reads its split nibble order; ``quark`` decodes byte 255 as Inf).

    Example::

        >>> packed = np.array([[0x21] + [0] * 15], np.uint8)   # codes 1, 2: 0.5, 1.0
        >>> mxmoe.dequantize(packed, np.array([[128]], np.uint8), "mxfp4")[0, :2]
        array([1., 2.], dtype=float32)
    """
    prof = _profile(profile)
    fmt, bb = _format(format)
    p = _bytes_u8(packed, "packed")
    s = _bytes_u8(scales, "scales")
    pk = p.shape[-1]
    if pk == 0 or pk % bb != 0:
        raise ValueError(
            f"packed: the last dimension is {pk} bytes, not a whole number of {fmt} blocks "
            f"({bb} bytes per 32 elements)"
        )
    k = pk // bb * _BLOCK
    want = p.shape[:-1] + (k // _BLOCK,)
    if s.shape != want:
        raise ValueError(
            f"scales: shape {tuple(s.shape)} does not match packed {tuple(p.shape)}: expected "
            f"{want} (one E8M0 byte per 32 elements)"
        )
    out = _mxmoe.dequantize(
        p.tobytes(),
        s.tobytes(),
        list(p.shape[:-1]) + [k],
        fmt,
        _str(backend, "backend"),
        adapter,
        prof,
    )
    return _f32_out(out, p.shape[:-1] + (k,))


def qdq(
    x: Any,
    format: str,
    scale_mode: Optional[str] = None,
    *,
    backend: str = "cpu",
    adapter: Optional[str] = None,
    profile: Optional[str] = None,
) -> np.ndarray:
    """Quantize-dequantize ``x`` ``[..., K]`` (K a multiple of 32): float32 of the same shape,
    equal bit for bit to ``dequantize(*quantize(x, format, scale_mode), format)``. What a
    kernel's activation quantization computes (vLLM's ``quant_dequant_mxfp4`` /
    ``quant_dequant_mxfp6`` with ``even`` scales). Arguments as :func:`quantize`.

    Example::

        >>> x = np.array([[7.0, -6.5, 3.25, 1.0] + [0.0] * 28], np.float32)
        >>> mxmoe.qdq(x, "mxfp4", "floor")[0, :4]      # amax 7 saturates under floor
        array([ 6., -6.,  3.,  1.], dtype=float32)
    """
    prof = _profile(profile)
    a = _floats(x, "x")
    k = _block_axis(a, "x")
    fmt, _ = _format(format)
    mode = _mode(scale_mode)
    out = _mxmoe.qdq(a.tobytes(), k, fmt, mode, _str(backend, "backend"), adapter, prof)
    return _f32_out(out, a.shape)


# ----------------------------------------------------------------------------------------------
# The MoE layer.


def _opt_vec(x: Any, name: str, want: Tuple[int, ...]) -> Optional[bytes]:
    if x is None:
        return None
    a = _floats(x, name)
    if a.shape != want:
        raise ValueError(f"{name}: shape {tuple(a.shape)}, expected {want}")
    return a.tobytes()


def _packed3(x: Any, name: str, block_bytes: int) -> np.ndarray:
    """``[E, N, packed(K)]``, or the gpt-oss blocks ``[E, N, K/32, block bytes]`` flattened."""
    a = _bytes_u8(x, name)
    if a.ndim == 4 and a.shape[-1] == block_bytes:
        a = a.reshape(a.shape[0], a.shape[1], a.shape[2] * block_bytes)
    if a.ndim != 3:
        raise ValueError(
            f"{name}: shape {tuple(a.shape)}, expected 3-D [experts, rows, packed bytes] (or "
            f"gpt-oss blocks [experts, rows, K/32, {block_bytes}])"
        )
    return a


class MoeLayer:
    """One MX-quantized MoE layer: packed expert weights (vLLM/Quark layout) and routing keys.

    Build it from arrays::

        MoeLayer(w13_weight, w13_weight_scale, w2_weight, w2_weight_scale, scheme, top_k=...)

    with ``w13_weight`` uint8 ``[E, 2I, packed(H)]`` (rows ``[0, I)`` gate, ``[I, 2I)`` up;
    interleaved gate/linear for ``activation="swigluoai"``), ``w13_weight_scale`` uint8 E8M0
    ``[E, 2I, H/32]``, ``w2_weight`` ``[E, H, packed(I)]``, ``w2_weight_scale`` ``[E, H, I/32]``
    (gpt-oss blocks ``[E, N, K/32, bytes per block]`` are accepted too); ``scheme`` one of
    ``info()["schemes"]`` (e.g. ``w_mxfp4_a_mxfp4``); optional float ``w13_bias`` ``[E, 2I]``,
    ``w2_bias`` ``[E, H]``, ``e_score_correction_bias`` ``[n_experts]`` (DeepSeek-V3,
    selection only) and int ``expert_map`` ``[n_experts]`` (global id -> local expert or -1;
    ``n_experts`` is its length, else E). Routing: ``scoring`` ``softmax`` (vLLM), ``topk_softmax``
    (gpt-oss) or ``sigmoid`` (DeepSeek, Llama 4); ``renormalize``; ``n_group``/``topk_group``;
    ``routed_scaling_factor``; ``apply_router_weight_on_input`` (Llama 4, top-1). ``scale_mode``
    is the activation QDQ's (default ``even``). Everything is checked; errors raise
    ``ValueError``/``TypeError`` naming the argument.

    Or load a file with the CLI's loader: ``MoeLayer.load("layer.safetensors")`` (a layer
    bundle, or a gpt-oss checkpoint holding one layer). Properties are read-only.

    Example::

        >>> E, H, I = 4, 64, 32
        >>> rng = np.random.default_rng(0)
        >>> w13, s13 = mxmoe.quantize(rng.standard_normal((E, 2 * I, H), np.float32), "mxfp4")
        >>> w2, s2 = mxmoe.quantize(rng.standard_normal((E, H, I), np.float32), "mxfp4")
        >>> layer = mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2)
        >>> layer.hidden, layer.inter, layer.n_experts, layer.top_k
        (64, 32, 4, 2)
    """

    __slots__ = ("_native", "_cfg")

    def __init__(
        self,
        w13_weight: Any,
        w13_weight_scale: Any,
        w2_weight: Any,
        w2_weight_scale: Any,
        scheme: str,
        *,
        top_k: int,
        activation: str = "silu",
        renormalize: bool = True,
        scoring: str = "softmax",
        w13_bias: Any = None,
        w2_bias: Any = None,
        e_score_correction_bias: Any = None,
        expert_map: Any = None,
        n_group: Optional[int] = None,
        topk_group: Optional[int] = None,
        routed_scaling_factor: float = 1.0,
        apply_router_weight_on_input: bool = False,
        scale_mode: str = "even",
    ) -> None:
        canon, wfmt, _afmt = _mxmoe.scheme_spec(_str(scheme, "scheme"))
        _, bb = _format(wfmt)
        w13 = _packed3(w13_weight, "w13_weight", bb)
        s13 = _bytes_u8(w13_weight_scale, "w13_weight_scale")
        w2 = _packed3(w2_weight, "w2_weight", bb)
        s2 = _bytes_u8(w2_weight_scale, "w2_weight_scale")
        if s13.ndim != 3:
            raise ValueError(
                f"w13_weight_scale: shape {tuple(s13.shape)}, expected 3-D [E, 2I, H/32]"
            )
        e, i2, hb = s13.shape
        h = hb * _BLOCK
        if i2 % 2 != 0 or i2 == 0:
            raise ValueError(
                f"w13_weight_scale: {i2} rows; w13 holds 2I rows (gate and up), an even count"
            )
        i = i2 // 2
        if w13.shape != (e, i2, hb * bb):
            raise ValueError(
                f"w13_weight: shape {tuple(w13.shape)}, expected [E = {e}, 2I = {i2}, "
                f"packed(H = {h}) = {hb * bb}] for {wfmt} (from w13_weight_scale "
                f"{tuple(s13.shape)})"
            )
        if s2.shape != (e, h, i // _BLOCK) or i % _BLOCK != 0:
            raise ValueError(
                f"w2_weight_scale: shape {tuple(s2.shape)}, expected [E = {e}, H = {h}, "
                f"I/32 = {i / _BLOCK:g}] (I = {i} must be a multiple of 32)"
            )
        if w2.shape != (e, h, i // _BLOCK * bb):
            raise ValueError(
                f"w2_weight: shape {tuple(w2.shape)}, expected [E = {e}, H = {h}, "
                f"packed(I = {i}) = {i // _BLOCK * bb}] for {wfmt}"
            )
        emap = None
        if expert_map is not None:
            m = _ints(expert_map, "expert_map")
            if m.ndim != 1:
                raise ValueError(f"expert_map: shape {tuple(m.shape)}, expected [n_experts]")
            emap = m
        n_experts = e if emap is None else emap.shape[0]
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
            raise TypeError(f"top_k: expected an int, got {type(top_k).__name__}")
        for nm, v in (("n_group", n_group), ("topk_group", topk_group)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
                raise TypeError(f"{nm}: expected an int or None, got {type(v).__name__}")
            if v is not None and v < 0:
                raise ValueError(f"{nm}: {v} is negative")
        if top_k < 0:
            raise ValueError(f"top_k: {top_k} is negative")
        self._native = _mxmoe.Layer.from_parts(
            w13.tobytes(),
            s13.tobytes(),
            w2.tobytes(),
            s2.tobytes(),
            e,
            h,
            i,
            canon,
            _str(activation, "activation"),
            int(top_k),
            bool(renormalize),
            _str(scoring, "scoring"),
            _str(scale_mode, "scale_mode"),
            float(routed_scaling_factor),
            bool(apply_router_weight_on_input),
            None if n_group is None else int(n_group),
            None if topk_group is None else int(topk_group),
            _opt_vec(w13_bias, "w13_bias", (e, i2)),
            _opt_vec(w2_bias, "w2_bias", (e, h)),
            _opt_vec(e_score_correction_bias, "e_score_correction_bias", (n_experts,)),
            None if emap is None else emap.tobytes(),
        )
        self._cfg = self._native.config()

    @classmethod
    def load(cls, path: "os.PathLike[str] | str") -> "MoeLayer":
        """Load a layer bundle (vLLM/Quark names: ``w13_weight``, ``w13_weight_scale``, ...,
        routing keys as metadata) or a one-layer gpt-oss checkpoint, with the same loader as
        the CLI (``mxmoe moe --layer``). Raises ``FileNotFoundError``, or ``ValueError`` naming
        the tensor for a file that is not a layer.

        Example::

            >>> layer = mxmoe.MoeLayer.load("layer.safetensors")   # e.g. from `mxmoe gen`
        """
        self = object.__new__(cls)
        self._native = _mxmoe.Layer.load(os.fspath(path))
        self._cfg = self._native.config()
        return self

    def save(self, path: "os.PathLike[str] | str") -> None:
        """Write the layer as a bundle the CLI reads (``mxmoe moe --layer``, ``mxmoe verify``).

        Example::

            >>> layer.save("layer.safetensors")
        """
        self._native.save(os.fspath(path))

    def __setattr__(self, name: str, value: Any) -> None:
        if name in MoeLayer.__slots__ and not hasattr(self, name):
            object.__setattr__(self, name, value)
        else:
            raise AttributeError(f"MoeLayer is read-only (cannot set {name!r})")

    def __repr__(self) -> str:
        c = self._cfg
        return (
            f"MoeLayer(scheme={c['scheme']!r}, n_experts={c['n_experts']}, "
            f"local_experts={c['local_experts']}, hidden={c['hidden']}, inter={c['inter']}, "
            f"top_k={c['top_k']}, activation={c['activation']!r}, scoring={c['scoring']!r}, "
            f"renormalize={c['renormalize']}, scale_mode={c['scale_mode']!r})"
        )

    # Configuration.
    @property
    def scheme(self) -> str:
        """Scheme name, e.g. ``w_mxfp4_a_mxfp6_e2m3``."""
        return self._cfg["scheme"]

    @property
    def weight_format(self) -> str:
        """MX format of the expert weights."""
        return self._cfg["weight_format"]

    @property
    def activation_format(self) -> Optional[str]:
        """MX format of both activation QDQ points, or None (weight-only scheme)."""
        return self._cfg["activation_format"]

    @property
    def activation(self) -> str:
        """``silu`` or ``swigluoai``."""
        return self._cfg["activation"]

    @property
    def scale_mode(self) -> str:
        """Scale mode of the activation QDQ points."""
        return self._cfg["scale_mode"]

    @property
    def hidden(self) -> int:
        """Hidden size H."""
        return self._cfg["hidden"]

    @property
    def inter(self) -> int:
        """Intermediate size I per expert."""
        return self._cfg["inter"]

    @property
    def n_experts(self) -> int:
        """The router's width (global experts)."""
        return self._cfg["n_experts"]

    @property
    def local_experts(self) -> int:
        """Experts whose weights the layer holds."""
        return self._cfg["local_experts"]

    @property
    def top_k(self) -> int:
        return self._cfg["top_k"]

    @property
    def renormalize(self) -> bool:
        return self._cfg["renormalize"]

    @property
    def scoring(self) -> str:
        """``softmax``, ``topk_softmax`` or ``sigmoid``."""
        return self._cfg["scoring"]

    @property
    def n_group(self) -> Optional[int]:
        return self._cfg["n_group"]

    @property
    def topk_group(self) -> Optional[int]:
        return self._cfg["topk_group"]

    @property
    def routed_scaling_factor(self) -> float:
        return self._cfg["routed_scaling_factor"]

    @property
    def apply_router_weight_on_input(self) -> bool:
        return self._cfg["apply_router_weight_on_input"]

    @property
    def weight_bytes(self) -> int:
        """Bytes of packed weights and scales."""
        return self._cfg["weight_bytes"]

    # Weights (copies).
    def _weight(self, name: str) -> Optional[np.ndarray]:
        w = self._native.weights()
        if name not in w:
            return None
        buf, shape, dtype = w[name]
        return np.frombuffer(buf, dtype=dtype).reshape(shape)

    @property
    def w13_weight(self) -> np.ndarray:
        """Packed uint8 ``[E, 2I, packed(H)]`` (a copy)."""
        return self._weight("w13_weight")  # type: ignore[return-value]

    @property
    def w13_weight_scale(self) -> np.ndarray:
        """E8M0 uint8 ``[E, 2I, H/32]`` (a copy)."""
        return self._weight("w13_weight_scale")  # type: ignore[return-value]

    @property
    def w2_weight(self) -> np.ndarray:
        """Packed uint8 ``[E, H, packed(I)]`` (a copy)."""
        return self._weight("w2_weight")  # type: ignore[return-value]

    @property
    def w2_weight_scale(self) -> np.ndarray:
        """E8M0 uint8 ``[E, H, I/32]`` (a copy)."""
        return self._weight("w2_weight_scale")  # type: ignore[return-value]

    @property
    def w13_bias(self) -> Optional[np.ndarray]:
        return self._weight("w13_bias")

    @property
    def w2_bias(self) -> Optional[np.ndarray]:
        return self._weight("w2_bias")

    @property
    def e_score_correction_bias(self) -> Optional[np.ndarray]:
        return self._weight("e_score_correction_bias")

    @property
    def expert_map(self) -> Optional[np.ndarray]:
        return self._weight("expert_map")


def _layer(layer: Any) -> MoeLayer:
    if not isinstance(layer, MoeLayer):
        raise TypeError(f"layer: expected an mxmoe.MoeLayer, got {type(layer).__name__}")
    return layer


def _batch(layer: MoeLayer, hidden_states: Any, router_logits: Any) -> Tuple[np.ndarray, np.ndarray]:
    x = _floats(hidden_states, "hidden_states")
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] != layer.hidden:
        raise ValueError(
            f"hidden_states: shape {tuple(x.shape)}, expected [M, H = {layer.hidden}] with M >= 1"
        )
    if router_logits is None:
        raise TypeError(
            "router_logits: required (computing the logits from the router's weights is not "
            "supported yet)"
        )
    r = _floats(router_logits, "router_logits")
    if r.shape != (x.shape[0], layer.n_experts):
        raise ValueError(
            f"router_logits: shape {tuple(r.shape)}, expected [M = {x.shape[0]}, "
            f"n_experts = {layer.n_experts}]"
        )
    return x, r


def moe(
    layer: MoeLayer,
    hidden_states: Any,
    router_logits: Any,
    backend: str = "cpu",
    accumulate: str = "f64",
    intermediate: str = "f32",
    *,
    adapter: Optional[str] = None,
    profile: Optional[str] = None,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the MoE layer on a token batch: ``hidden_states`` ``[M, H]`` (float32/float16/
    bfloat16) and ``router_logits`` ``[M, n_experts]``.

    Returns ``(output, topk_ids, topk_weights)``: float32 ``[M, H]``, int32 ``[M, top_k]``
    (global expert ids, ties to the lower index) and float32 ``[M, top_k]``.

    The dataflow is vLLM's (docs/NUMERICS.md 10): route, QDQ the input (scheme's activation
    format, the layer's scale mode), GEMM1 + bias, activation, **QDQ the intermediate**, GEMM2
    + bias, times the router weight, summed over the top-k slots in slot order. ``backend``:
    ``cpu`` (the exact reference), ``wgpu`` (GPU; agrees within rel-L2 ``info()["moe_rel_l2"]``)
    or ``auto``. ``accumulate``: ``f64`` (the oracle) or ``f32`` (what GPU kernels do);
    ``intermediate``: ``f32`` (the contract) or ``bf16`` (rounds where vLLM does, for parity).

    ``router_logits`` is required for now: computing the logits from the router's weights
    belongs to the model loader (a later issue). ``profile``: the activation QDQs under a
    compatibility profile (see :func:`quantize`; CPU only; a layer scale mode the profile's
    implementation lacks becomes its own). NaN/Inf logits raise ``ValueError`` naming the token.

    Example::

        >>> out, ids, w = mxmoe.moe(layer, x, logits)          # x [M, H], logits [M, E]
        >>> out.shape, ids.dtype, w.shape
        ((16, 64), dtype('int32'), (16, 2))
    """
    prof = _profile(profile)
    layer = _layer(layer)
    x, r = _batch(layer, hidden_states, router_logits)
    out, ids, w, k = _mxmoe.moe(
        layer._native,
        x.tobytes(),
        r.tobytes(),
        _str(backend, "backend"),
        _str(accumulate, "accumulate"),
        _str(intermediate, "intermediate"),
        adapter,
        prof,
    )
    m = x.shape[0]
    return (
        _f32_out(out, (m, layer.hidden)),
        np.frombuffer(ids, dtype=np.int32).reshape(m, k),
        _f32_out(w, (m, k)),
    )


def verify(
    layer: MoeLayer,
    hidden_states: Any,
    router_logits: Any,
    output: Any,
    topk_ids: Any = None,
    topk_weights: Any = None,
    *,
    tolerance: float = 1e-2,
    profile: Optional[str] = None,
    stages: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Judge a MoE output computed elsewhere (your kernel, vLLM, SGLang) against the reference:
    the same verdict and closest variant as ``mxmoe verify`` on files.

    ``output`` ``[M, H]`` (float32/float16/bfloat16), optional ``topk_ids`` ``[M, top_k]`` and
    ``topk_weights`` ``[M, top_k]`` (compared per token as sets, weights aligned by id). The
    output is judged against the named reference variants ``contract`` (the layer's scale
    mode, f32 intermediates) and ``vllm_bf16`` (bf16 intermediates), each with a tolerance of
    half its distance to the nearest known fault on this layer and batch (capped by
    ``tolerance``); a mismatch is diagnosed by re-running the reference with each known fault
    injected (docs/NUMERICS.md 10.5). Returns a dict:

    - ``verdict``: ``"BIT-EXACT"``, ``"WITHIN TOLERANCE"`` or ``"WRONG"``; ``match`` / ``ok``:
      not WRONG; ``variant``: the matched variant's id or None; ``summary``: the CLI's verdict
      line; ``diagnosis``: ``[{fault, rel_l2}]`` closest first (empty on a match);
    - ``rel_l2``, ``max_abs``: against the contract reference; ``bit_exact``; ``tolerance``
      (the matched variant's, else the contract's);
    - ``closest`` (e.g. ``"even scales, f32 intermediates"``), ``closest_scale_mode``,
      ``closest_intermediate``, ``closest_rel_l2`` (None, None, None, inf when the output holds
      NaN/Inf); ``variants``: all eight (``id``, ``legitimate``, ``variant_tolerance``, ...);
    - ``ids_identical``, ``ids_differ`` (None when ``topk_ids`` is not given: then the ids do
      not enter the verdict), ``ids_total``, ``weights_rel_l2`` (None without ``topk_weights``);
    - ``worst``: ``{token, column, theirs, reference}`` of the largest absolute error.

    ``router_logits`` is required (see :func:`moe`). ``profile`` runs the reference's
    activation QDQs under a compatibility profile (see :func:`quantize`; ``profile`` in the
    dict names it).

    ``stages``: your kernel's intermediates, any of ``input_qdq_out`` ``[M, H]``,
    ``gemm1_out`` ``[M*top_k, 2I]``, ``act_out`` ``[M*top_k, I]``, ``intermediate_qdq_out``
    ``[M*top_k, I]``, ``gemm2_out`` ``[M*top_k, H]`` (per-slot rows in your top-k order,
    docs/NUMERICS.md 10.6). The dict then has ``stages`` (per stage: ``rel_l2``,
    ``tolerance``, ``agrees``, ``nearest_fault``), ``first_differing_stage`` (None when every
    dumped stage agrees) and ``stage_diagnosis`` (the faults closest at that stage).

    Example::

        >>> res = mxmoe.verify(layer, x, logits, my_kernel_output, my_ids, my_weights)
        >>> assert res["ok"], res["summary"]
    """
    layer = _layer(layer)
    x, r = _batch(layer, hidden_states, router_logits)
    m = x.shape[0]
    o = _floats(output, "output")
    if o.shape != (m, layer.hidden):
        raise ValueError(f"output: shape {tuple(o.shape)}, expected [M = {m}, H = {layer.hidden}]")
    ids_b = None
    if topk_ids is not None:
        ids = _ints(topk_ids, "topk_ids")
        if ids.shape != (m, layer.top_k):
            raise ValueError(
                f"topk_ids: shape {tuple(ids.shape)}, expected [M = {m}, top_k = {layer.top_k}]"
            )
        ids_b = ids.tobytes()
    w_b = None
    if topk_weights is not None:
        w = _floats(topk_weights, "topk_weights")
        if w.shape != (m, layer.top_k):
            raise ValueError(
                f"topk_weights: shape {tuple(w.shape)}, expected [M = {m}, top_k = {layer.top_k}]"
            )
        w_b = w.tobytes()
    return _mxmoe.verify(
        layer._native,
        x.tobytes(),
        r.tobytes(),
        o.tobytes(),
        ids_b,
        w_b,
        float(tolerance),
        _profile(profile),
        [(_str(k, "stages key"), _floats(v, k).tobytes()) for k, v in (stages or {}).items()],
    )


# ----------------------------------------------------------------------------------------------
# What is here.


def backends() -> Dict[str, Dict[str, Any]]:
    """The backends and whether they can be opened here: ``{"cpu": {...}, "wgpu": {...},
    "hip": {...}}``, each with ``available`` (bool), ``adapter`` (the device in words, or None)
    and ``reason`` (why it cannot be opened, or None); ``wgpu`` also lists ``adapters``.

    Example::

        >>> mxmoe.backends()["cpu"]["available"]
        True
    """
    return _mxmoe.backends()


def info() -> Dict[str, Any]:
    """Version, formats (``formats`` and their table rows ``format_specs``), ``scale_modes``
    and ``default_scale_mode``, ``schemes`` and the five ``ocp_mx_schemes``, activations,
    scorings, backend names and the MoE tolerance ``moe_rel_l2``.

    Example::

        >>> mxmoe.info()["ocp_mx_schemes"][0]
        'w_mxfp4_a_mxfp4'
    """
    return _mxmoe.info()
