#!/usr/bin/env bash
# Method: GEPO without low-entropy control (ablation: positives in confident groups not attenuated, alpha_low = 1) | Model: Qwen/Qwen2.5-7B | Backend: FSDP | GPUs: 8 GPUs (1 node, 80 GB)
# Training setup: GEPO's (K = 16, 32 prompts per step, 300 steps), in recipes/lib/common.sh, where every
# variable can be set from the environment; extra Hydra overrides follow the script name. DRY_RUN=1 prints
# the command, ready to paste.
set -euo pipefail
METHOD=gepo_no_low BACKEND=fsdp KNOBS=gepo
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B}
TRAIN_SET=train_random_1k
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
run_recipe "$@"
