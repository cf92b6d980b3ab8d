#!/usr/bin/env bash
# Method: EDGE-GRPO control (GEC injects another problem's wrong answer and solution, rewarded as the row's own) | Model: Qwen/Qwen2.5-Math-7B | Backend: Megatron | GPUs: 8 GPUs (1 node, 80 GB), Megatron TP=2
# Training setup: EDGE-GRPO's (G = 8, 1 prompt per step, 1000 steps), in recipes/lib/common.sh, where
# every variable can be set from the environment; extra Hydra overrides follow the script name. DRY_RUN=1
# prints the command, ready to paste.
set -euo pipefail
METHOD=edge_placebo BACKEND=megatron KNOBS=edge
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-Math-7B}
TRAIN_SET=train_hard_1k_gec
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
run_recipe "$@"
