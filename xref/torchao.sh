#!/usr/bin/env bash
# Peer vectors for `--profile torchao` (and `--profile nvidia`'s RCEIL cross-check): installs CPU
# torch and the pinned torchao in a venv under target/xref, writes xref/vectors/torchao.safetensors.
set -euo pipefail
cd "$(dirname "$0")"
V=../target/xref/venv-torch
[ -x $V/bin/python ] || python3 -m venv $V
# CPU wheels when that index is reachable; plain PyPI torch otherwise.
$V/bin/python -c "import torch" 2>/dev/null || $V/bin/pip install -q --index-url https://download.pytorch.org/whl/cpu torch || $V/bin/pip install -q torch
$V/bin/pip install -q torchao==0.18.0 numpy safetensors
$V/bin/python torchao_vectors.py vectors/torchao.safetensors
