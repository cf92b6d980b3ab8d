#!/usr/bin/env bash
# EDGE-GRPO baseline: SFT on the reference solutions (verl's SFT trainer).
# Model: Qwen/Qwen2.5-Math-7B | Backend: FSDP | GPUs: 8 (1 node, 80 GB each)
# Training setup: this project's, every one settable (the paper gives none): lr 1e-5 (SFT_LR), 3 epochs
# (SFT_EPOCHS), 32 sequences per step (SFT_BATCH_SIZE), on the training set's reference solutions after its RL
# prompt
#
# Needs: the FSDP GPU stack with verl 0.9.1 and edge_verl, in $PYTHON's environment (default: the active one):
#          bash scripts/setup_gpu.sh   (docs/INSTALL_GPU.md)
#        the data, sft_hard_1k.parquet:
#          python scripts/prepare_data.py --out data
# Run:   bash recipes/run_sft_qwen2.5-math-7b_fsdp.sh [Hydra overrides, which go last and win]
#        DRY_RUN=1 bash recipes/run_sft_qwen2.5-math-7b_fsdp.sh   (prints the command)
# Every variable of the user-adjustable block below can be set in the environment; runs from any directory.
#
# Written by `edge-verl recipe --write` from edge_verl/methods.py (the method) and edge_verl/recipes.py (model,
# backend, training setup); tests/test_recipes.py holds this file equal to them. To change a method, change its
# definition and write the recipes again; to try something, copy this file.

set -euo pipefail

METHOD=sft BACKEND=fsdp  # what this recipe runs: part of the run's name and identity
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # DATA_DIR and CKPT_ROOT default to its data/ and checkpoints/

# ---- user-adjustable ----
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-Math-7B}
DATA_DIR=${DATA_DIR:-$REPO/data}                      # python scripts/prepare_data.py --out DATA_DIR
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/sft_hard_1k.parquet}  # reference solutions after the RL prompts
NNODES=${NNODES:-1}                                   # several nodes: REPRODUCING.md section 6
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}

SFT_LR=${SFT_LR:-1e-5}
SFT_EPOCHS=${SFT_EPOCHS:-3}
SFT_BATCH_SIZE=${SFT_BATCH_SIZE:-32}                  # sequences per optimizer step
SFT_MAX_LENGTH=${SFT_MAX_LENGTH:-2048}                # prompt + solution tokens; longer rows are an error
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}               # sequences per GPU per forward pass
SEED=${SEED:-42}

PROJECT_NAME=${PROJECT_NAME:-edge_verl}
# The run's name and checkpoint folder: <method>_<model>_<training set>_<backend>_seed<N>
MODEL_TAG=$(basename "$MODEL_PATH" | tr '[:upper:]' '[:lower:]')
TRAIN_TAG=$(basename "$TRAIN_FILE" .parquet)
EXPERIMENT_NAME=${EXPERIMENT_NAME:-${METHOD}_${MODEL_TAG}_${TRAIN_TAG#train_}_${BACKEND}_seed${SEED}}
CKPT_ROOT=${CKPT_ROOT:-$REPO/checkpoints}             # several nodes: a path every node sees
CKPT_DIR=${CKPT_DIR:-$CKPT_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME}
RUN_TAG=${RUN_TAG:-}                                  # part of the run identity (edge-verl reproduce: table/row)
MAX_CKPT_TO_KEEP=${MAX_CKPT_TO_KEEP:-2}               # a 7B checkpoint: ~15 GB of HF weights + optimizer state
# verl's loggers: console and file (no account needed); [console,file,wandb] needs WANDB_API_KEY, tensorboard
# TENSORBOARD_DIR. The file logger writes one JSON line per step, by default to a new file per start under the run's
# folder (a resumed run keeps its earlier files)
LOGGER=${LOGGER:-"[console,file]"}
VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-$CKPT_DIR/metrics/metrics_$(date +%Y%m%d_%H%M%S).jsonl}

EDGE_VERL_CPU=${EDGE_VERL_CPU:-0}                     # verl's SFT trainer has no CPU backend here
DRY_RUN=${DRY_RUN:-0}                                 # 1: print the verl command, ready to paste, and exit
PYTHON=${PYTHON:-$(command -v python3 || command -v python || true)}  # runs verl: must import verl and edge_verl
# ---- end user-adjustable ----

########################### parameter arrays ###########################

# The RL prompt as context, the reference solution as the target (scripts/prepare_data.py)
DATA=(
    data.train_files="$TRAIN_FILE"
    data.val_files=null
    data.messages_key=messages
    data.train_batch_size="$SFT_BATCH_SIZE"
    data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    data.max_length="$SFT_MAX_LENGTH"
    data.truncation=error
)

# The model
MODEL=(
    model.path="$MODEL_PATH"
    model.enable_gradient_checkpointing=True
)

# AdamW, cosine decay without warm-up, grad clip 1.0
OPTIM=(
    optim.lr="$SFT_LR"
    optim.lr_warmup_steps_ratio=0.0
    optim.lr_scheduler_type=cosine
    optim.clip_grad=1.0
)

# Names, folders, nodes, epochs; HF weights with every checkpoint (scripts/evaluate.py reads them)
TRAINER=(
    "checkpoint.save_contents=[model,optimizer,extra,hf_model]"
    trainer.default_local_dir="$CKPT_DIR"
    trainer.project_name="$PROJECT_NAME"
    trainer.experiment_name="$EXPERIMENT_NAME"
    trainer.total_epochs="$SFT_EPOCHS"
    trainer.logger="$LOGGER"
    trainer.seed="$SEED"
    trainer.nnodes="$NNODES"
    trainer.n_gpus_per_node="$NGPUS_PER_NODE"
    trainer.max_ckpt_to_keep="$MAX_CKPT_TO_KEEP"
)

########################### launch ###########################

source "$(dirname "${BASH_SOURCE[0]}")/lib/launch.sh"  # check_python, print_command
check_python
RUN_ENV=(VERL_FILE_LOGGER_PATH="$VERL_FILE_LOGGER_PATH")  # what verl's processes read from the environment
if [ "$EDGE_VERL_CPU" = 1 ]; then
    echo "recipe error: the SFT recipe has no CPU backend (EDGE_VERL_CPU=1); run it on GPUs" >&2
    exit 2
fi
export "${RUN_ENV[@]}"
LAUNCH=("$PYTHON")
if [ "$DRY_RUN" = 1 ]; then
    LAUNCH=(print_command "$PYTHON")  # print the command below instead of running it
else
    # The run identity (verl's SFT trainer runs none of the plugin's options): CKPT_DIR's recorded method,
    # model, training data, backend, seed and RUN_TAG must be this run's
    "$PYTHON" -m edge_verl.cli run-identity "$CKPT_DIR" --method "$METHOD" --model "$MODEL_PATH" \
        --train-file "$TRAIN_FILE" --backend "$BACKEND" --seed "$SEED" --tag "$RUN_TAG"
fi
"${LAUNCH[@]}" -m torch.distributed.run --nnodes="$NNODES" --nproc_per_node="$NGPUS_PER_NODE" \
    -m verl.trainer.sft_trainer \
    "${DATA[@]}" \
    "${MODEL[@]}" \
    "${OPTIM[@]}" \
    "${TRAINER[@]}" \
    "$@"
