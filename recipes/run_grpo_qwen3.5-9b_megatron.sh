#!/usr/bin/env bash
# Method: GRPO baseline (GEPO knobs) | Model: Qwen/Qwen3.5-9B | Backend: Megatron | GPUs: 8 GPUs (1 node, 80 GB), Megatron TP=2
# Paper knobs (recipes/lib/common.sh); every variable there can be set from the environment, and extra
# Hydra overrides follow the script name. Data: scripts/prepare_data.py --out data.
set -euo pipefail
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3.5-9B}
DATA_DIR=${DATA_DIR:-data}
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/train_random_1k.parquet}
ROLLOUT_N=${ROLLOUT_N:-16}
# GEPO thresholds come from batch statistics over the step's groups: several prompts per step.
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-32}
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

METHOD_ARGS=(
    algorithm.adv_estimator=grpo
)
run_verl ppo_megatron_trainer "${METHOD_ARGS[@]}" "${MEGATRON_ARGS[@]}" -- "$@"
