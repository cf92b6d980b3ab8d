# Sourced by every recipe in recipes/: the user-adjustable block and the knobs shared by all methods
# (EDGE-GRPO's training setup, EDGE_GRPO.md section 3), so a method and its baselines differ only in
# their METHOD_ARGS and an FSDP/Megatron twin only in its BACKEND_ARGS. Every variable can be set from
# the environment; extra Hydra overrides go after the script name ("$@").
#
# Deliberate deviation: verl 0.9.1's FSDP optimizer offers constant or cosine schedules, not the paper's
# linear decay; FSDP recipes use LR_SCHEDULER=cosine (decays to 0 like linear decay). Megatron has linear.

: "${MODEL_PATH:?the recipe sets MODEL_PATH}"
DATA_DIR=${DATA_DIR:-data}
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/train_hard_1k.parquet}
VAL_FILES=${VAL_FILES:-"[$DATA_DIR/eval_aime24.parquet,$DATA_DIR/eval_amc.parquet,$DATA_DIR/eval_math500.parquet,$DATA_DIR/eval_minerva.parquet,$DATA_DIR/eval_olympiad_bench.parquet]"}
NNODES=${NNODES:-1}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-1}        # prompts per step (paper: 1 prompt per optimizer step)
MINI_BATCH_SIZE=${MINI_BATCH_SIZE:-$TRAIN_BATCH_SIZE}
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}        # per GPU
ROLLOUT_N=${ROLLOUT_N:-8}                      # responses per prompt (G)
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-512}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-1024}
TEMPERATURE=${TEMPERATURE:-0.6}
LR=${LR:-1e-6}
LR_SCHEDULER=${LR_SCHEDULER:-cosine}
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}
TOTAL_STEPS=${TOTAL_STEPS:-null}               # null: TOTAL_EPOCHS passes over the training set
SEED=${SEED:-42}
ROLLOUT_TP=${ROLLOUT_TP:-1}
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.6}
TEST_FREQ=${TEST_FREQ:-100}
SAVE_FREQ=${SAVE_FREQ:-100}
VAL_BEFORE_TRAIN=${VAL_BEFORE_TRAIN:-True}
PROJECT_NAME=${PROJECT_NAME:-edge_verl}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-$(basename "$0" .sh)_seed$SEED}
CKPT_DIR=${CKPT_DIR:-checkpoints/$PROJECT_NAME/$EXPERIMENT_NAME}
LOGGER=${LOGGER:-"[console,wandb]"}
EDGE_VERL_CPU=${EDGE_VERL_CPU:-0}              # 1: run on CPU with the plugin's backend (tiny models only)
DRY_RUN=${DRY_RUN:-0}                          # 1: print the overrides, one per line, and exit

DATA_ARGS=(
    data.train_files="$TRAIN_FILE"
    data.val_files="$VAL_FILES"
    data.train_batch_size="$TRAIN_BATCH_SIZE"
    data.max_prompt_length="$MAX_PROMPT_LENGTH"
    data.max_response_length="$MAX_RESPONSE_LENGTH"
    data.filter_overlong_prompts=True
    data.truncation=error
    data.seed="$SEED"
)
MODEL_ARGS=(
    actor_rollout_ref.model.path="$MODEL_PATH"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
)
ACTOR_ARGS=(
    actor_rollout_ref.actor.optim.lr="$LR"
    actor_rollout_ref.actor.optim.lr_warmup_steps=0
    actor_rollout_ref.actor.optim.clip_grad=1.0
    actor_rollout_ref.actor.ppo_mini_batch_size="$MINI_BATCH_SIZE"
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.actor.ppo_epochs=1
    actor_rollout_ref.actor.clip_ratio_low=0.2
    actor_rollout_ref.actor.clip_ratio_high=0.2
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
    actor_rollout_ref.actor.use_kl_loss=False
    actor_rollout_ref.actor.kl_loss_coef=0.0
    actor_rollout_ref.actor.entropy_coeff=0
)
ROLLOUT_ARGS=(
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n="$ROLLOUT_N"
    actor_rollout_ref.rollout.temperature="$TEMPERATURE"
    actor_rollout_ref.rollout.top_p=1.0
    actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"
    actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION"
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.rollout.val_kwargs.temperature=0.1
    actor_rollout_ref.rollout.val_kwargs.do_sample=True
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
)
REWARD_ARGS=(
    reward.custom_reward_function.path=pkg://edge_verl.reward
    reward.custom_reward_function.name=compute_score
    algorithm.use_kl_in_reward=False
)
TRAINER_ARGS=(
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
    trainer.val_before_train="$VAL_BEFORE_TRAIN"
)
FSDP_ARGS=(
    actor_rollout_ref.actor.optim.lr_scheduler_type="$LR_SCHEDULER"
    actor_rollout_ref.actor.optim.min_lr_ratio=0.0
    actor_rollout_ref.actor.strategy=fsdp2
    actor_rollout_ref.ref.strategy=fsdp2
    actor_rollout_ref.actor.fsdp_config.param_offload=False
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
)
MEGATRON_TP=${MEGATRON_TP:-2}
MEGATRON_PP=${MEGATRON_PP:-1}
MEGATRON_ARGS=(
    actor_rollout_ref.actor.optim.lr_decay_style=linear
    actor_rollout_ref.actor.optim.min_lr=0.0
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size="$MEGATRON_TP"
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size="$MEGATRON_PP"
    actor_rollout_ref.ref.megatron.tensor_model_parallel_size="$MEGATRON_TP"
    actor_rollout_ref.ref.megatron.pipeline_model_parallel_size="$MEGATRON_PP"
)
# Methods that run GEC: one switch (edge_gec.enable); training rows must carry agent_name=edge_gec (scripts/prepare_data.py writes
# *_gec.parquet); injected tokens have no rollout log-probs, so those are off.
GEC_ARGS=(
    actor_rollout_ref.rollout.calculate_log_probs=False
    +algorithm.edge_gec.enable=True
    +algorithm.edge_gec.seed="$SEED"
)

# run_verl CONFIG_NAME RECIPE_OVERRIDES... -- USER_OVERRIDES...: verl's own entry point with every block
# above, then the recipe's (method, backend), the CPU backend's when EDGE_VERL_CPU=1, and the user's last
# (Hydra lets the last value of a key win).
run_verl() {
    local config_name=$1
    shift
    local recipe_args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        recipe_args+=("$1")
        shift
    done
    [ $# -gt 0 ] && shift
    local cpu_args=()
    if [ "$EDGE_VERL_CPU" = "1" ]; then
        export EDGE_VERL_CPU VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda
        mapfile -t cpu_args < <(edge-verl cpu-overrides)
    fi
    local args=("${DATA_ARGS[@]}" "${MODEL_ARGS[@]}" "${ACTOR_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${REWARD_ARGS[@]}"
        "${TRAINER_ARGS[@]}" "${recipe_args[@]}" "${cpu_args[@]}" "$@")
    if [ "$DRY_RUN" = "1" ]; then
        printf '%s\n' "--config-name=$config_name" "${args[@]}"
        return 0
    fi
    python -m verl.trainer.main_ppo --config-name="$config_name" "${args[@]}"
}
