#!/usr/bin/env bash
# Method: EDGE-GRPO (EDA + GEC) | Model: Qwen/Qwen2.5-Math-1.5B | Backend: FSDP | GPUs: 8 GPUs (1 node, 80 GB)
# Paper knobs (recipes/lib/common.sh); every variable there can be set from the environment, and extra
# Hydra overrides follow the script name. Data: scripts/prepare_data.py --out data.
set -euo pipefail
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-Math-1.5B}
DATA_DIR=${DATA_DIR:-data}
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/train_hard_1k_gec.parquet}
ROLLOUT_N=${ROLLOUT_N:-8}
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

METHOD_ARGS=(
    algorithm.adv_estimator=edge_eda
    "${GEC_ARGS[@]}"
)
run_verl ppo_trainer "${METHOD_ARGS[@]}" "${FSDP_ARGS[@]}" -- "$@"
