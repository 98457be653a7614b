"""Peer vectors for the `quark` profile: AMD Quark's CPU fake quantization,
`quark.torch.kernel.hw_emulation.hw_emulation_interface.fake_quantize_mx` (the `even` mode is
`quantization/utils.py::even_round`, the scale rule vLLM's Quark OCP MX emulation calls; its
element QDQ is the same `fake_quantize_to_low_precision_fp` C++ kernel).

Run through xref/quark.sh. Writes xref/vectors/quark.safetensors with, per format F and mode M
(floor, ceil, even): `F.input` [B, 32] f32 once per format, `F.M.qdq` [B, 32] f32 (Quark's QDQ
output), `F.M.scale` [B] f32 (the scale Quark divides by, after its zero -> eps fill).
"""
import sys
from importlib.metadata import version
import numpy as np
import torch
from quark.torch.kernel.hw_emulation.hw_emulation_interface import fake_quantize_mx
from quark.torch.quantization.utils import even_round, get_dtype_params
import common

DT = {"mxfp4": "fp4", "mxfp6_e2m3": "fp6_e2m3", "mxfp6_e3m2": "fp6_e3m2",
      "mxfp8_e4m3": "fp8_e4m3", "mxfp8_e5m2": "fp8_e5m2", "mxint8": "int8"}
out, cases = {}, {}
for f, d in DT.items():
    x, desc = common.inputs(f)
    out[f"{f}.input"] = x
    cases[f] = desc
    t = torch.from_numpy(x.copy())
    amax = t.abs().amax(-1, keepdim=True)
    _, _, emax = get_dtype_params(d)
    for m in ("floor", "ceil", "even"):
        y = fake_quantize_mx(t.clone(), -1, 32, m, mx_element_dtype=d)
        out[f"{f}.{m}.qdq"] = y.numpy().astype(np.float32)
        # The scale exactly as fake_quantize_mx computes it (hw_emulation_interface.py).
        if m == "floor":
            s = torch.pow(2, torch.floor(torch.log2(amax)) - emax)
        elif m == "ceil":
            s = torch.pow(2, torch.ceil(torch.log2(amax)) - emax)
        else:
            s = even_round(amax, d)
        s = s.masked_fill(s == 0.0, torch.finfo(torch.float32).eps)
        out[f"{f}.{m}.scale"] = s.reshape(-1).to(torch.float32).numpy()
common.save(sys.argv[1], out, {"peer": "amd-quark", "version": version("amd-quark"),
                               "torch": torch.__version__, "cases": cases})
print(f"amd-quark {version('amd-quark')} (torch {torch.__version__}): {len(DT)} formats x 3 modes")
