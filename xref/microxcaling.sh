#!/usr/bin/env bash
# Peer vectors for `--profile microxcaling` and `--profile ocp`. microxcaling is not published on
# PyPI: this uses a checkout of github.com/microsoft/microxcaling at the pinned commit (set
# MICROXCALING_SRC to an existing checkout, or it is cloned under target/xref), with CPU torch
# from the torch venv. Writes xref/vectors/microxcaling.safetensors.
set -euo pipefail
cd "$(dirname "$0")"
COMMIT=7bc41952de394f5cc5e782baf132e7c7542eb4e4
V=$PWD/../target/xref/venv-torch
[ -x $V/bin/python ] || python3 -m venv $V
$V/bin/python -c "import torch" 2>/dev/null || $V/bin/pip install -q --index-url https://download.pytorch.org/whl/cpu torch || $V/bin/pip install -q torch
$V/bin/pip install -q numpy safetensors
SRC=${MICROXCALING_SRC:-$PWD/../target/xref/microxcaling}
if [ ! -d "$SRC/mx" ]; then
  git clone -q https://github.com/microsoft/microxcaling "$SRC"
  git -C "$SRC" checkout -q $COMMIT
fi
PYTHONPATH=$SRC $V/bin/python microxcaling_vectors.py vectors/microxcaling.safetensors $COMMIT
