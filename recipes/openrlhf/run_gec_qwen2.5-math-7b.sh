#!/usr/bin/env bash
# EDGE-GRPO ablation: GEC only, GRPO advantages: Qwen/Qwen2.5-Math-7B on one node of 8 GPUs with OpenRLHF 0.11.2 (docs/openrlhf.md).
# Training setup: EDGE-GRPO's (arXiv 2507.21848): G = 8 responses per prompt, 1 prompt per step, 1000 steps (1 epoch of Hard-1K), lr 1e-6, T = 0.6, max response 1024 tokens.
# Written by `edge-verl recipe --write` from edge_verl/openrlhf/recipes.py: change that, not this file.
# DRY_RUN=1 prints the command (with the options file it writes) and exits.
set -euo pipefail

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-Math-7B}
DATA_DIR=${DATA_DIR:-data/openrlhf}                   # python -m edge_verl.openrlhf data DATA_DIR (run below when missing)
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/train/deepscaler_hard_1k.jsonl}
EVAL_FILES=${EVAL_FILES:-$DATA_DIR/eval/aime24.jsonl,$DATA_DIR/eval/amc.jsonl,$DATA_DIR/eval/math500.jsonl,$DATA_DIR/eval/minerva.jsonl,$DATA_DIR/eval/olympiad_bench.jsonl}  # each benchmark logged under its own name (eval_<set>_pass1)
NGPUS=${NGPUS:-8}
PROMPTS_PER_STEP=${PROMPTS_PER_STEP:-1}               # prompts per optimizer step
ROLLOUT_N=${ROLLOUT_N:-8}                             # responses per prompt
EPISODES=${EPISODES:-1}                               # passes over the training set
MAX_SAMPLE_LENGTH=${MAX_SAMPLE_LENGTH:-1024}          # tokens a sampled response may use (paper: 1024)
GEC_CONTINUATION_TOKENS=${GEC_CONTINUATION_TOKENS:-256}  # GEC's regenerated tokens after the phrase
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-$((MAX_SAMPLE_LENGTH + 32 + GEC_CONTINUATION_TOKENS))}  # a corrected response: sample + phrase + continuation
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-512}
LR=${LR:-1e-6}
TEMPERATURE=${TEMPERATURE:-0.6}
EVAL_TEMPERATURE=${EVAL_TEMPERATURE:-0.1}             # the papers' evaluation: one sample a problem at T = 0.1
SEED=${SEED:-42}
CKPT_DIR=${CKPT_DIR:-checkpoints/openrlhf/gec_qwen2.5-math-7b_seed$SEED}
OPTIONS_FILE=${OPTIONS_FILE:-$CKPT_DIR/edge_verl_options.json}  # EDGE_VERL_OPENRLHF: the plugin's options
DRY_RUN=${DRY_RUN:-0}
PYTHON=${PYTHON:-$(command -v python3 || command -v python)}  # must import openrlhf and edge_verl

mkdir -p "$CKPT_DIR"
cat > "$OPTIONS_FILE" <<EOF
{"gec": {"n_samples_per_prompt": $ROLLOUT_N, "rollout_temperature": $TEMPERATURE, "first_sample_tokens": $MAX_SAMPLE_LENGTH, "continuation_tokens": $GEC_CONTINUATION_TOKENS}}
EOF
if [ "$DRY_RUN" != 1 ] && [ ! -f "$TRAIN_FILE" ]; then "$PYTHON" -m edge_verl.openrlhf data "$DATA_DIR"; fi

COMMAND=(
    "$PYTHON" -m edge_verl.openrlhf.train_ppo_ray
    --actor.model_name_or_path "$MODEL_PATH"
    --actor.num_nodes 1 --actor.num_gpus_per_node "$NGPUS" --ref.num_nodes 1 --ref.num_gpus_per_node "$NGPUS"
    --vllm.num_engines "$NGPUS" --vllm.tensor_parallel_size 1 --vllm.gpu_memory_utilization 0.6
    --train.colocate_all --vllm.enable_sleep --ds.enable_sleep
    --data.prompt_dataset "$TRAIN_FILE" --data.input_key prompt --data.label_key label --data.apply_chat_template
    --data.max_len "$((MAX_PROMPT_LENGTH + MAX_NEW_TOKENS))" --rollout.max_new_tokens "$MAX_NEW_TOKENS"
    --rollout.n_samples_per_prompt "$ROLLOUT_N" --rollout.batch_size "$PROMPTS_PER_STEP" --rollout.micro_batch_size 1
    --train.batch_size "$((PROMPTS_PER_STEP * ROLLOUT_N))" --train.micro_batch_size 1 --train.max_epochs 1
    --train.num_episodes "$EPISODES" --rollout.temperature "$TEMPERATURE" --rollout.top_p 1.0
    --algo.advantage.estimator group_norm --algo.kl.init_coef 0 --actor.loss_agg_mode seq-mean-token-mean
    --train.agent_func_path "$("$PYTHON" -m edge_verl.openrlhf agent)"
    --actor.adam.lr "$LR" --actor.lr_scheduler cosine --actor.lr_warmup_ratio 0 --actor.max_norm 1.0
    --ds.zero_stage 3 --ds.param_dtype bf16 --actor.gradient_checkpointing_enable
    --train.seed "$SEED" --ckpt.path "$CKPT_DIR" --ckpt.save_steps 100 --ckpt.load_enable
    --eval.dataset "$EVAL_FILES" --eval.temperature "$EVAL_TEMPERATURE" --eval.n_samples_per_prompt 1 --eval.steps 100
)
if [ "$DRY_RUN" = 1 ]; then
    printf 'EDGE_VERL_OPENRLHF=%q' "$OPTIONS_FILE"; printf ' %q' "${COMMAND[@]}"; echo
    exit 0
fi
EDGE_VERL_OPENRLHF="$OPTIONS_FILE" exec "${COMMAND[@]}"
