# Sourced first by every verl recipe (recipes/run_*.sh): the defaults of the variables that are the same in every
# recipe, so that a recipe holds only its own, and the launch's helpers (recipes/lib/launch.sh). Any variable can
# be set in the environment instead; what each one does and why its default: docs/recipes.md#variables.
#   REPO, DATA_DIR          set when sourced: the recipe's own variables build on them
#   rl_defaults [ROOM]      an RL recipe's other variables, then run_defaults. ROOM, given by a GEC method's recipe
#                           (after its GEC_CONTINUATION_TOKENS): tokens for GEC's phrase between the first sample and
#                           a correction's continuation; the response holds all three
#   run_defaults            every recipe's seed, names, folders, logging and switches

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DATA_DIR=${DATA_DIR:-$REPO/data}

rl_defaults() {
    local room=${1:-}
    VAL_FILES=${VAL_FILES:-"[$DATA_DIR/eval_aime24.parquet,$DATA_DIR/eval_amc.parquet,$DATA_DIR/eval_math500.parquet,$DATA_DIR/eval_minerva.parquet,$DATA_DIR/eval_olympiad_bench.parquet]"}
    MINI_BATCH_SIZE=${MINI_BATCH_SIZE:-$TRAIN_BATCH_SIZE}
    MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-512}
    if [ -n "$room" ] && [ -z "${MAX_SAMPLE_LENGTH:-}" ] && [ -n "${MAX_RESPONSE_LENGTH:-}" ]; then
        MAX_SAMPLE_LENGTH=$((MAX_RESPONSE_LENGTH - room - GEC_CONTINUATION_TOKENS))
    fi
    MAX_SAMPLE_LENGTH=${MAX_SAMPLE_LENGTH:-1024}
    if [ -n "$room" ]; then
        MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-$((MAX_SAMPLE_LENGTH + room + GEC_CONTINUATION_TOKENS))}
    else
        MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-$MAX_SAMPLE_LENGTH}
    fi
    USE_DYNAMIC_BSZ=${USE_DYNAMIC_BSZ:-True}
    PPO_MAX_TOKEN_LEN_PER_GPU=${PPO_MAX_TOKEN_LEN_PER_GPU:-$(((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) * 8))}
    LOG_PROB_MAX_TOKEN_LEN_PER_GPU=${LOG_PROB_MAX_TOKEN_LEN_PER_GPU:-$((PPO_MAX_TOKEN_LEN_PER_GPU * 2))}
    LR=${LR:-1e-6}
    TEMPERATURE=${TEMPERATURE:-0.6}
    ROLLOUT_TP=${ROLLOUT_TP:-1}
    GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.6}
    case $BACKEND in
        fsdp)
            LR_SCHEDULER=${LR_SCHEDULER:-cosine}
            USE_FUSED_KERNELS=${USE_FUSED_KERNELS:-True}
            LOGPROB_HEAD=${LOGPROB_HEAD:-edge_tiled}
            ;;
        megatron)
            MEGATRON_TP=${MEGATRON_TP:-2}
            MEGATRON_PP=${MEGATRON_PP:-1}
            ;;
    esac
    TEST_FREQ=${TEST_FREQ:-100}
    SAVE_FREQ=${SAVE_FREQ:-100}
    VAL_BEFORE_TRAIN=${VAL_BEFORE_TRAIN:-True}
    CPU_TENSOR_PARALLEL=${CPU_TENSOR_PARALLEL:-1}
    CPU_ROLLOUT=${CPU_ROLLOUT:-hf}
    run_defaults
}

run_defaults() {
    MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}
    SEED=${SEED:-42}
    PROJECT_NAME=${PROJECT_NAME:-edge_verl}
    # The run's name and checkpoint folder: <method>_<model>_<training set>_<backend>_seed<N>
    MODEL_TAG=$(basename "$MODEL_PATH" | tr '[:upper:]' '[:lower:]')
    TRAIN_TAG=$(basename "$TRAIN_FILE" .parquet)
    EXPERIMENT_NAME=${EXPERIMENT_NAME:-${METHOD}_${MODEL_TAG}_${TRAIN_TAG#train_}_${BACKEND}_seed${SEED}}
    CKPT_ROOT=${CKPT_ROOT:-$REPO/checkpoints}
    CKPT_DIR=${CKPT_DIR:-$CKPT_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME}
    RUN_TAG=${RUN_TAG:-}
    MAX_CKPT_TO_KEEP=${MAX_CKPT_TO_KEEP:-2}
    LOGGER=${LOGGER:-"[console,file]"}
    VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-$CKPT_DIR/metrics/metrics_$(date +%Y%m%d_%H%M%S).jsonl}
    EDGE_VERL_CPU=${EDGE_VERL_CPU:-0}
    DRY_RUN=${DRY_RUN:-0}
    PYTHON=${PYTHON:-$(command -v python3 || command -v python || true)}
}

source "$REPO/recipes/lib/launch.sh"  # prepare_launch and the other helpers of a recipe's launch
