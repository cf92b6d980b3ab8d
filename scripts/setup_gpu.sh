#!/usr/bin/env bash
# GPU set-up (Linux, NVIDIA, CUDA 13 drivers): a venv with edge-verl and verl 0.9.1's own supported GPU
# stack, so the recipes run as written. Idempotent. Not exercised by this project's CI (no GPU there).
#   bash scripts/setup_gpu.sh              # FSDP recipes: verl[vllm,fsdp] (vLLM 0.24.0, torch 2.11.0, FlashAttention)
#   BACKEND=megatron bash scripts/setup_gpu.sh   # + verl[megatron] (megatron-core, megatron-bridge 0.5.2,
#                                                #   mbridge, transformer-engine, apex)
# VENV (default .venv-gpu) and PYTHON (default python3) can be set. FlashAttention / transformer-engine /
# apex build from source where no wheel matches: expect a long first install and a CUDA toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv-gpu}
BACKEND=${BACKEND:-fsdp}
case "$BACKEND" in
    fsdp) EXTRA=gpu ;;
    megatron) EXTRA=gpu-megatron ;;
    *) echo "BACKEND=$BACKEND: use fsdp or megatron" >&2; exit 2 ;;
esac
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install --disable-pip-version-check -e ".[${EXTRA},test]"
"$VENV/bin/edge-verl" doctor
echo "ready: source $VENV/bin/activate; then e.g. bash recipes/run_edge_qwen2.5-math-7b_fsdp.sh"
