# Sourced by every recipe in recipes/: the user-adjustable block and the knobs shared by all methods
# (EDGE-GRPO's training setup, EDGE_GRPO.md section 3), so a method and its baselines differ only in
# their METHOD_ARGS and an FSDP/Megatron twin only in its BACKEND_ARGS. Every variable can be set from
# the environment; extra Hydra overrides go after the script name ("$@"). A recipe fixes METHOD (a method
# defined in edge_verl/methods.py: the papers' methods, their baselines and ablations; its overrides are
# METHOD_ARGS, read with `edge-verl method-overrides`), BACKEND (fsdp, megatron) and KNOBS (edge, gepo:
# whose training setup, one the method lists), sets the MODEL_PATH default and TRAIN_SET (the prepared
# file it trains on, DATA_DIR/TRAIN_SET.parquet: the *_gec variant for a method that runs GEC), sources
# this file and calls run_recipe "$@" (run_sft_recipe "$@" for SFT). `edge-verl method` lists the methods.
#
# Recipes work from any directory: DATA_DIR and CKPT_ROOT default to data/ and checkpoints/ in the
# repository (paths given in the environment are taken as given, relative to the working directory).
# verl runs with $PYTHON (default: the active environment's python), which must import verl and edge_verl.
#
# Before verl starts, `edge-verl preflight` composes verl's config from the very overrides verl will get
# and checks every option of the plugin and the data files (seconds, not minutes after Ray and model
# load), then the run identity: the experiment name and checkpoint folder are
# METHOD_MODEL_TRAINSET_BACKEND_seedN, and the folder's recorded identity (method, model, training data
# sha256, backend, seed, RUN_TAG) must match, so verl's resume_mode=auto resumes the same run but never
# another run's checkpoint (it stops and names the setting that differs). Every checkpoint includes HF
# weights (actor/huggingface) for evaluation.
#
# Deliberate deviation: verl 0.9.1's FSDP optimizer offers constant or cosine schedules, not the paper's
# linear decay; FSDP recipes use LR_SCHEDULER=cosine (decays to 0 like linear decay). Megatron has linear.

: "${MODEL_PATH:?the recipe sets MODEL_PATH}"
: "${METHOD:?the recipe sets METHOD}"
: "${BACKEND:?the recipe sets BACKEND (fsdp or megatron)}"
case "${KNOBS:?the recipe sets KNOBS (edge or gepo)}" in
    edge) ;;  # EDGE-GRPO's setup: the defaults below (G = 8, 1 prompt per step, 1000 steps = 1 epoch of 1K)
    gepo)
        ROLLOUT_N=${ROLLOUT_N:-16}
        # GEPO's thresholds are batch statistics over the step's groups: several prompts per step.
        TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-32}
        # 300 steps (~10 epochs of 1000 prompts at 32 per step): with gamma = 0.01 the EMA thresholds keep
        # (1 - 0.01)^300 = 4.9% of their first-batch seed by the end (73% after one 31-step epoch), i.e.
        # they have settled onto the running batch statistics (time constant 1/gamma = 100 steps).
        TOTAL_STEPS=${TOTAL_STEPS:-300}
        TOTAL_EPOCHS=${TOTAL_EPOCHS:-10}
        ;;
    *) echo "recipe error: KNOBS=$KNOBS (edge or gepo)" >&2; exit 2 ;;
esac
EDGE_VERL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-$(command -v python || command -v python3 || true)}
if [ -z "$PYTHON" ] || ! "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("verl") and u.find_spec("edge_verl")))' 2>/dev/null; then
    echo "recipe error: PYTHON=${PYTHON:-<none>} cannot import verl and edge_verl; activate the environment that has them" \
        "(e.g. source $EDGE_VERL_ROOT/.venv/bin/activate) or set PYTHON=/path/to/bin/python" >&2
    exit 2
fi
DATA_DIR=${DATA_DIR:-$EDGE_VERL_ROOT/data}
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/${TRAIN_SET:-train_hard_1k}.parquet}
VAL_FILES=${VAL_FILES:-"[$DATA_DIR/eval_aime24.parquet,$DATA_DIR/eval_amc.parquet,$DATA_DIR/eval_math500.parquet,$DATA_DIR/eval_minerva.parquet,$DATA_DIR/eval_olympiad_bench.parquet]"}
NNODES=${NNODES:-1}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-1}        # prompts per step (paper: 1 prompt per optimizer step)
MINI_BATCH_SIZE=${MINI_BATCH_SIZE:-$TRAIN_BATCH_SIZE}
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}        # sequences per GPU per forward pass (used with USE_DYNAMIC_BSZ=False)
ROLLOUT_N=${ROLLOUT_N:-8}                      # responses per prompt (G)
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-512}
# GEC's correction grows past the sample, as in the reference: the phrase plus up to 256 more tokens. GEC
# methods cap the first sample at MAX_SAMPLE_LENGTH (edge_gec.first_sample_tokens) and size the response
# to fit (32 tokens of room for the phrase); validation responses may then use that length too. Setting
# only MAX_RESPONSE_LENGTH for a GEC method keeps that total and gives the first sample what is left.
# Whether the method runs GEC is its definition's (edge_verl/methods.py); an unknown METHOD stops here.
METHOD_RUNS_GEC=$("$PYTHON" -m edge_verl.cli method "$METHOD" --field gec) || exit $?
GEC_CONTINUATION_TOKENS=${GEC_CONTINUATION_TOKENS:-256}
GEC_ROOM_TOKENS=$((GEC_CONTINUATION_TOKENS + 32))
if [ "$METHOD_RUNS_GEC" = True ]; then
    if [ -z "${MAX_SAMPLE_LENGTH:-}" ] && [ -n "${MAX_RESPONSE_LENGTH:-}" ]; then
        MAX_SAMPLE_LENGTH=$((MAX_RESPONSE_LENGTH - GEC_ROOM_TOKENS))
        if [ "$MAX_SAMPLE_LENGTH" -lt 1 ]; then
            echo "recipe error: MAX_RESPONSE_LENGTH=$MAX_RESPONSE_LENGTH leaves no room for a first sample next to GEC's" \
                "correction ($GEC_ROOM_TOKENS tokens): set MAX_SAMPLE_LENGTH and GEC_CONTINUATION_TOKENS instead" >&2
            exit 2
        fi
    fi
    MAX_SAMPLE_LENGTH=${MAX_SAMPLE_LENGTH:-1024}  # tokens a sampled response may use (paper: 1024)
    MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-$((MAX_SAMPLE_LENGTH + GEC_ROOM_TOKENS))}
else
    MAX_SAMPLE_LENGTH=${MAX_SAMPLE_LENGTH:-1024}
    MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-$MAX_SAMPLE_LENGTH}
fi
# EDA's form: True = the reference's gradient through the current entropy in the actor loss (needs the
# entropy computed in the update); False = the detached advantage.
EDA_ENTROPY_GRADIENT=${EDA_ENTROPY_GRADIENT:-True}
GEPO_SYMMETRIC_ALPHA=${GEPO_SYMMETRIC_ALPHA:-0.5}  # gepo_symmetric: one factor for both sides (the positive one)
# Dynamic batch sizes (verl's GPU examples: *_seq_balance.sh, DAPO): each GPU packs micro-batches up to a
# token budget instead of MICRO_BATCH_SIZE sequences. The budgets must hold one full sequence
# (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH); the defaults give the update 8 of them and the no-gradient
# log-prob passes twice that. Lower them on out-of-memory errors; USE_DYNAMIC_BSZ=False goes back to
# MICRO_BATCH_SIZE sequences per pass. Gradients do not depend on it (verl scales each micro-batch's loss).
USE_DYNAMIC_BSZ=${USE_DYNAMIC_BSZ:-True}
PPO_MAX_TOKEN_LEN_PER_GPU=${PPO_MAX_TOKEN_LEN_PER_GPU:-$(((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) * 8))}
LOG_PROB_MAX_TOKEN_LEN_PER_GPU=${LOG_PROB_MAX_TOKEN_LEN_PER_GPU:-$((PPO_MAX_TOKEN_LEN_PER_GPU * 2))}
TEMPERATURE=${TEMPERATURE:-0.6}
LR=${LR:-1e-6}
LR_SCHEDULER=${LR_SCHEDULER:-cosine}
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}
TOTAL_STEPS=${TOTAL_STEPS:-null}               # null: TOTAL_EPOCHS passes over the training set
SEED=${SEED:-42}
ROLLOUT_TP=${ROLLOUT_TP:-1}
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.6}
TEST_FREQ=${TEST_FREQ:-100}
SAVE_FREQ=${SAVE_FREQ:-100}                    # verl also saves the last step (evaluation reads it)
MAX_CKPT_TO_KEEP=${MAX_CKPT_TO_KEEP:-2}        # each 7B checkpoint is ~15 GB of HF weights + optimizer state
VAL_BEFORE_TRAIN=${VAL_BEFORE_TRAIN:-True}
PROJECT_NAME=${PROJECT_NAME:-edge_verl}
RUN_TAG=${RUN_TAG:-}                           # part of the run identity (edge-verl reproduce: table/row)
MODEL_TAG=$(basename "$MODEL_PATH" | tr '[:upper:]' '[:lower:]')
TRAIN_TAG=$(basename "$TRAIN_FILE" .parquet)
TRAIN_TAG=${TRAIN_TAG#train_}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-${METHOD}_${MODEL_TAG}_${TRAIN_TAG}_${BACKEND}_seed${SEED}}
CKPT_ROOT=${CKPT_ROOT:-$EDGE_VERL_ROOT/checkpoints}  # multi-node: a path every node sees (shared storage)
CKPT_DIR=${CKPT_DIR:-$CKPT_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME}
# verl's loggers: console and file by default (no account needed); LOGGER="[console,file,wandb]" (needs
# WANDB_API_KEY) or tensorboard (TENSORBOARD_DIR) opt in. The file logger writes one JSON line per step to
# VERL_FILE_LOGGER_PATH, by default a new file per start under the run's folder (a resumed run keeps its
# earlier files; verl's file logger truncates the file it opens).
LOGGER=${LOGGER:-"[console,file]"}
if [ -z "${VERL_FILE_LOGGER_PATH:-}" ]; then
    VERL_FILE_LOGGER_PATH=$CKPT_DIR/metrics/metrics_$(date +%Y%m%d_%H%M%S).jsonl
fi
EDGE_VERL_CPU=${EDGE_VERL_CPU:-0}              # 1: run on CPU with the plugin's backend (tiny models only)
CPU_TENSOR_PARALLEL=${CPU_TENSOR_PARALLEL:-1}  # EDGE_VERL_CPU=1, Megatron: tensor-parallel gloo processes
CPU_ROLLOUT=${CPU_ROLLOUT:-hf}                 # EDGE_VERL_CPU=1: hf (the plugin's) or vllm (vLLM's CPU build)
DRY_RUN=${DRY_RUN:-0}                          # 1: print the verl command, ready to paste, and exit

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
    actor_rollout_ref.actor.use_dynamic_bsz="$USE_DYNAMIC_BSZ"
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu="$PPO_MAX_TOKEN_LEN_PER_GPU"
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
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"
    actor_rollout_ref.rollout.val_kwargs.temperature=0.1
    actor_rollout_ref.rollout.val_kwargs.do_sample=True
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"
)
REWARD_ARGS=(
    reward.custom_reward_function.path=pkg://edge_verl.reward
    reward.custom_reward_function.name=compute_score
    algorithm.use_kl_in_reward=False
    # edge_verl/adv/var and edge_verl/adv/zero_variance_group_frac for every method (GRPO's built-in
    # estimator included), so the advantage-variance curves of EDGE-GRPO Fig. 5 compare like with like.
    +algorithm.edge_metrics.advantage_stats=True
)
CHECKPOINT_ARGS=(
    # HF weights next to every checkpoint (actor/huggingface) so that scripts/evaluate.py reads them;
    # resume loads what it always loads.
    "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"
    "actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer,extra]"
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
    trainer.max_actor_ckpt_to_keep="$MAX_CKPT_TO_KEEP"
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
# The method's own overrides (estimator, EDA, GEC, options), as edge_verl/methods.py defines METHOD, with
# this run's parameters; none for SFT (verl's SFT trainer, run_sft_recipe below).
METHOD_ARGS=()
method_text=$("$PYTHON" -m edge_verl.cli method-overrides "$METHOD" --knobs "$KNOBS" --seed "$SEED" \
    --entropy-gradient "$EDA_ENTROPY_GRADIENT" --first-sample-tokens "$MAX_SAMPLE_LENGTH" \
    --continuation-tokens "$GEC_CONTINUATION_TOKENS" --gepo-symmetric-alpha "$GEPO_SYMMETRIC_ALPHA") || exit $?
[ -z "$method_text" ] || mapfile -t METHOD_ARGS <<<"$method_text"

# EDGE-GRPO's SFT baseline (supervised fine-tuning on the training set's reference solutions, the RL prompt
# as context; scripts/prepare_data.py writes sft_<set>.parquet). The paper does not state its SFT
# hyper-parameters: these are this project's choices, every one settable.
SFT_LR=${SFT_LR:-1e-5}
SFT_EPOCHS=${SFT_EPOCHS:-3}
SFT_BATCH_SIZE=${SFT_BATCH_SIZE:-32}            # sequences per optimizer step
SFT_MAX_LENGTH=${SFT_MAX_LENGTH:-2048}          # prompt + solution tokens; longer rows are an error

# run_sft_recipe USER_OVERRIDES...: verl's SFT trainer (torchrun -m verl.trainer.sft_trainer) on TRAIN_FILE.
run_sft_recipe() {
    if [ "$EDGE_VERL_CPU" = "1" ]; then
        echo "recipe error: the SFT recipe has no CPU backend (EDGE_VERL_CPU=1); run it on GPUs" >&2
        return 2
    fi
    local args=(
        data.train_files="$TRAIN_FILE"
        data.val_files=null
        data.messages_key=messages
        data.train_batch_size="$SFT_BATCH_SIZE"
        data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
        data.max_length="$SFT_MAX_LENGTH"
        data.truncation=error
        model.path="$MODEL_PATH"
        model.enable_gradient_checkpointing=True
        optim.lr="$SFT_LR"
        optim.lr_warmup_steps_ratio=0.0
        optim.lr_scheduler_type=cosine
        optim.clip_grad=1.0
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
        "$@"
    )
    local command=("$PYTHON" -m torch.distributed.run --nnodes="$NNODES" --nproc_per_node="$NGPUS_PER_NODE"
        -m verl.trainer.sft_trainer "${args[@]}")
    RUN_ENV=(VERL_FILE_LOGGER_PATH="$VERL_FILE_LOGGER_PATH")
    export "${RUN_ENV[@]}"
    if [ "$DRY_RUN" = "1" ]; then
        print_command 7 "${command[@]}"
        return 0
    fi
    "$PYTHON" -m edge_verl.cli run-identity "$CKPT_DIR" --method "$METHOD" --model "$MODEL_PATH" \
        --train-file "$TRAIN_FILE" --backend "$BACKEND" --seed "$SEED" --tag "$RUN_TAG" || return $?
    "${command[@]}"
}

# shell_quote WORD: WORD as the shell reads it back (single quotes unless it is plain).
shell_quote() {
    if [[ $1 =~ ^[A-Za-z0-9_./:=+@%,-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//\'/\'\\\'\'}"
    fi
}

# print_command N ARGS...: the command ready to paste, the variables the recipe exports for it (RUN_ENV) in
# front, the first N arguments (the program) on the first line and every further argument on a line of its own.
print_command() {
    local head=$1 arg index=0
    shift
    for arg in env "${RUN_ENV[@]}"; do
        printf '%s ' "$(shell_quote "$arg")"
    done
    for arg in "$@"; do
        index=$((index + 1))
        if [ "$index" -le "$head" ]; then
            [ "$index" -gt 1 ] && printf ' '
            shell_quote "$arg"
        else
            printf ' \\\n    %s' "$(shell_quote "$arg")"
        fi
    done
    printf '\n'
}

# run_recipe USER_OVERRIDES...: the method on the recipe's backend (verl's ppo_trainer or ppo_megatron_trainer).
run_recipe() {
    case "$BACKEND" in
        fsdp) run_verl ppo_trainer "${METHOD_ARGS[@]}" "${FSDP_ARGS[@]}" -- "$@" ;;
        megatron) run_verl ppo_megatron_trainer "${METHOD_ARGS[@]}" "${MEGATRON_ARGS[@]}" -- "$@" ;;
        *) echo "recipe error: BACKEND=$BACKEND (fsdp or megatron)" >&2; return 2 ;;
    esac
}

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
    # What verl's processes need in their environment: exported here and printed by DRY_RUN, one list for both.
    RUN_ENV=(VERL_FILE_LOGGER_PATH="$VERL_FILE_LOGGER_PATH")
    if [ "$EDGE_VERL_CPU" = "1" ]; then
        # VLLM_CPU_KVCACHE_SPACE: GiB per vLLM server (CPU_ROLLOUT=vllm)
        RUN_ENV+=(EDGE_VERL_CPU=1 VERL_PLATFORM=cpu VERL_ENGINE_DEVICE=cuda VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}")
    fi
    export "${RUN_ENV[@]}"
    if [ "$EDGE_VERL_CPU" = "1" ]; then
        # The set of the backend this config trains with (a Megatron recipe runs Megatron on CPU too).
        local cpu_text
        cpu_text=$("$PYTHON" -m edge_verl.cli cpu-overrides --config-name "$config_name" --tensor-parallel "$CPU_TENSOR_PARALLEL" \
            --rollout "$CPU_ROLLOUT") || return $?
        mapfile -t cpu_args <<<"$cpu_text"
    fi
    local args=("${DATA_ARGS[@]}" "${MODEL_ARGS[@]}" "${ACTOR_ARGS[@]}" "${ROLLOUT_ARGS[@]}" "${REWARD_ARGS[@]}"
        "${CHECKPOINT_ARGS[@]}" "${TRAINER_ARGS[@]}" "${recipe_args[@]}" "${cpu_args[@]}" "$@")
    if [ "$DRY_RUN" = "1" ]; then
        print_command 4 "$PYTHON" -m verl.trainer.main_ppo --config-name="$config_name" "${args[@]}"
        return 0
    fi
    # The plugin's checks and the run identity, on the config verl will compose from these very overrides.
    "$PYTHON" -m edge_verl.cli preflight --config-name "$config_name" --method "$METHOD" --tag "$RUN_TAG" "${args[@]}" || return $?
    "$PYTHON" -m verl.trainer.main_ppo --config-name="$config_name" "${args[@]}"
}
