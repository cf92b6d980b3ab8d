#!/usr/bin/env bash
# KL-Cov (verl's built-in policy loss).
# Model: Qwen/Qwen2.5-Math-7B | Backend: FSDP | GPUs: 8 (1 node, 80 GB each)
# Training setup: EDGE-GRPO's (arXiv 2507.21848): G = 8 responses per prompt, 1 prompt per step, 1000 steps (1 epoch
# of Hard-1K), lr 1e-6, T = 0.6, max response 1024 tokens
#
# Needs: the FSDP GPU stack with verl 0.9.1 and edge_verl, in $PYTHON's environment (default: the active one):
#          bash scripts/setup_gpu.sh   (docs/INSTALL_GPU.md)
#        the data, train_hard_1k.parquet and the eval_*.parquet sets:
#          python scripts/prepare_data.py --out data
# Run:   bash recipes/run_klcov_qwen2.5-math-7b_fsdp.sh [Hydra overrides, which go last and win]
#        DRY_RUN=1 bash recipes/run_klcov_qwen2.5-math-7b_fsdp.sh   (prints the command)
# Every variable of the user-adjustable block below can be set in the environment; runs from any directory.
#
# Written by `edge-verl recipe --write` from edge_verl/methods.py (the method) and edge_verl/recipes.py (model,
# backend, training setup); tests/test_recipes.py holds this file equal to them. To change a method, change its
# definition and write the recipes again; to try something, copy this file.

set -euo pipefail

METHOD=klcov BACKEND=fsdp  # what this recipe runs: part of the run's name and identity
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # DATA_DIR and CKPT_ROOT default to its data/ and checkpoints/

# ---- user-adjustable ----
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-Math-7B}
DATA_DIR=${DATA_DIR:-$REPO/data}                      # python scripts/prepare_data.py --out DATA_DIR
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/train_hard_1k.parquet}
VAL_FILES=${VAL_FILES:-"[$DATA_DIR/eval_aime24.parquet,$DATA_DIR/eval_amc.parquet,$DATA_DIR/eval_math500.parquet,$DATA_DIR/eval_minerva.parquet,$DATA_DIR/eval_olympiad_bench.parquet]"}
NNODES=${NNODES:-1}                                   # several nodes: REPRODUCING.md section 6
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}

TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-1}               # prompts per step (paper: 1 prompt per optimizer step)
ROLLOUT_N=${ROLLOUT_N:-8}                             # responses per prompt (G)
MINI_BATCH_SIZE=${MINI_BATCH_SIZE:-$TRAIN_BATCH_SIZE}  # prompts per optimizer update: one update per step
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}               # sequences per GPU per pass (USE_DYNAMIC_BSZ=False)
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-512}
MAX_SAMPLE_LENGTH=${MAX_SAMPLE_LENGTH:-1024}          # tokens a sampled response may use (paper: 1024)
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-$MAX_SAMPLE_LENGTH}
# Dynamic batch sizes, as verl's GPU examples (*_seq_balance.sh, DAPO): each GPU packs micro-batches up to a token
# budget that holds whole sequences (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH): 8 of them in the update, twice that
# in the no-gradient log-prob passes. Lower them on out-of-memory errors; USE_DYNAMIC_BSZ=False goes back to
# MICRO_BATCH_SIZE sequences per pass. Gradients do not depend on it.
USE_DYNAMIC_BSZ=${USE_DYNAMIC_BSZ:-True}
PPO_MAX_TOKEN_LEN_PER_GPU=${PPO_MAX_TOKEN_LEN_PER_GPU:-$(((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) * 8))}
LOG_PROB_MAX_TOKEN_LEN_PER_GPU=${LOG_PROB_MAX_TOKEN_LEN_PER_GPU:-$((PPO_MAX_TOKEN_LEN_PER_GPU * 2))}

LR=${LR:-1e-6}
TEMPERATURE=${TEMPERATURE:-0.6}
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}
TOTAL_STEPS=${TOTAL_STEPS:-null}                      # null: TOTAL_EPOCHS passes over the training set
SEED=${SEED:-42}
ROLLOUT_TP=${ROLLOUT_TP:-1}                           # vLLM's tensor parallel size
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.6}
# FSDP: verl 0.9.1's FSDP optimizer has no linear decay (the papers'): cosine decays to 0 too (a deliberate
# deviation). The policy head, the same for every method (docs/performance.md#the-tiled-head): log-probs and entropy
# from the hidden states through verl's fused-kernel seam; edge_tiled, the plugin's tiled head (any device, EDA's
# gradient form at GRPO's memory); triton or torch, verl's; USE_FUSED_KERNELS=False, verl's eager head (the logits
# materialised)
LR_SCHEDULER=${LR_SCHEDULER:-cosine}
USE_FUSED_KERNELS=${USE_FUSED_KERNELS:-True}
LOGPROB_HEAD=${LOGPROB_HEAD:-edge_tiled}

PROJECT_NAME=${PROJECT_NAME:-edge_verl}
# The run's name and checkpoint folder: <method>_<model>_<training set>_<backend>_seed<N>
MODEL_TAG=$(basename "$MODEL_PATH" | tr '[:upper:]' '[:lower:]')
TRAIN_TAG=$(basename "$TRAIN_FILE" .parquet)
EXPERIMENT_NAME=${EXPERIMENT_NAME:-${METHOD}_${MODEL_TAG}_${TRAIN_TAG#train_}_${BACKEND}_seed${SEED}}
CKPT_ROOT=${CKPT_ROOT:-$REPO/checkpoints}             # several nodes: a path every node sees
CKPT_DIR=${CKPT_DIR:-$CKPT_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME}
RUN_TAG=${RUN_TAG:-}                                  # part of the run identity (edge-verl reproduce: table/row)
TEST_FREQ=${TEST_FREQ:-100}
SAVE_FREQ=${SAVE_FREQ:-100}                           # verl also saves the last step (evaluation reads it)
MAX_CKPT_TO_KEEP=${MAX_CKPT_TO_KEEP:-2}               # a 7B checkpoint: ~15 GB of HF weights + optimizer state
VAL_BEFORE_TRAIN=${VAL_BEFORE_TRAIN:-True}
# verl's loggers: console and file (no account needed); [console,file,wandb] needs WANDB_API_KEY, tensorboard
# TENSORBOARD_DIR. The file logger writes one JSON line per step, by default to a new file per start under the run's
# folder (a resumed run keeps its earlier files)
LOGGER=${LOGGER:-"[console,file]"}
VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-$CKPT_DIR/metrics/metrics_$(date +%Y%m%d_%H%M%S).jsonl}

EDGE_VERL_CPU=${EDGE_VERL_CPU:-0}                     # 1: on CPU with the plugin's backend (tiny models only)
CPU_TENSOR_PARALLEL=${CPU_TENSOR_PARALLEL:-1}         # EDGE_VERL_CPU=1, Megatron: tensor-parallel gloo processes
CPU_ROLLOUT=${CPU_ROLLOUT:-hf}                        # EDGE_VERL_CPU=1: hf (the plugin's) or vllm (vLLM's CPU build)
DRY_RUN=${DRY_RUN:-0}                                 # 1: print the verl command, ready to paste, and exit
PYTHON=${PYTHON:-$(command -v python3 || command -v python || true)}  # runs verl: must import verl and edge_verl
# ---- end user-adjustable ----

########################### parameter arrays ###########################

# The training set and the papers' five benchmarks for verl's validation
DATA=(
    data.train_files="$TRAIN_FILE"
    data.val_files="$VAL_FILES"
    data.train_batch_size="$TRAIN_BATCH_SIZE"
    data.max_prompt_length="$MAX_PROMPT_LENGTH"
    data.max_response_length="$MAX_RESPONSE_LENGTH"
    data.filter_overlong_prompts=True
    data.truncation=error
    data.seed="$SEED"
)

# The policy, also the reference model
MODEL=(
    actor_rollout_ref.model.path="$MODEL_PATH"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
)

# The update: AdamW without warm-up, grad clip 1.0, PPO clip 0.2, no KL, no entropy bonus
ACTOR=(
    actor_rollout_ref.actor.optim.lr="$LR"
    actor_rollout_ref.actor.optim.lr_warmup_steps=0
    actor_rollout_ref.actor.optim.clip_grad=1.0
    actor_rollout_ref.actor.ppo_mini_batch_size="$MINI_BATCH_SIZE"
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.actor.use_dynamic_bsz="$USE_DYNAMIC_BSZ"
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu="$PPO_MAX_TOKEN_LEN_PER_GPU"
    actor_rollout_ref.actor.ppo_epochs=1
    actor_rollout_ref.actor.clip_ratio_low=0.2
    actor_rollout_ref.actor.clip_ratio_high=0.2
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
    actor_rollout_ref.actor.use_kl_loss=False
    actor_rollout_ref.actor.kl_loss_coef=0.0
    actor_rollout_ref.actor.entropy_coeff=0
    # HF weights next to every checkpoint (actor/huggingface), which scripts/evaluate.py reads; resume loads
    # what it always loads
    "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"
    "actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer,extra]"
)

# Sampling with vLLM at T = TEMPERATURE; validation at T = 0.1, as the papers evaluate
ROLLOUT=(
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n="$ROLLOUT_N"
    actor_rollout_ref.rollout.temperature="$TEMPERATURE"
    actor_rollout_ref.rollout.top_p=1.0
    actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"
    actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION"
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"
    actor_rollout_ref.rollout.val_kwargs.temperature=0.1
    actor_rollout_ref.rollout.val_kwargs.do_sample=True
)

# The reference model's log-prob passes
REF=(
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"
)

# edge_verl's math reward: the boxed answer graded against the ground truth (edge_verl/reward)
REWARD=(
    reward.custom_reward_function.path=pkg://edge_verl.reward
    reward.custom_reward_function.name=compute_score
)

# What every method shares, then the method's own overrides (edge_verl/methods.py)
ALGORITHM=(
    algorithm.use_kl_in_reward=False
    # edge_verl/adv/* for every method, GRPO's built-in estimator included: EDGE-GRPO Fig. 5's
    # advantage-variance curves compare like with like
    +algorithm.edge_metrics.advantage_stats=True
    # KL-Cov (verl's built-in policy loss) (edge_verl/methods.py: klcov)
    algorithm.adv_estimator=grpo
    # a seed per response from SEED (docs/reproducibility.md): the same command gives the same run, and a
    # baseline is seeded as its method
    +algorithm.edge_seeding.enable=True
    actor_rollout_ref.rollout.seed="$SEED"
    # the method's own options
    actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov
    actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.002
    actor_rollout_ref.actor.policy_loss.ppo_kl_coef=1
)

# The FSDP backend
FSDP=(
    actor_rollout_ref.actor.optim.lr_scheduler_type="$LR_SCHEDULER"
    actor_rollout_ref.actor.optim.min_lr_ratio=0.0
    actor_rollout_ref.model.use_fused_kernels="$USE_FUSED_KERNELS"
    actor_rollout_ref.model.fused_kernel_options.impl_backend="$LOGPROB_HEAD"
    actor_rollout_ref.actor.strategy=fsdp2
    actor_rollout_ref.ref.strategy=fsdp2
    actor_rollout_ref.actor.fsdp_config.param_offload=False
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
)

# Names, folders, nodes, steps; verl's resume_mode=auto resumes from CKPT_DIR
TRAINER=(
    trainer.logger="$LOGGER"
    trainer.project_name="$PROJECT_NAME"
    trainer.experiment_name="$EXPERIMENT_NAME"
    trainer.default_local_dir="$CKPT_DIR"
    trainer.nnodes="$NNODES"
    trainer.n_gpus_per_node="$NGPUS_PER_NODE"
    trainer.total_epochs="$TOTAL_EPOCHS"
    trainer.total_training_steps="$TOTAL_STEPS"
    trainer.test_freq="$TEST_FREQ"
    trainer.save_freq="$SAVE_FREQ"
    trainer.max_actor_ckpt_to_keep="$MAX_CKPT_TO_KEEP"
    trainer.val_before_train="$VAL_BEFORE_TRAIN"
)

########################### launch ###########################

source "$(dirname "${BASH_SOURCE[0]}")/lib/launch.sh"  # check_python, cpu_switch, print_command
check_python
RUN_ENV=(VERL_FILE_LOGGER_PATH="$VERL_FILE_LOGGER_PATH")  # what verl's processes read from the environment
cpu_switch ppo_trainer  # EDGE_VERL_CPU=1: the CPU backend's overrides (CPU) and variables (RUN_ENV)
export "${RUN_ENV[@]}"
LAUNCH=("$PYTHON")
if [ "$DRY_RUN" = 1 ]; then
    LAUNCH=(print_command "$PYTHON")  # print the command below instead of running it
else
    # edge_verl's preflight, in seconds and before Ray starts, on the config verl composes from these very
    # overrides: every plugin option and the data files, then the run identity (CKPT_DIR's recorded method,
    # model, training data, backend, seed and RUN_TAG must be this run's, so that resume_mode=auto never resumes
    # another run)
    "$PYTHON" -m edge_verl.cli preflight --config-name ppo_trainer --method "$METHOD" --tag "$RUN_TAG" \
        "${DATA[@]}" "${MODEL[@]}" "${ACTOR[@]}" "${ROLLOUT[@]}" "${REF[@]}" "${REWARD[@]}" \
        "${ALGORITHM[@]}" "${FSDP[@]}" "${TRAINER[@]}" "${CPU[@]}" "$@"
fi
"${LAUNCH[@]}" -m verl.trainer.main_ppo --config-name=ppo_trainer \
    "${DATA[@]}" \
    "${MODEL[@]}" \
    "${ACTOR[@]}" \
    "${ROLLOUT[@]}" \
    "${REF[@]}" \
    "${REWARD[@]}" \
    "${ALGORITHM[@]}" \
    "${FSDP[@]}" \
    "${TRAINER[@]}" \
    "${CPU[@]}" \
    "$@"
