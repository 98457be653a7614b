"""The package's surface: info, backends, stubs, the layer's properties, verify's dict, the GPU
backend when one is present, and the README's example."""

import ast
import inspect
import os
from pathlib import Path

import numpy as np
import pytest

import mxmoe
from conftest import REPO, rel_l2, same_bits

PKG = Path(mxmoe.__file__).parent


def test_info():
    i = mxmoe.info()
    assert i["version"] == mxmoe.__version__
    assert i["formats"] == ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8"]
    assert i["scale_modes"] == ["floor", "even", "ceil", "rceil"] and i["default_scale_mode"] == "even"
    assert i["ocp_mx_schemes"] == [
        "w_mxfp4_a_mxfp4", "w_mxfp4_a_mxfp6_e3m2", "w_mxfp4_a_mxfp6_e2m3",
        "w_mxfp6_e3m2_a_mxfp6_e3m2", "w_mxfp6_e2m3_a_mxfp6_e2m3",
    ]
    assert set(i["ocp_mx_schemes"]) <= set(i["schemes"])
    assert i["format_specs"]["mxfp4"]["max_normal"] == 6.0
    assert 0 < i["moe_rel_l2"] < 1e-1


def test_backends():
    b = mxmoe.backends()
    assert set(b) == {"cpu", "wgpu", "hip"}
    assert b["cpu"]["available"] and b["cpu"]["reason"] is None and b["cpu"]["adapter"]
    for v in b.values():
        assert v["available"] == (v["reason"] is None) == (v["adapter"] is not None)
    assert isinstance(b["wgpu"]["adapters"], list)


def test_stubs_match_the_package():
    """__init__.pyi declares exactly the public names, with the same parameters."""
    stub = ast.parse((PKG / "__init__.pyi").read_text())
    assert (PKG / "py.typed").is_file() and (PKG / "_mxmoe.pyi").is_file()
    decl = {}
    for node in stub.body:
        if isinstance(node, ast.FunctionDef):
            decl[node.name] = node
        elif isinstance(node, ast.ClassDef):
            decl[node.name] = node
    public = [n for n in mxmoe.__all__ if n != "__version__"]
    assert sorted(decl) == sorted(public)

    def params(fn):
        a = fn.args
        return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]

    for name in public:
        obj = getattr(mxmoe, name)
        if inspect.isclass(obj):
            methods = {n.name: n for n in decl[name].body if isinstance(n, ast.FunctionDef)}
            assert params(methods["__init__"]) == list(inspect.signature(obj.__init__).parameters)
            props = {n for n, v in vars(obj).items() if isinstance(v, property)}
            assert props == {n for n, f in methods.items()
                             if any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list)}
        else:
            assert params(decl[name]) == list(inspect.signature(obj).parameters), name
            assert obj.__doc__ and "Example" in obj.__doc__, name


def test_layer_properties():
    rng = np.random.default_rng(0)
    e, h, i = 8, 64, 32
    w13, s13 = mxmoe.quantize(rng.standard_normal((e, 2 * i, h)).astype(np.float32), "mxfp4")
    w2, s2 = mxmoe.quantize(rng.standard_normal((e, h, i)).astype(np.float32), "mxfp4")
    bias = rng.standard_normal(16).astype(np.float32)
    emap = np.array([0, 1, 2, 3, 4, 5, 6, 7] + [-1] * 8, np.int32)
    layer = mxmoe.MoeLayer(w13, s13, w2, s2, "W_MXFP4_A_MXFP4", top_k=4, scoring="sigmoid",
                           e_score_correction_bias=bias, expert_map=emap, n_group=4,
                           topk_group=2, routed_scaling_factor=2.5, renormalize=True)
    assert layer.scheme == "w_mxfp4_a_mxfp4"
    assert (layer.n_experts, layer.local_experts, layer.hidden, layer.inter) == (16, 8, 64, 32)
    assert (layer.top_k, layer.scoring, layer.n_group, layer.topk_group) == (4, "sigmoid", 4, 2)
    assert layer.routed_scaling_factor == 2.5 and layer.renormalize
    assert layer.scale_mode == "even" and layer.activation == "silu"
    assert not layer.apply_router_weight_on_input
    assert layer.weight_bytes == w13.size + s13.size + w2.size + s2.size
    assert same_bits(layer.e_score_correction_bias, bias)
    assert np.array_equal(layer.expert_map, emap) and layer.w13_bias is None
    assert np.array_equal(layer.w13_weight, w13) and np.array_equal(layer.w2_weight_scale, s2)
    assert "w_mxfp4_a_mxfp4" in repr(layer)
    x = rng.standard_normal((7, h)).astype(np.float32)
    g = rng.standard_normal((7, 16)).astype(np.float32)
    out, ids, w = mxmoe.moe(layer, x, g)
    assert ids.shape == (7, 4) and ids.min() >= 0 and ids.max() < 16
    # Tokens routed only to experts that live elsewhere contribute nothing for those slots.
    assert np.isfinite(out).all()


def test_gpt_oss_blocks_layout_is_accepted():
    rng = np.random.default_rng(1)
    e, h, i = 4, 64, 32
    w13, s13 = mxmoe.quantize(rng.standard_normal((e, 2 * i, h)).astype(np.float32), "mxfp4")
    w2, s2 = mxmoe.quantize(rng.standard_normal((e, h, i)).astype(np.float32), "mxfp4")
    a = mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4", top_k=2, activation="swigluoai")
    b = mxmoe.MoeLayer(w13.reshape(e, 2 * i, h // 32, 16), s13, w2.reshape(e, h, i // 32, 16), s2,
                       "w_mxfp4", top_k=2, activation="swigluoai")
    x = rng.standard_normal((3, h)).astype(np.float32)
    g = rng.standard_normal((3, e)).astype(np.float32)
    assert same_bits(mxmoe.moe(a, x, g)[0], mxmoe.moe(b, x, g)[0])


def test_verify_without_routing_and_with_bf16_output():
    ml = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(2)
    e, h, i = 4, 64, 64
    w13, s13 = mxmoe.quantize(rng.standard_normal((e, 2 * i, h)).astype(np.float32), "mxfp6_e2m3")
    w2, s2 = mxmoe.quantize(rng.standard_normal((e, h, i)).astype(np.float32), "mxfp6_e2m3")
    layer = mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp6_e2m3_a_mxfp6_e2m3", top_k=2)
    x = rng.standard_normal((6, h)).astype(np.float32)
    g = rng.standard_normal((6, e)).astype(np.float32)
    out, ids, w = mxmoe.moe(layer, x, g)
    r = mxmoe.verify(layer, x, g, out)
    assert r["verdict"] == "BIT-EXACT" and r["ids_identical"] is None and r["weights_rel_l2"] is None
    assert r["rel_l2"] == 0.0 and r["ids_total"] == 12
    # A kernel that writes bf16: not bit-exact, within tolerance (the references are rounded to
    # bf16 before comparing, so it matches the contract exactly).
    rb = mxmoe.verify(layer, x, g, out.astype(ml.bfloat16), ids, w)
    assert rb["verdict"] == "WITHIN TOLERANCE" and rb["ids_identical"] and rb["weights_rel_l2"] == 0.0
    assert 0 < rb["rel_l2"] < 1e-2 and set(rb["worst"]) == {"token", "column", "theirs", "reference"}
    assert rb["summary"].startswith("WITHIN TOLERANCE (rel-L2 ")
    assert rb["variant"] == "contract"
    # A tighter tolerance makes a perturbed output WRONG.
    noisy = out * np.float32(1 + 1e-3)
    assert mxmoe.verify(layer, x, g, noisy, ids, w, tolerance=1e-6)["verdict"] == "WRONG"


def _gpu_or_skip():
    b = mxmoe.backends()["wgpu"]
    if not b["available"]:
        if os.environ.get("MXMOE_REQUIRE_GPU") == "1":
            pytest.fail(f"MXMOE_REQUIRE_GPU=1 but wgpu is not available: {b['reason']}")
        pytest.skip(f"no wgpu adapter: {b['reason']}")


def test_wgpu_backend_agrees_with_the_cpu():
    _gpu_or_skip()
    rng = np.random.default_rng(4)
    x = (rng.standard_t(3, size=(6, 128)) * 4).astype(np.float32)
    for fmt in mxmoe.info()["formats"]:
        for mode in mxmoe.info()["scale_modes"]:
            p, s = mxmoe.quantize(x, fmt, mode, backend="wgpu")
            pc, sc = mxmoe.quantize(x, fmt, mode)
            assert np.array_equal(p, pc) and np.array_equal(s, sc), (fmt, mode)
            assert same_bits(mxmoe.qdq(x, fmt, mode, backend="wgpu"), mxmoe.qdq(x, fmt, mode))
            assert same_bits(mxmoe.dequantize(p, s, fmt, backend="wgpu"), mxmoe.dequantize(p, s, fmt))
    e, h, i = 8, 128, 64
    w13, s13 = mxmoe.quantize(rng.standard_normal((e, 2 * i, h)).astype(np.float32), "mxfp4")
    w2, s2 = mxmoe.quantize(rng.standard_normal((e, h, i)).astype(np.float32), "mxfp4")
    layer = mxmoe.MoeLayer(w13, s13, w2, s2, "w_mxfp4_a_mxfp6_e3m2", top_k=2)
    xs = rng.standard_normal((9, h)).astype(np.float32)
    g = rng.standard_normal((9, e)).astype(np.float32)
    out, ids, w = mxmoe.moe(layer, xs, g, backend="wgpu")
    ref, rids, rw = mxmoe.moe(layer, xs, g)
    assert np.array_equal(ids, rids)
    assert rel_l2(out, ref) <= mxmoe.info()["moe_rel_l2"]
    assert mxmoe.verify(layer, xs, g, out, ids, w)["ok"]


def test_readme_python_example_runs(tmp_path):
    """The README's Python example, as written there, passes."""
    text = (REPO / "README.md").read_text()
    m = text.split("## Python", 1)
    assert len(m) == 2, "README.md has a '## Python' section"
    blocks = m[1].split("```python", 1)[1].split("```", 1)[0]
    path = tmp_path / "test_readme_example.py"
    path.write_text(blocks)
    ns: dict = {}
    exec(compile(blocks, str(path), "exec"), ns)
    tests = [v for k, v in ns.items() if k.startswith("test_") and callable(v)]
    assert tests
    for t in tests:
        t()
