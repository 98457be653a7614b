"""Agreement with the CLI, bit for bit: the same files through `mxmoe quantize / dequantize /
qdq / moe / verify` and through the Python API give the same bytes and the same verdicts.

The binary is $MXMOE_BIN, else target/release/mxmoe or target/debug/mxmoe of this checkout.
"""

import re

import numpy as np
import pytest

import mxmoe
from conftest import run_cli, same_bits, st_load, st_save

FORMATS = mxmoe.info()["formats"]


def tensors(seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_t(3, size=(7, 96)) * 3).astype(np.float32)
    a[0, :32] = 0.0
    a[1, 3] = -0.0
    a[2, 40] = np.float32(1e-41)
    b = (rng.standard_normal((4, 64)) * 1e-3).astype(np.float32)
    b[3, 5] = np.nan
    return {"a": a, "b": b}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", ["floor", "even", "ceil", "rceil"])
def test_quantize_dequantize_qdq_files(mxmoe_bin, tmp_path, fmt, mode):
    src = tmp_path / "in.safetensors"
    t = tensors(FORMATS.index(fmt))
    st_save(src, t)
    run_cli(mxmoe_bin, "quantize", "--format", fmt, "--scale-mode", mode,
            "--input", src, "--output", tmp_path / "q.safetensors")
    q = st_load(tmp_path / "q.safetensors")
    run_cli(mxmoe_bin, "qdq", "--format", fmt, "--scale-mode", mode,
            "--input", src, "--output", tmp_path / "qdq.safetensors")
    y = st_load(tmp_path / "qdq.safetensors")
    run_cli(mxmoe_bin, "dequantize", "--input", tmp_path / "q.safetensors",
            "--output", tmp_path / "d.safetensors")
    d = st_load(tmp_path / "d.safetensors")
    for name, x in t.items():
        packed, scales = mxmoe.quantize(x, fmt, mode)
        assert q[name].dtype == np.uint8 and q[name + "_scale"].dtype == np.uint8
        assert q[name].tobytes() == packed.tobytes() and q[name].shape == packed.shape
        assert q[name + "_scale"].tobytes() == scales.tobytes()
        assert same_bits(y[name], mxmoe.qdq(x, fmt, mode))
        assert same_bits(d[name], mxmoe.dequantize(q[name], q[name + "_scale"], fmt))


def test_qdq_of_f16_file(mxmoe_bin, tmp_path):
    x = tensors()["a"].astype(np.float16)
    st_save(tmp_path / "h.safetensors", {"x": x})
    run_cli(mxmoe_bin, "qdq", "--format", "mxfp6_e3m2", "--input", tmp_path / "h.safetensors",
            "--output", tmp_path / "y.safetensors")
    assert same_bits(st_load(tmp_path / "y.safetensors")["x"], mxmoe.qdq(x, "mxfp6_e3m2"))


@pytest.fixture(scope="module")
def generated(mxmoe_bin, tmp_path_factory):
    """A layer and batch from `mxmoe gen`, and the CLI's result on them."""
    d = tmp_path_factory.mktemp("gen")
    run_cli(mxmoe_bin, "gen", "--scheme", "w_mxfp4_a_mxfp6_e2m3", "--experts", "8",
            "--hidden", "128", "--inter", "64", "--top-k", "2", "--tokens", "11", "--bias",
            "--layer-out", d / "layer.safetensors", "--batch-out", d / "batch.safetensors")
    run_cli(mxmoe_bin, "moe", "--layer", d / "layer.safetensors", "--input",
            d / "batch.safetensors", "--output", d / "result.safetensors")
    return d


def test_moe_on_cli_files_is_bit_identical(generated):
    d = generated
    layer = mxmoe.MoeLayer.load(d / "layer.safetensors")
    assert (layer.scheme, layer.n_experts, layer.hidden, layer.inter, layer.top_k) == (
        "w_mxfp4_a_mxfp6_e2m3", 8, 128, 64, 2)
    assert layer.w13_bias is not None and layer.w13_bias.shape == (8, 128)
    b = st_load(d / "batch.safetensors")
    r = st_load(d / "result.safetensors")
    out, ids, w = mxmoe.moe(layer, b["hidden_states"], b["router_logits"])
    assert same_bits(out, r["output"])
    assert np.array_equal(ids, r["topk_ids"]) and same_bits(w, r["topk_weights"])


def test_layer_built_in_python_runs_in_the_cli(mxmoe_bin, tmp_path):
    rng = np.random.default_rng(3)
    e, h, i = 6, 64, 96
    w13, s13 = mxmoe.quantize(rng.standard_normal((e, 2 * i, h)).astype(np.float32), "mxfp6_e3m2")
    w2, s2 = mxmoe.quantize(rng.standard_normal((e, h, i)).astype(np.float32), "mxfp6_e3m2")
    layer = mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp6_e3m2_a_mxfp6_e3m2", top_k=3,
                           renormalize=False, scale_mode="rceil",
                           expert_map=np.array([0, 1, 2, 3, 4, 5, -1, -1], np.int64))
    layer.save(tmp_path / "l.safetensors")
    x = rng.standard_normal((5, h)).astype(np.float32)
    g = rng.standard_normal((5, 8)).astype(np.float32)
    st_save(tmp_path / "b.safetensors", {"hidden_states": x, "router_logits": g})
    run_cli(mxmoe_bin, "moe", "--layer", tmp_path / "l.safetensors", "--input",
            tmp_path / "b.safetensors", "--output", tmp_path / "r.safetensors")
    r = st_load(tmp_path / "r.safetensors")
    out, ids, w = mxmoe.moe(layer, x, g)
    assert same_bits(out, r["output"]) and np.array_equal(ids, r["topk_ids"])
    back = mxmoe.MoeLayer.load(tmp_path / "l.safetensors")
    assert repr(back) == repr(layer)
    assert np.array_equal(back.expert_map, [0, 1, 2, 3, 4, 5, -1, -1])
    assert np.array_equal(back.w2_weight, w2) and np.array_equal(back.w13_weight_scale, s13)


def cli_verdict(bin_, d, result):
    r = run_cli(bin_, "verify", "--layer", d / "layer.safetensors", "--input",
                d / "batch.safetensors", "--result", result, check=False)
    verdict = re.search(r"^verdict: (BIT-EXACT|WITHIN TOLERANCE|WRONG)(.*)$", r.stdout, re.M)
    closest = re.search(r"^closest reference: (.*) \(rel-L2 (\S+)\)$", r.stdout, re.M)
    assert verdict and closest, r.stdout + r.stderr
    return r.returncode, verdict.group(1), verdict.group(0)[len("verdict: "):], closest.group(1)


def perturbed(d, kind):
    layer = mxmoe.MoeLayer.load(d / "layer.safetensors")
    b = st_load(d / "batch.safetensors")
    x, g = b["hidden_states"], b["router_logits"]
    out, ids, w = mxmoe.moe(layer, x, g)
    out, ids, w = out.copy(), ids.copy(), w.copy()
    rng = np.random.default_rng(9)
    if kind == "noise":
        out = out * (1 + 1e-3 * rng.standard_normal(out.shape)).astype(np.float32)
    elif kind == "bf16":
        out, ids, w = mxmoe.moe(layer, x, g, intermediate="bf16")
    elif kind == "floor":
        lf = mxmoe.MoeLayer(layer.w13_weight, layer.w13_weight_scale, layer.w2_weight,
                            layer.w2_weight_scale, layer.scheme, top_k=layer.top_k,
                            w13_bias=layer.w13_bias, w2_bias=layer.w2_bias, scale_mode="floor")
        out, ids, w = mxmoe.moe(lf, x, g, accumulate="f32")
    elif kind == "wrong":
        out = out + 0.5 * rng.standard_normal(out.shape).astype(np.float32) * np.abs(out).mean()
    elif kind == "ids":
        ids[0] = ids[0, ::-1]
    elif kind == "nan":
        out[2, 7] = np.nan
    return layer, x, g, out, ids, w


@pytest.mark.parametrize("kind", ["exact", "noise", "bf16", "floor", "wrong", "ids", "nan"])
def test_verify_agrees_with_the_cli(mxmoe_bin, generated, tmp_path, kind):
    d = generated
    layer, x, g, out, ids, w = perturbed(d, kind)
    res_file = tmp_path / "theirs.safetensors"
    st_save(res_file, {"output": out, "topk_ids": ids, "topk_weights": w})
    rc, verdict, line, closest = cli_verdict(mxmoe_bin, d, res_file)
    res = mxmoe.verify(layer, x, g, out, ids, w)
    assert res["verdict"] == verdict, (res, line)
    assert res["summary"] == line
    assert (res["closest"] or "") == closest  # the CLI prints nothing when no variant is finite
    assert res["ok"] == (rc == 0)
    assert len(res["variants"]) == 8
    # bf16 intermediates are the legitimate variant vllm_bf16 (bit-exact with it); another
    # activation scale mode is a fault (activation_scale_mode_floor); ids reordered without
    # their weights give other weights per expert.
    want = {"exact": "BIT-EXACT", "noise": "WITHIN TOLERANCE", "bf16": "BIT-EXACT",
            "floor": "WRONG", "wrong": "WRONG", "ids": "WRONG", "nan": "WRONG"}[kind]
    assert verdict == want, line
    if kind == "bf16":
        assert closest == "even scales, bf16 intermediates" and res["variant"] == "vllm_bf16"
    if kind == "floor":
        assert res["diagnosis"][0]["fault"] == "activation_scale_mode_floor", res["diagnosis"]
    if kind == "floor":
        assert closest == "floor scales, f32 intermediates"
    if kind == "ids":
        # The same experts in another order (sets agree) but each expert's weight moved: the
        # routing weights, compared per expert, make it WRONG.
        assert res["ids_identical"] is True and res["ids_differ"] == 0
        assert res["weights_rel_l2"] > 1e-4, res["weights_rel_l2"]
    if kind == "nan":
        assert res["closest"] is None and res["worst"]["token"] == 2 and res["worst"]["column"] == 7


def test_cli_binary_is_the_same_version(mxmoe_bin):
    r = run_cli(mxmoe_bin, "info")
    assert r.stdout.startswith(f"mxmoe {mxmoe.__version__}")
    for s in mxmoe.info()["schemes"]:
        assert s in r.stdout
