#!/usr/bin/env bash
# Peer vectors for `--profile nvidia`: installs the pinned NVIDIA Model Optimizer into the torch
# venv under target/xref and writes xref/vectors/nvidia.safetensors.
set -euo pipefail
cd "$(dirname "$0")"
V=$PWD/../target/xref/venv-torch
[ -x $V/bin/python ] || python3 -m venv $V
$V/bin/python -c "import torch" 2>/dev/null || $V/bin/pip install -q --index-url https://download.pytorch.org/whl/cpu torch || $V/bin/pip install -q torch
$V/bin/pip install -q nvidia-modelopt==0.47.0 numpy safetensors
$V/bin/python nvidia_vectors.py vectors/nvidia.safetensors
