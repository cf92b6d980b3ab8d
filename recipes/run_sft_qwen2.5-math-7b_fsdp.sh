#!/usr/bin/env bash
# EDGE-GRPO baseline: SFT on the reference solutions (verl's SFT trainer).
# Qwen/Qwen2.5-Math-7B | FSDP | 8 GPUs (1 node, 80 GB each) | this project's SFT setup (the paper gives none)
# Run: bash recipes/run_sft_qwen2.5-math-7b_fsdp.sh [Hydra overrides] (DRY_RUN=1 prints the command)
# Any variable can be set in the environment; what each does, its default and why, what a run needs: docs/recipes.md
# Written by `edge-verl recipe --write` from edge_verl/methods.py and edge_verl/recipes.py; change those, not this.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/defaults.sh"  # REPO, DATA_DIR, the defaults, recipes/lib/launch.sh
METHOD=sft BACKEND=fsdp  # what this recipe runs: part of the run's name and identity
# ---- model and hardware ----
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-Math-7B}
NNODES=${NNODES:-1}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}
# ---- this project's SFT setup (the paper gives none) ----
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/sft_hard_1k.parquet}
SFT_LR=${SFT_LR:-1e-5}
SFT_EPOCHS=${SFT_EPOCHS:-3}
SFT_BATCH_SIZE=${SFT_BATCH_SIZE:-32}
SFT_MAX_LENGTH=${SFT_MAX_LENGTH:-2048}
run_defaults  # every other variable: recipes/lib/defaults.sh

OVERRIDES=(
    data.train_files="$TRAIN_FILE" data.val_files=null data.messages_key=messages
    data.train_batch_size="$SFT_BATCH_SIZE" data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    data.max_length="$SFT_MAX_LENGTH" data.truncation=error
    model.path="$MODEL_PATH" model.enable_gradient_checkpointing=True
    optim.lr="$SFT_LR" optim.lr_warmup_steps_ratio=0.0 optim.lr_scheduler_type=cosine optim.clip_grad=1.0
    "checkpoint.save_contents=[model,optimizer,extra,hf_model]" trainer.default_local_dir="$CKPT_DIR"
    trainer.project_name="$PROJECT_NAME" trainer.experiment_name="$EXPERIMENT_NAME" trainer.total_epochs="$SFT_EPOCHS"
    trainer.logger="$LOGGER" trainer.seed="$SEED" trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$NGPUS_PER_NODE"
    trainer.max_ckpt_to_keep="$MAX_CKPT_TO_KEEP"
)
prepare_launch sft "$@"  # the checks before verl (recipes/lib/launch.sh); DRY_RUN=1: print instead
"${LAUNCH[@]}" -m torch.distributed.run --nnodes="$NNODES" --nproc_per_node="$NGPUS_PER_NODE" \
    -m verl.trainer.sft_trainer "${OVERRIDES[@]}" "$@"
