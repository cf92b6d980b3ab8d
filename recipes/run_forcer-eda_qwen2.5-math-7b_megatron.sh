#!/usr/bin/env bash
# EDGE-GRPO ablation: Force-R and EDA.
# Qwen/Qwen2.5-Math-7B | Megatron | 8 GPUs (1 node, 80 GB each) | EDGE-GRPO's (arXiv 2507.21848) training setup
# Run: bash recipes/run_forcer-eda_qwen2.5-math-7b_megatron.sh [Hydra overrides] (DRY_RUN=1 prints the command)
# Any variable can be set in the environment; what each does, its default and why, what a run needs: docs/recipes.md
# Written by `edge-verl recipe --write` from edge_verl/methods.py and edge_verl/recipes.py; change those, not this.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/defaults.sh"  # REPO, DATA_DIR, the defaults, recipes/lib/launch.sh
METHOD=forcer_eda BACKEND=megatron  # what this recipe runs: part of the run's name and identity
# ---- model and hardware ----
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-Math-7B}
NNODES=${NNODES:-1}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}
# ---- EDGE-GRPO's (arXiv 2507.21848) training setup ----
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/train_hard_1k_gec.parquet}
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-1}
ROLLOUT_N=${ROLLOUT_N:-8}
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}
TOTAL_STEPS=${TOTAL_STEPS:-null}
# ---- the method's variables ----
EDA_ENTROPY_GRADIENT=${EDA_ENTROPY_GRADIENT:-True}
GEC_CONTINUATION_TOKENS=${GEC_CONTINUATION_TOKENS:-256}
rl_defaults 32  # the other variables (recipes/lib/defaults.sh); 32: room for GEC's phrase

OVERRIDES=(  # first those of every RL recipe: data, model, update, rollout, reference model, reward
    data.train_files="$TRAIN_FILE" data.val_files="$VAL_FILES" data.train_batch_size="$TRAIN_BATCH_SIZE"
    data.max_prompt_length="$MAX_PROMPT_LENGTH" data.max_response_length="$MAX_RESPONSE_LENGTH"
    data.filter_overlong_prompts=True data.truncation=error data.seed="$SEED"
    actor_rollout_ref.model.path="$MODEL_PATH" actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.optim.lr="$LR" actor_rollout_ref.actor.optim.lr_warmup_steps=0
    actor_rollout_ref.actor.optim.clip_grad=1.0 actor_rollout_ref.actor.ppo_mini_batch_size="$MINI_BATCH_SIZE"
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.actor.use_dynamic_bsz="$USE_DYNAMIC_BSZ"
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu="$PPO_MAX_TOKEN_LEN_PER_GPU"
    actor_rollout_ref.actor.ppo_epochs=1 actor_rollout_ref.actor.clip_ratio_low=0.2
    actor_rollout_ref.actor.clip_ratio_high=0.2 actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
    actor_rollout_ref.actor.use_kl_loss=False actor_rollout_ref.actor.kl_loss_coef=0.0
    actor_rollout_ref.actor.entropy_coeff=0
    "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"
    "actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer,extra]"
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n="$ROLLOUT_N"
    actor_rollout_ref.rollout.temperature="$TEMPERATURE" actor_rollout_ref.rollout.top_p=1.0
    actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"
    actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION"
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"
    actor_rollout_ref.rollout.val_kwargs.temperature=0.1 actor_rollout_ref.rollout.val_kwargs.do_sample=True
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"
    reward.custom_reward_function.path=pkg://edge_verl.reward reward.custom_reward_function.name=compute_score
    algorithm.use_kl_in_reward=False +algorithm.edge_metrics.advantage_stats=True
    # ---- the method: forcer_eda (edge_verl/methods.py), one part a line ----
    algorithm.adv_estimator=edge_eda
    +algorithm.edge_seeding.enable=True actor_rollout_ref.rollout.seed="$SEED"
    +algorithm.edge_eda.entropy_gradient="$EDA_ENTROPY_GRADIENT"
    actor_rollout_ref.actor.calculate_entropy="$EDA_ENTROPY_GRADIENT"
    actor_rollout_ref.rollout.calculate_log_probs=False +algorithm.edge_gec.enable=True
    +algorithm.edge_gec.seed="$SEED" +algorithm.edge_gec.first_sample_tokens="$MAX_SAMPLE_LENGTH"
    +algorithm.edge_gec.continuation_tokens="$GEC_CONTINUATION_TOKENS"
    +algorithm.edge_gec.force_regenerate=True
    # ---- the Megatron backend; the trainer ----
    actor_rollout_ref.actor.optim.lr_decay_style=linear actor_rollout_ref.actor.optim.min_lr=0.0
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size="$MEGATRON_TP"
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size="$MEGATRON_PP"
    actor_rollout_ref.ref.megatron.tensor_model_parallel_size="$MEGATRON_TP"
    actor_rollout_ref.ref.megatron.pipeline_model_parallel_size="$MEGATRON_PP"
    trainer.logger="$LOGGER" trainer.project_name="$PROJECT_NAME" trainer.experiment_name="$EXPERIMENT_NAME"
    trainer.default_local_dir="$CKPT_DIR" trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$NGPUS_PER_NODE"
    trainer.total_epochs="$TOTAL_EPOCHS" trainer.total_training_steps="$TOTAL_STEPS" trainer.test_freq="$TEST_FREQ"
    trainer.save_freq="$SAVE_FREQ" trainer.max_actor_ckpt_to_keep="$MAX_CKPT_TO_KEEP"
    trainer.val_before_train="$VAL_BEFORE_TRAIN"
)
prepare_launch ppo_megatron_trainer "$@"  # the checks before verl (recipes/lib/launch.sh); DRY_RUN=1: print instead
"${LAUNCH[@]}" -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer "${OVERRIDES[@]}" "${CPU[@]}" "$@"
