"""Peer vectors for the `ggml` profile: llama.cpp's gguf-py MXFP4 (gguf/quants.py, a numpy port of
ggml-quants.c `quantize_row_mxfp4_ref` / `dequantize_row_mxfp4`).

Run through xref/ggml.sh (installs the pinned gguf-py in a venv under target/). Writes
xref/vectors/ggml.safetensors: `input` [B, 32] f32, `blocks` [B, 17] u8 (ggml block_mxfp4: the
E8M0 byte, then 16 bytes of split-order nibbles), `dequant` [B, 32] f32, `defined` [B] u8 (0 where
ggml's float-to-uint8 cast of the exponent is undefined behaviour: NaN/Inf amax, or an exponent
below 0; the Rust test skips those blocks).
"""
import sys
import warnings
import numpy as np
import gguf
from gguf.quants import quantize, dequantize
from gguf.constants import GGMLQuantizationType as T
from importlib.metadata import version
import common

x, desc = common.inputs("mxfp4")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    q = quantize(x, T.MXFP4)
    d = dequantize(q, T.MXFP4).reshape(x.shape).astype(np.float32)
q = np.asarray(q, dtype=np.uint8).reshape(x.shape[0], 17)
amax = np.abs(x).max(axis=1)
with np.errstate(divide="ignore", invalid="ignore"):
    e = np.floor(np.log2(amax)) - 2 + 127
defined = (np.isfinite(amax) & ((amax == 0) | ((e >= 0) & (e <= 255)))).astype(np.uint8)
common.save(sys.argv[1], {"input": x, "blocks": q, "dequant": d, "defined": defined},
            {"peer": "gguf-py (llama.cpp)", "version": version("gguf"), "numpy": np.__version__,
             "format": "mxfp4", "cases": desc})
print(f"ggml: {x.shape[0]} blocks, {int(defined.sum())} defined, gguf {version('gguf')}")
