#!/usr/bin/env bash
# Peer vectors for `--profile ggml`: installs the pinned gguf-py (llama.cpp's `gguf` package) in a
# venv under target/xref and writes xref/vectors/ggml.safetensors. Usage: xref/ggml.sh
set -euo pipefail
cd "$(dirname "$0")"
V=../target/xref/venv-ggml
[ -x $V/bin/python ] || python3 -m venv $V
$V/bin/pip install -q gguf==0.19.0 numpy safetensors
$V/bin/python ggml.py vectors/ggml.safetensors
