"""vLLM-style check: a layer built from random tensors, run by mxmoe.moe, against a MoE written
here in NumPy (routing, weight dequantization from the packed bytes, GEMMs, activation, both
activation QDQ points, weighted sum). Only the QDQ itself is mxmoe's (mxmoe.qdq is checked
against the golden vectors in test_golden.py); everything else is NumPy.
"""

import numpy as np
import pytest

import mxmoe
from conftest import np_dequantize, rel_l2

OCP_MX = [
    "w_mxfp4_a_mxfp4",
    "w_mxfp4_a_mxfp6_e3m2",
    "w_mxfp4_a_mxfp6_e2m3",
    "w_mxfp6_e3m2_a_mxfp6_e3m2",
    "w_mxfp6_e2m3_a_mxfp6_e2m3",
]


def formats_of(scheme):
    w, _, a = scheme[2:].partition("_a_")
    return w, (a or None)


def random_layer(scheme, e=8, h=128, i=64, seed=0, bias=False):
    """Float weights (as a checkpoint would hold them before Quark quantized them), quantized
    with mxmoe.quantize into the vLLM layout."""
    wfmt, _ = formats_of(scheme)
    rng = np.random.default_rng(seed)
    w13 = (rng.standard_normal((e, 2 * i, h)) / np.sqrt(h)).astype(np.float32)
    w2 = (rng.standard_normal((e, h, i)) / np.sqrt(i)).astype(np.float32)
    w13p, s13 = mxmoe.quantize(w13, wfmt, "even")
    w2p, s2 = mxmoe.quantize(w2, wfmt, "even")
    parts = dict(w13p=w13p, s13=s13, w2p=w2p, s2=s2)
    if bias:
        parts["b13"] = (0.1 * rng.standard_normal((e, 2 * i))).astype(np.float32)
        parts["b2"] = (0.1 * rng.standard_normal((e, h))).astype(np.float32)
    return parts


def batch(m, h, e, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, h)).astype(np.float32) * 2.0
    logits = (rng.standard_normal((m, e)) * 2.0).astype(np.float32)
    return x, logits


def numpy_moe(parts, wfmt, afmt, x, logits, top_k, renormalize=True, scale_mode="even",
              intermediate_qdq=True, scoring="softmax", activation="silu", stages=None):
    """The reference MoE in NumPy (f64 GEMMs), vLLM's dataflow (docs/NUMERICS.md 10). With a
    dict ``stages``, fills it with the intermediates under the names of NUMERICS.md 10.6."""
    w13 = np_dequantize(parts["w13p"], parts["s13"], wfmt)  # [E, 2I, H]
    w2 = np_dequantize(parts["w2p"], parts["s2"], wfmt)  # [E, H, I]
    b13, b2 = parts.get("b13"), parts.get("b2")
    m, h = x.shape
    i = w2.shape[2]
    # Route. Selection by the logits, ties to the lower index (softmax is monotonic).
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    if scoring == "softmax":  # vLLM fused_topk: fp32 softmax over all experts, then top-k
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p = p / p.sum(axis=1, keepdims=True)
        w = np.take_along_axis(p, ids, axis=1)
        if renormalize:
            w = w / w.sum(axis=1, keepdims=True)
    else:  # gpt-oss: top-k of the logits, then a softmax over the selected ones
        sel = np.take_along_axis(logits, ids, axis=1)
        p = np.exp(sel - sel.max(axis=1, keepdims=True))
        w = p / p.sum(axis=1, keepdims=True)
    w = w.astype(np.float32)

    def act_qdq(v):
        if afmt is None:
            return np.asarray(v, np.float32).astype(np.float64)
        return mxmoe.qdq(np.asarray(v, np.float32), afmt, scale_mode).astype(np.float64)

    xq = act_qdq(x)  # input QDQ, per token, 32-blocks along H
    out = np.zeros((m, h), np.float64)
    taps = {"gemm1_out": [], "act_out": [], "intermediate_qdq_out": [], "gemm2_out": []}
    for t in range(m):
        for j in range(top_k):
            e = ids[t, j]
            g1 = w13[e] @ xq[t] + (0.0 if b13 is None else b13[e].astype(np.float64))
            if activation == "silu":
                gate, up = g1[:i], g1[i:]
                a = gate / (1.0 + np.exp(-gate)) * up
            else:  # swigluoai: interleaved rows, clamp 7, alpha 1.702
                gate = np.minimum(g1[0::2], 7.0)
                lin = np.clip(g1[1::2], -7.0, 7.0)
                a = gate / (1.0 + np.exp(-1.702 * gate)) * (lin + 1.0)
            a = a.astype(np.float32)
            aq = act_qdq(a[None])[0] if intermediate_qdq else a.astype(np.float64)
            y = w2[e] @ aq + (0.0 if b2 is None else b2[e].astype(np.float64))
            out[t] += y * np.float64(w[t, j])
            for k_, v in (("gemm1_out", g1), ("act_out", a), ("intermediate_qdq_out", aq),
                          ("gemm2_out", y * np.float64(w[t, j]))):
                taps[k_].append(np.asarray(v, np.float32))
    if stages is not None:
        stages["input_qdq_out"] = xq.astype(np.float32)
        stages.update({k_: np.stack(v) for k_, v in taps.items()})
    return out.astype(np.float32), ids.astype(np.int32), w


@pytest.mark.parametrize("scheme", OCP_MX)
def test_moe_matches_numpy(scheme):
    wfmt, afmt = formats_of(scheme)
    e, h, i, m, k = 8, 128, 64, 9, 2
    parts = random_layer(scheme, e, h, i, seed=OCP_MX.index(scheme))
    layer = mxmoe.MoeLayer(parts["w13p"], parts["s13"], parts["w2p"], parts["s2"], scheme,
                           top_k=k, renormalize=True)
    assert (layer.weight_format, layer.activation_format) == (wfmt, afmt)
    x, logits = batch(m, h, e)
    out, ids, w = mxmoe.moe(layer, x, logits)
    ref, ref_ids, ref_w = numpy_moe(parts, wfmt, afmt, x, logits, k)
    assert out.shape == (m, h) and out.dtype == np.float32
    assert ids.shape == (m, k) and ids.dtype == np.int32
    assert np.array_equal(ids, ref_ids)
    np.testing.assert_allclose(w, ref_w, rtol=1e-5, atol=0)
    err = rel_l2(out, ref)
    assert err < 1e-6, f"{scheme}: rel-L2 {err:.3e} against the NumPy MoE"
    # The intermediate QDQ is really there: leaving it out is far off.
    no_iq, _, _ = numpy_moe(parts, wfmt, afmt, x, logits, k, intermediate_qdq=False)
    assert rel_l2(out, no_iq) > 100 * max(err, 1e-7)
    # And the verdict on the NumPy result: within tolerance, same ids, closest = even / f32.
    res = mxmoe.verify(layer, x, logits, ref, ref_ids, ref_w)
    assert res["ok"] and res["ids_identical"], res["summary"]
    assert res["closest"] == "even scales, f32 intermediates"


def test_moe_with_biases_f32_accumulation_and_bf16_inputs():
    ml = pytest.importorskip("ml_dtypes")
    scheme = "w_mxfp4_a_mxfp6_e2m3"
    wfmt, afmt = formats_of(scheme)
    parts = random_layer(scheme, 6, 64, 96, seed=3, bias=True)
    layer = mxmoe.MoeLayer(parts["w13p"], parts["s13"], parts["w2p"], parts["s2"], scheme,
                           top_k=3, renormalize=False, w13_bias=parts["b13"], w2_bias=parts["b2"])
    x, logits = batch(5, 64, 6, seed=4)
    xb = x.astype(ml.bfloat16)
    ref, ref_ids, _ = numpy_moe(parts, wfmt, afmt, xb.astype(np.float32), logits, 3, renormalize=False)
    out, ids, _ = mxmoe.moe(layer, xb, logits)
    assert np.array_equal(ids, ref_ids)
    assert rel_l2(out, ref) < 1e-5
    out32, _, _ = mxmoe.moe(layer, xb, logits, accumulate="f32")
    assert rel_l2(out32, ref) < mxmoe.info()["moe_rel_l2"]


def test_gpt_oss_style_weight_only_swigluoai():
    scheme = "w_mxfp4"
    parts = random_layer(scheme, 8, 64, 64, seed=5, bias=True)
    layer = mxmoe.MoeLayer(parts["w13p"], parts["s13"], parts["w2p"], parts["s2"], scheme,
                           top_k=4, activation="swigluoai", scoring="topk_softmax",
                           w13_bias=parts["b13"], w2_bias=parts["b2"])
    assert layer.activation_format is None
    x, logits = batch(6, 64, 8, seed=6)
    out, ids, w = mxmoe.moe(layer, x, logits)
    ref, ref_ids, ref_w = numpy_moe(parts, "mxfp4", None, x, logits, 4,
                                    scoring="topk_softmax", activation="swigluoai")
    assert np.array_equal(ids, ref_ids)
    np.testing.assert_allclose(w, ref_w, rtol=1e-5)
    assert rel_l2(out, ref) < 1e-5


@pytest.mark.parametrize("scheme", OCP_MX)
def test_verify_names_the_first_differing_stage(scheme):
    # The NumPy MoE's own intermediates agree at every stage; with the intermediate QDQ left
    # out (the vLLM bug class of PR 32120) verify names intermediate_qdq_out and the fault.
    wfmt, afmt = formats_of(scheme)
    e, h, i, m, k = 8, 128, 64, 9, 2
    parts = random_layer(scheme, e, h, i, seed=OCP_MX.index(scheme))
    layer = mxmoe.MoeLayer(parts["w13p"], parts["s13"], parts["w2p"], parts["s2"], scheme,
                           top_k=k, renormalize=True)
    x, logits = batch(m, h, e)
    st = {}
    ref, ids, w = numpy_moe(parts, wfmt, afmt, x, logits, k, stages=st)
    res = mxmoe.verify(layer, x, logits, ref, ids, w, stages=st)
    assert res["ok"] and res["first_differing_stage"] is None, res["stages"]
    assert [s["stage"] for s in res["stages"]] == [
        "input_qdq_out", "gemm1_out", "act_out", "intermediate_qdq_out", "gemm2_out"]
    st = {}
    bad, ids, w = numpy_moe(parts, wfmt, afmt, x, logits, k, intermediate_qdq=False, stages=st)
    res = mxmoe.verify(layer, x, logits, bad, ids, w, stages=st)
    assert not res["ok"]
    assert res["first_differing_stage"] == "intermediate_qdq_out", res["stages"]
    assert res["stage_diagnosis"][0]["fault"] == "intermediate_qdq_missing"
    with pytest.raises(ValueError, match="unknown stage 'gemm3_out'"):
        mxmoe.verify(layer, x, logits, bad, ids, w, stages={"gemm3_out": st["act_out"]})
