"""The names edge_verl uses in verl's vocabulary: registry keys, config sections, batch columns, metrics.

Plain constants, no verl import, so the demo, the data preparation and the doctor can use them without
importing verl. Everything verl-facing is spelt here once.
"""

from __future__ import annotations

# The advantage estimators are not named here: each is a module of edge_verl/estimators/ named by its key in
# verl's core_algos registry (``algorithm.adv_estimator``, also the section ``algorithm.<name>`` of its options);
# ``edge_verl.estimators.names()`` lists them.

# Guided Error Correction: the agent loop in verl's agent-loop registry, selected per training row by
# the data's ``agent_name`` column; its options live under ``algorithm.edge_gec`` (switch: ``enable``).
GEC_AGENT_LOOP = "edge_gec"
GEC_SECTION = "edge_gec"
# ``AgentLoopOutput.extra_fields`` key under which the loop reports each response's correction.
GEC_INFO_KEY = "edge_verl_gec"
# Non-tensor column the legacy trainer's rollout gets before the batch is split across agent-loop
# workers: each response's index within its uid group (v1 passes ``session_id`` instead).
SAMPLE_INDEX_COLUMN = "edge_verl_sample_index"

# Reproducible runs (``algorithm.edge_seeding``): a seed per response, GEC keyed on it, v1's update batch in
# (prompt, sample index) order. The agent-loop wrapper hands each response's prompt key to the agent loop
# under PROMPT_KEY_FIELD, which verl's v1 trainer stores with the sample (the update batch is sorted by it).
SEEDING_SECTION = "edge_seeding"
PROMPT_KEY_FIELD = "edge_verl_prompt_key"

# Options of the metrics the plugin can add to any run (``algorithm.edge_metrics.advantage_stats``), and
# the scope of the advantage statistics (``edge_verl/adv/*``).
METRICS_SECTION = "edge_metrics"
ADVANTAGE_SCOPE = "adv"
# ``edge_metrics.per_source``: the scope of each data source's training statistics
# (``edge_verl/by_source/<data_source>/<stat>``).
BY_SOURCE_SCOPE = "by_source"

# The reward's extra-info key saying who decided each call (``edge_verl.reward.score.GRADER_OUTCOMES``),
# and the scope of the per-step fractions of calls per outcome (``edge_verl/grader/<outcome>``).
REWARD_GRADER_KEY = "grader"
GRADER_SCOPE = "grader"
# verl's extra_fields key (v1 trainer) holding the reward function's extra info per sample.
REWARD_EXTRA_INFO_FIELD = "reward_extra_info"
# ``reward.custom_reward_function.path`` values that mean edge_verl's reward.
REWARD_MODULE = "edge_verl.reward"

# GEC in the actor loss (``integration/trainer.py``): the per-token origin code of every response token
# (``edge_verl.algorithms.gec.ORIGINS``), written at the advantage step of a GEC run next to the advantages,
# and the batch-level options the loss treats GEC's injected tokens with (edge_gec.injected_loss, sft_coef).
# Per-origin diagnostics are logged as ``actor/gec/<origin>/<statistic>``.
GEC_ORIGIN_COLUMN = "edge_gec_token_origin"
GEC_LOSS_OPTIONS_KEY = "edge_gec_loss_options"

# verl's trainers prefix the actor update's metrics with "actor/" (``rename_dict``): the loss hook writes
# ``gec/...`` and ``edge_eda/...``, the trainer adapters read ``actor/gec/...`` and ``actor/edge_eda/...``.
ACTOR_METRIC_PREFIX = "actor"
GEC_LOSS_SCOPE = "gec"
GEC_ACTOR_SCOPE = f"{ACTOR_METRIC_PREFIX}/{GEC_LOSS_SCOPE}"
# verl's ``policy_loss.loss_mode`` of plain PPO clipping (dual clip included): the only mode whose clipping
# GEC's per-origin ``vanilla_clip_frac`` recomputes.
VANILLA_POLICY_LOSS = "vanilla"

# verl's ``actor_rollout_ref.model.fused_kernel_options.impl_backend`` value of the plugin's tiled log-prob +
# entropy head (``integration/fused_head.py``), with ``actor_rollout_ref.model.use_fused_kernels=True``.
TILED_HEAD_BACKEND = "edge_tiled"

# Prefix of every metric the plugin adds to verl's step metrics.
METRIC_PREFIX = "edge_verl"
