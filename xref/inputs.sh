#!/usr/bin/env bash
# The shared inputs (xref/vectors/inputs.safetensors); needs only numpy + safetensors.
set -euo pipefail
cd "$(dirname "$0")"
V=../target/xref/venv-ggml
[ -x $V/bin/python ] || python3 -m venv $V
$V/bin/pip install -q numpy safetensors
$V/bin/python inputs.py vectors/inputs.safetensors
