#!/usr/bin/env bash
# Peer vectors for `--profile quark`: installs the pinned AMD Quark (amd-quark on PyPI; its CPU
# kernels are JIT-compiled with ninja + g++ on first import) into the torch venv under target/xref,
# writes xref/vectors/quark.safetensors.
set -euo pipefail
cd "$(dirname "$0")"
V=$PWD/../target/xref/venv-torch
[ -x $V/bin/python ] || python3 -m venv $V
$V/bin/python -c "import torch" 2>/dev/null || $V/bin/pip install -q --index-url https://download.pytorch.org/whl/cpu torch || $V/bin/pip install -q torch
# transformers: imported by quark.torch but not declared as a dependency by amd-quark 0.13.
$V/bin/pip install -q amd-quark==0.13 transformers numpy safetensors
PATH=$V/bin:$PATH $V/bin/python quark_vectors.py vectors/quark.safetensors
