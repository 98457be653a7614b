"""Peer vectors for the `torchao` profile: torchao's prototype MX formats on CPU
(`torchao.prototype.mx_formats.mx_tensor.to_mx` / `to_dtype`, every ScaleCalculationMode).

Run through xref/torchao.sh. Writes xref/vectors/torchao.safetensors with, per format F (torchao
has no MXINT8) and mode M: `F.input` [B, 32] f32 (once per format), `F.M.scale` [B] u8,
`F.M.codes` u8 (FP4: torchao's packed bytes [B, 16]; FP6: unpacked codes [B, 32]; FP8: the fp8 bytes
[B, 32]) and `F.M.dequant` [B, 32] f32 (to_dtype back to f32).
"""
import sys
from importlib.metadata import version
import numpy as np
import torch
from torchao.prototype.mx_formats.mx_tensor import to_mx, to_dtype
from torchao.prototype.mx_formats.config import ScaleCalculationMode as S
from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
import common

DT = {"mxfp4": torch.float4_e2m1fn_x2, "mxfp6_e2m3": DTYPE_FP6_E2M3, "mxfp6_e3m2": DTYPE_FP6_E3M2,
      "mxfp8_e4m3": torch.float8_e4m3fn, "mxfp8_e5m2": torch.float8_e5m2}
MODES = {"floor": S.FLOOR, "even": S.EVEN, "ceil": S.CEIL, "rceil": S.RCEIL}
out, cases = {}, {}
for f, dt in DT.items():
    x, desc = common.inputs(f)
    out[f"{f}.input"] = x
    cases[f] = desc
    for m, mode in MODES.items():
        scale, data = to_mx(torch.from_numpy(x.copy()), dt, 32, mode)
        deq = to_dtype(data, scale, dt, 32, torch.float32)
        out[f"{f}.{m}.scale"] = scale.view(torch.uint8).reshape(-1).numpy().copy()
        out[f"{f}.{m}.codes"] = data.view(torch.uint8).reshape(x.shape[0], -1).numpy().copy()
        out[f"{f}.{m}.dequant"] = deq.reshape(x.shape).numpy().astype(np.float32)
common.save(sys.argv[1], out, {"peer": "torchao", "version": version("torchao"),
                               "torch": torch.__version__, "cases": cases})
print(f"torchao {version('torchao')} (torch {torch.__version__}): {len(DT)} formats x {len(MODES)} modes")
