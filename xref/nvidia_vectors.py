"""Peer vectors for the `nvidia` profile: NVIDIA Model Optimizer (nvidia-modelopt on PyPI), the
NVIDIA MX quantizer that runs without an NVIDIA GPU: `MXFP8QTensor` (E4M3 elements) and
`MXFP4QTensor` (modelopt/torch/quantization/qtensor/). cuBLAS / cuDNN / TransformerEngine need a
GPU and are not run here.

Run through xref/nvidia.sh. Writes xref/vectors/nvidia.safetensors with, per format F (mxfp8_e4m3,
mxfp4): `F.input` [B, 32] f32, `F.scale` [B] u8 (E8M0), `F.codes` (FP8: [B, 32] fp8 bytes; FP4:
[B, 16] ModelOpt's packed bytes) and `F.dequant` [B, 32] f32.
"""
import sys
from importlib.metadata import version
import numpy as np
import torch
from modelopt.torch.quantization.qtensor.mxfp8_tensor import MXFP8QTensor
from modelopt.torch.quantization.qtensor.mxfp4_tensor import MXFP4QTensor
import common

out, cases = {}, {}
for f in ("mxfp8_e4m3", "mxfp4"):
    x, desc = common.inputs(f)
    out[f"{f}.input"] = x
    cases[f] = desc
    t = torch.from_numpy(x.copy())
    if f == "mxfp8_e4m3":
        q, s = MXFP8QTensor.quantize(t)
        codes = q._quantized_data.view(torch.uint8)
        deq = q.dequantize(dtype=torch.float32, scale=s)
    else:
        q, s = MXFP4QTensor.quantize(t, 32)
        codes = q._quantized_data.view(torch.uint8)
        deq = q.dequantize(dtype=torch.float32, scale=s, block_sizes={-1: 32})
    out[f"{f}.scale"] = s.view(torch.uint8).reshape(-1).numpy().copy()
    out[f"{f}.codes"] = codes.reshape(x.shape[0], -1).numpy().copy()
    out[f"{f}.dequant"] = deq.reshape(x.shape).to(torch.float32).numpy()
common.save(sys.argv[1], out, {"peer": "nvidia-modelopt", "version": version("nvidia-modelopt"),
                               "torch": torch.__version__, "cases": cases})
print(f"nvidia-modelopt {version('nvidia-modelopt')} (torch {torch.__version__}): mxfp8_e4m3, mxfp4")
