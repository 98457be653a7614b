"""Peer vectors for the `microxcaling` (and `ocp`) profiles: microsoft/microxcaling's PyTorch MX
emulation (`mx.mx_ops._quantize_mx`, the path `quantize_mx_op` takes on CPU with the default
`custom_cuda=False`), on CPU.

microxcaling is not on PyPI; xref/microxcaling.sh puts a checkout of the pinned commit on
PYTHONPATH. Writes xref/vectors/microxcaling.safetensors with, per format F: `F.input` [B, 32] f32,
`F.nearest.qdq` (its default rounding, ties away from zero) and `F.even.qdq` (round="even", RNE),
[B, 32] f32; block 32, scale_bits 8, shared_exp_method "max", no fp32 subnormal flush.
"""
import sys
import subprocess
import numpy as np
import torch
from mx.mx_ops import _quantize_mx
from mx.formats import ElemFormat
import common

FMT = {"mxfp4": ElemFormat.fp4, "mxfp6_e2m3": ElemFormat.fp6_e2m3, "mxfp6_e3m2": ElemFormat.fp6_e3m2,
       "mxfp8_e4m3": ElemFormat.fp8_e4m3, "mxfp8_e5m2": ElemFormat.fp8_e5m2, "mxint8": ElemFormat.int8}
out, cases = {}, {}
for f, ef in FMT.items():
    x, desc = common.inputs(f)
    out[f"{f}.input"] = x
    cases[f] = desc
    for r in ("nearest", "even"):
        y = _quantize_mx(torch.from_numpy(x.copy()), 8, ef, shared_exp_method="max", axes=[-1],
                         block_size=32, round=r, flush_fp32_subnorms=False, custom_cuda=False)
        out[f"{f}.{r}.qdq"] = y.numpy().astype(np.float32)
commit = sys.argv[2]
common.save(sys.argv[1], out, {"peer": "microsoft/microxcaling", "version": commit,
                               "torch": torch.__version__, "cases": cases})
print(f"microxcaling {commit[:8]} (torch {torch.__version__}): {len(FMT)} formats x 2 roundings")
