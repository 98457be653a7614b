"""Bad inputs raise Python exceptions that name the argument; nothing panics or crashes."""

import numpy as np
import pytest

import mxmoe


def small_layer(scheme="w_mxfp4_a_mxfp4", e=4, h=64, i=32, **kw):
    wfmt = scheme[2:].partition("_a_")[0]
    rng = np.random.default_rng(0)
    w13, s13 = mxmoe.quantize(rng.standard_normal((e, 2 * i, h)).astype(np.float32), wfmt)
    w2, s2 = mxmoe.quantize(rng.standard_normal((e, h, i)).astype(np.float32), wfmt)
    kw.setdefault("top_k", 2)
    return mxmoe.MoeLayer(w13, s13, w2, s2, scheme, **kw), (w13, s13, w2, s2)


def tokens(m=3, h=64, e=4):
    rng = np.random.default_rng(1)
    return rng.standard_normal((m, h)).astype(np.float32), rng.standard_normal((m, e)).astype(np.float32)


# ---- formats ----------------------------------------------------------------------------------


def test_k_not_a_multiple_of_32():
    with pytest.raises(ValueError, match=r"x: the last dimension is K = 48.*multiple of the MX block size 32"):
        mxmoe.quantize(np.zeros((2, 48), np.float32), "mxfp4")
    with pytest.raises(ValueError, match="x: the last dimension is K = 0"):
        mxmoe.qdq(np.zeros((2, 0), np.float32), "mxfp4")
    with pytest.raises(ValueError, match="packed: the last dimension is 20 bytes"):
        mxmoe.dequantize(np.zeros((2, 20), np.uint8), np.zeros((2, 1), np.uint8), "mxfp4")


def test_wrong_dtypes():
    with pytest.raises(TypeError, match=r"x: dtype float64 is not accepted.*float32"):
        mxmoe.quantize(np.zeros((1, 32)), "mxfp4")
    with pytest.raises(TypeError, match="x: dtype int32"):
        mxmoe.qdq(np.zeros((1, 32), np.int32), "mxfp4")
    with pytest.raises(TypeError, match="x: dtype float64"):
        mxmoe.qdq([[0.0] * 32], "mxfp4")  # a list of Python floats is float64
    with pytest.raises(TypeError, match="packed: dtype float32 is not accepted"):
        mxmoe.dequantize(np.zeros((1, 16), np.float32), np.zeros((1, 1), np.uint8), "mxfp4")
    with pytest.raises(TypeError, match="scales: dtype uint16"):
        mxmoe.dequantize(np.zeros((1, 16), np.uint8), np.zeros((1, 1), np.uint16), "mxfp4")
    with pytest.raises(TypeError, match="x: expected an array, got None"):
        mxmoe.qdq(None, "mxfp4")
    with pytest.raises(TypeError, match="format: expected a str"):
        mxmoe.qdq(np.zeros((1, 32), np.float32), 4)
    with pytest.raises(ValueError, match="x: expected an array with at least one dimension"):
        mxmoe.qdq(np.float32(1.0), "mxfp4")


def test_unknown_names():
    x = np.zeros((1, 32), np.float32)
    with pytest.raises(ValueError, match=r"unknown format 'mxfp5' \(expected one of: mxfp4, mxfp6_e2m3"):
        mxmoe.quantize(x, "mxfp5")
    with pytest.raises(ValueError, match="unknown scale mode 'nearest'"):
        mxmoe.qdq(x, "mxfp4", "nearest")
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        mxmoe.qdq(x, "mxfp4", backend="cuda")
    with pytest.raises(ValueError, match="unknown format"):
        mxmoe.dequantize(np.zeros((1, 16), np.uint8), np.zeros((1, 1), np.uint8), "fp5")


def test_mismatched_packed_and_scales():
    p = np.zeros((2, 16), np.uint8)
    with pytest.raises(ValueError, match=r"scales: shape \(2, 2\) does not match packed \(2, 16\)"):
        mxmoe.dequantize(p, np.zeros((2, 2), np.uint8), "mxfp4")
    with pytest.raises(ValueError, match=r"scales: shape \(3, 1\)"):
        mxmoe.dequantize(p, np.zeros((3, 1), np.uint8), "mxfp4")
    with pytest.raises(ValueError, match="packed: the last dimension is 16 bytes, not a whole number of mxfp6_e2m3 blocks"):
        mxmoe.dequantize(p, np.zeros((2, 1), np.uint8), "mxfp6_e2m3")


def test_hip_is_not_compiled_in():
    if mxmoe.backends()["hip"]["available"]:
        pytest.skip("hip is compiled in here")
    with pytest.raises(RuntimeError, match="hip"):
        mxmoe.qdq(np.zeros((1, 32), np.float32), "mxfp4", backend="hip")


# ---- layers -----------------------------------------------------------------------------------


def test_unknown_scheme_activation_scoring():
    _, (w13, s13, w2, s2) = small_layer()
    with pytest.raises(ValueError, match=r"unknown scheme 'w_mxfp5_a_mxfp4' \(expected one of: w_mxfp4_a_mxfp4"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp5_a_mxfp4", top_k=2)
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2, activation="gelu")
    with pytest.raises(ValueError, match="unknown scoring 'argmax'"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2, scoring="argmax")
    with pytest.raises(ValueError, match="unknown scale mode"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2, scale_mode="x")


def test_layer_shape_errors():
    _, (w13, s13, w2, s2) = small_layer()
    with pytest.raises(ValueError, match=r"w13_weight: shape \(4, 64, 16\), expected \[E = 4, 2I = 64, packed\(H = 64\) = 32\]"):
        mxmoe.MoeLayer(w13[:, :, :16], s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2)
    with pytest.raises(ValueError, match=r"w2_weight_scale: shape \(3, 64, 1\)"):
        mxmoe.MoeLayer(w13, s13, w2, s2[:3], "w_mxfp4_a_mxfp4", top_k=2)
    with pytest.raises(ValueError, match=r"w2_weight: shape \(4, 64, 8\)"):
        mxmoe.MoeLayer(w13, s13, w2[:, :, :8], s2, "w_mxfp4_a_mxfp4", top_k=2)
    with pytest.raises(ValueError, match=r"w13_weight_scale: shape \(4, 64\), expected 3-D"):
        mxmoe.MoeLayer(w13, s13[:, :, 0], w2, s2, "w_mxfp4_a_mxfp4", top_k=2)
    # Packed for FP4 but declared FP6: the byte counts do not fit.
    with pytest.raises(ValueError, match="w13_weight"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp6_e2m3_a_mxfp6_e2m3", top_k=2)
    with pytest.raises(ValueError, match=r"w13_bias: shape \(4, 32\), expected \(4, 64\)"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2, w13_bias=np.zeros((4, 32), np.float32))
    with pytest.raises(TypeError, match="w2_bias: dtype float64"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2, w2_bias=np.zeros((4, 64)))


def test_layer_config_errors_come_from_the_library():
    _, (w13, s13, w2, s2) = small_layer()
    with pytest.raises(ValueError, match=r"top_k = 5 must be in \[1, 4\]"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=5)
    with pytest.raises(ValueError, match="n_group and topk_group must be given together"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2, n_group=2)
    with pytest.raises(ValueError, match="apply_router_weight_on_input needs top_k = 1"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2, apply_router_weight_on_input=True)
    with pytest.raises(ValueError, match="expert_map entry 9 is outside"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2, expert_map=np.array([0, 1, 2, 9]))
    with pytest.raises(TypeError, match="top_k: expected an int"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4", top_k=2.0)
    with pytest.raises(TypeError, match="top_k"):
        mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp4")  # top_k is required


def test_layer_is_read_only():
    layer, _ = small_layer()
    with pytest.raises(AttributeError):
        layer.top_k = 3
    with pytest.raises(AttributeError):
        layer.hidden = 1


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        mxmoe.MoeLayer.load(tmp_path / "nope.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file at all")
    with pytest.raises(ValueError, match="not a valid safetensors file"):
        mxmoe.MoeLayer.load(bad)


# ---- moe / verify -----------------------------------------------------------------------------


def test_moe_shape_and_dtype_errors():
    layer, _ = small_layer()
    x, g = tokens()
    with pytest.raises(ValueError, match=r"hidden_states: shape \(3, 32\), expected \[M, H = 64\]"):
        mxmoe.moe(layer, x[:, :32], g)
    with pytest.raises(ValueError, match=r"router_logits: shape \(2, 4\), expected \[M = 3, n_experts = 4\]"):
        mxmoe.moe(layer, x, g[:2])
    with pytest.raises(ValueError, match=r"router_logits: shape \(3, 5\)"):
        mxmoe.moe(layer, x, np.zeros((3, 5), np.float32))
    with pytest.raises(TypeError, match="hidden_states: dtype float64"):
        mxmoe.moe(layer, x.astype(np.float64), g)
    with pytest.raises(TypeError, match="router_logits: required"):
        mxmoe.moe(layer, x, None)
    with pytest.raises(TypeError, match="layer: expected an mxmoe.MoeLayer"):
        mxmoe.moe("layer.safetensors", x, g)
    with pytest.raises(ValueError, match="unknown accumulation 'f16'"):
        mxmoe.moe(layer, x, g, accumulate="f16")
    with pytest.raises(ValueError, match="unknown intermediate precision 'fp8'"):
        mxmoe.moe(layer, x, g, intermediate="fp8")
    with pytest.raises(ValueError, match="unknown profile 'vllm'"):
        mxmoe.moe(layer, x, g, profile="vllm")
    # A profile runs the activation QDQs its way (quark: the layer's even mode, CPU only).
    out, ids, w = mxmoe.moe(layer, x, g, profile="quark")
    assert out.shape == mxmoe.moe(layer, x, g)[0].shape
    res = mxmoe.verify(layer, x, g, out, ids, w, profile="quark")
    assert res["ok"] and res["bit_exact"] and res["profile"] == "quark", res["summary"]
    with pytest.raises(ValueError, match="unknown profile"):
        mxmoe.verify(layer, x, g, out, profile="nope")


def test_nan_logits():
    layer, _ = small_layer()
    x, g = tokens()
    g[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"router_logits\[1, 2\] is NaN"):
        mxmoe.moe(layer, x, g)
    g[1, 2] = np.inf
    with pytest.raises(ValueError, match=r"router_logits\[1, 2\] is inf"):
        mxmoe.verify(layer, x, g, np.zeros((3, 64), np.float32))


def test_verify_shape_errors():
    layer, _ = small_layer()
    x, g = tokens()
    with pytest.raises(ValueError, match=r"output: shape \(3, 32\), expected \[M = 3, H = 64\]"):
        mxmoe.verify(layer, x, g, np.zeros((3, 32), np.float32))
    with pytest.raises(ValueError, match=r"topk_ids: shape \(3, 1\), expected \[M = 3, top_k = 2\]"):
        mxmoe.verify(layer, x, g, np.zeros((3, 64), np.float32), np.zeros((3, 1), np.int32))
    with pytest.raises(TypeError, match="topk_ids: dtype float32"):
        mxmoe.verify(layer, x, g, np.zeros((3, 64), np.float32), np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"topk_weights: shape \(3, 3\)"):
        mxmoe.verify(layer, x, g, np.zeros((3, 64), np.float32), None, np.zeros((3, 3), np.float32))
