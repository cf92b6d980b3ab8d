#!/usr/bin/env bash
# Create .venv with a CPU torch and edge-verl (+ verl 0.9.1 with its core extras, + megatron-core and mbridge
# for verl's Megatron engine on CPU: the megatron-cpu extra). Idempotent.
# torch is installed first and pinned: a later resolve must never pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==${TORCH_VERSION}"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,megatron-cpu]" "torch==${TORCH_VERSION}"
.venv/bin/edge-verl doctor
