#!/usr/bin/env bash
# Method: SFT on the reference solutions (EDGE-GRPO baseline) | Model: Qwen/Qwen2.5-Math-7B | Backend: FSDP | GPUs: 8 GPUs (1 node, 80 GB)
# Training setup: verl's SFT trainer on sft_hard_1k.parquet (scripts/prepare_data.py: the RL prompt answered by
# each problem's reference solution); SFT_* variables in recipes/lib/common.sh, every one settable from the
# environment; extra Hydra overrides (verl's sft_trainer_engine config) follow the script name. DRY_RUN=1
# prints the command, ready to paste.
set -euo pipefail
METHOD=sft BACKEND=fsdp KNOBS=edge
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-Math-7B}
TRAIN_SET=sft_hard_1k
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
run_sft_recipe "$@"
