#!/usr/bin/env bash
# Method: GRPO baseline (GEPO knobs) | Model: Qwen/Qwen3.5-9B | Backend: Megatron | GPUs: 8 GPUs (1 node, 80 GB), Megatron TP=2
# Training setup: GEPO's (K = 16, 32 prompts per step, 300 steps), in recipes/lib/common.sh, where every
# variable can be set from the environment; extra Hydra overrides follow the script name. DRY_RUN=1 prints
# the command, ready to paste.
set -euo pipefail
METHOD=grpo BACKEND=megatron KNOBS=gepo
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3.5-9B}
TRAIN_SET=train_random_1k
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
run_recipe "$@"
