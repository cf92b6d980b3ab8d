#!/usr/bin/env bash
# Method: GEPO | Model: Qwen/Qwen2.5-7B | Backend: FSDP | GPUs: 8 GPUs (1 node, 80 GB)
# Paper knobs (recipes/lib/common.sh); every variable there can be set from the environment, and extra
# Hydra overrides follow the script name. Data: scripts/prepare_data.py --out data.
set -euo pipefail
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B}
DATA_DIR=${DATA_DIR:-data}
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/train_random_1k.parquet}
ROLLOUT_N=${ROLLOUT_N:-16}
# GEPO thresholds come from batch statistics over the step's groups: several prompts per step.
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-32}
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

METHOD_ARGS=(
    algorithm.adv_estimator=gepo
)
run_verl ppo_trainer "${METHOD_ARGS[@]}" "${FSDP_ARGS[@]}" -- "$@"
