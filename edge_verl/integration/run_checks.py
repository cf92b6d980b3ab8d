"""A run's options checked together, against verl's whole config: what one option section cannot check alone (EDA's
gradient form and its prerequisite, GEC's switch against the data, its rollout settings and token budgets, a
placebo's reward settings, the estimator's fewest groups). Pure functions of the config (no verl import): the
preflight runs them before Ray (``preflight.py``), the trainer again when the run starts (``trainer_run.start_run``),
and the GEC agent loop checks its token budget with the reflection phrase's length once it has the tokenizer
(``rollout.py``).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from edge_verl.algorithms import GEC_AGENT_LOOP
from edge_verl.algorithms.gec import GecConfig
from edge_verl.integration.run import REWARD_MODULE, TrainingRun, bypass_mode_enabled, gec_options

def check_gec_rows(
    enabled: bool, default_agent_loop: Optional[str], train_agent_names: Optional[Iterable], val_agent_names: Optional[Iterable]
) -> None:
    """GEC's one switch (``algorithm.edge_gec.enable``) must agree with the data; errors say what to change.

    ``*_agent_names``: the data's ``agent_name`` column ([] without one; None when it cannot be read)."""
    loop = GEC_AGENT_LOOP
    if default_agent_loop == loop:
        raise ValueError(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={loop} would correct validation responses too; "
            f"keep verl's default loop, set algorithm.edge_gec.enable=True and mark TRAINING rows with agent_name={loop}."
        )
    if val_agent_names is not None and loop in set(val_agent_names):
        raise ValueError(f"The validation data marks rows with agent_name={loop}: validation must never be corrected.")
    if train_agent_names is None:
        return
    has_gec_rows = loop in set(train_agent_names)
    if enabled and not has_gec_rows:
        raise ValueError(
            f"algorithm.edge_gec.enable=True but no training row has agent_name={loop}, so GEC would never run: "
            "train on the *_gec.parquet files of scripts/prepare_data.py (or add that column)."
        )
    if has_gec_rows and not enabled:
        raise ValueError(
            f"The training data marks rows with agent_name={loop} but GEC is off: set algorithm.edge_gec.enable=True "
            "(EDGE-GRPO), or train on data without that column."
        )

def check_gec_supported(config: Any) -> GecConfig:
    """Refuse settings under which GEC's injected tokens would corrupt verl's bookkeeping; the options."""
    options = gec_options(config.algorithm)
    rollout = config.actor_rollout_ref.rollout
    if rollout.get("calculate_log_probs", False):
        raise ValueError(
            "The edge_gec agent loop injects tokens the rollout never sampled, which have no rollout log-probs; "
            "set actor_rollout_ref.rollout.calculate_log_probs=False (rollout-correction IS/RS then stays off)."
        )
    if bypass_mode_enabled(config.algorithm):
        raise ValueError("edge_gec needs recomputed old log-probs; set algorithm.rollout_correction.bypass_mode=False.")
    if options.first_sample_tokens is not None:
        check_budget(options, int(rollout.response_length))
    check_token_budgets(config)
    check_placebo_reward(config, options)
    return options

def check_token_budgets(config: Any) -> None:
    """With dynamic batch sizes, each pass packs micro-batches up to a token budget per GPU (times the
    Ulysses sequence-parallel size), and verl's ``rearrange_micro_batches`` asserts that one whole sequence,
    prompt + response at the padded length, fits: a GEC run's responses are the longest a corrected response
    may be (first sample + phrase + continuation, or a whole solution; one that does not fit is skipped). Refuse
    here, before Ray starts, rather than at the first update after a whole rollout."""
    actor_rollout_ref = config.actor_rollout_ref
    passes = (
        ("actor", "use_dynamic_bsz", "ppo_max_token_len_per_gpu"),
        ("rollout", "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"),
        ("ref", "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"),
    )
    for section, switch, key in passes:
        part = actor_rollout_ref.get(section, None) or {}
        if not part.get(switch, False) or part.get(key, None) is None:
            continue
        sequence = int(actor_rollout_ref.rollout.prompt_length) + int(actor_rollout_ref.rollout.response_length)
        # the rollout's old-log-prob pass runs on the actor, under the actor's sequence parallel
        parallel = int((actor_rollout_ref.actor if section == "rollout" else part).get("ulysses_sequence_parallel_size", 1) or 1)
        budget = int(part[key]) * parallel
        if budget < sequence:
            raise ValueError(
                f"actor_rollout_ref.{section}.{key}={part[key]}{f' x ulysses_sequence_parallel_size={parallel}' if parallel > 1 else ''} "
                f"= {budget} tokens cannot hold one GEC-corrected sequence: data.max_prompt_length + data.max_response_length "
                f"= {sequence} (the response holds the first sample, the reflection phrase and the continuation). Raise "
                f"{key} to at least {-(-sequence // parallel)}, or set actor_rollout_ref.{section}.{switch}=False."
            )

def check_placebo_reward(config: Any, options: GecConfig) -> None:
    """``placebo_reward=as_gold`` rewards a placebo response in the agent loop, as verl's naive reward manager
    rewards its gold twin (``rollout.py``); verl keeps that reward, and the batch its extra-info keys,
    only when the naive manager scores every response inside the agent loop (no reward model: verl's
    ``enable_agent_reward_loop``, ray_trainer.py:949). Defaults are verl's where a key is absent."""
    if options.answer_source != "placebo" or options.placebo_reward != "as_gold":
        return
    reward = config.get("reward", None) or {}
    manager = reward.get("reward_manager", None) or {}
    source, name = manager.get("source", "register"), manager.get("name", "naive")
    fix = "or set algorithm.edge_gec.placebo_reward=graded (the placebo graded against the row's gold)"
    if (source, name) != ("register", "naive"):
        raise ValueError(
            f"algorithm.edge_gec.placebo_reward=as_gold rewards a placebo response as verl's naive reward manager "
            f"rewards its gold twin, but reward.reward_manager is source={source!r}, name={name!r}, whose rewards and "
            f"extra-info keys may differ: the placebo would not share EDGE's rewards. Use reward.reward_manager.name=naive "
            f"(source=register), {fix}."
        )
    model = reward.get("reward_model", None) or {}
    if model.get("enable", False):
        why = (
            "with enable_resource_pool the naive manager hands the reward function the reward model's router, which "
            "GEC's grading in the agent loop does not, so the twin's reward would not be the reward loop's"
            if model.get("enable_resource_pool", False)
            else "without enable_resource_pool verl scores rewards after the rollout, not in the agent loop, so the "
            "twin's reward would be overwritten or break the batch's reward extra info"
        )
        raise ValueError(
            f"algorithm.edge_gec.placebo_reward=as_gold needs every reward scored by the run's reward function in "
            f"verl's agent loop, but reward.reward_model.enable=True: {why}. Run without a reward model, {fix}."
        )

def check_budget(options: GecConfig, response_length: int, phrase_tokens: int = 0) -> None:
    """With a first-sample cap, a regenerated response (first sample + phrase + continuation) must fit in
    rollout.response_length, or the truncated responses GEC targets would lose their continuation."""
    first = options.first_sample_tokens
    if first is None:
        return
    needed = first + phrase_tokens + options.continuation_tokens
    if needed > response_length:
        raise ValueError(
            f"algorithm.edge_gec.first_sample_tokens={first} + the reflection phrase ({phrase_tokens} tokens) + "
            f"continuation_tokens={options.continuation_tokens} = {needed} exceeds actor_rollout_ref.rollout.response_length="
            f"{response_length}: raise response_length to at least {needed} (data.max_response_length) or lower first_sample_tokens."
        )

def uses_edge_reward(config: Any) -> bool:
    """verl's config grades with edge_verl's reward (``reward.custom_reward_function`` or the legacy
    top-level ``custom_reward_function``)."""
    sections = [config.get("reward", {}) or {}, config]
    for section in sections:
        function = section.get("custom_reward_function", None) or {}
        path = str(function.get("path", "") or "")
        if REWARD_MODULE in path.replace("/", "."):
            return True
    return False

def check_run_config(config: Any) -> TrainingRun:
    """The run's ``TrainingRun`` from verl's full config: options validated, GEC's settings checked."""
    run = TrainingRun.from_config(config.algorithm)
    run.grader_metrics = uses_edge_reward(config)
    prompts = (config.get("data", None) or {}).get("train_batch_size", None)
    if run.entry is not None and prompts is not None:  # verl's config always has it
        run.entry.check_groups(int(prompts), "data.train_batch_size")
    why = run.entry.loss_entropy(run.options) if run.entry is not None else None
    if why is not None:
        actor = config.actor_rollout_ref.actor
        if not (actor.get("calculate_entropy", False) or float(actor.get("entropy_coeff", 0.0) or 0.0) != 0.0):
            raise ValueError(f"{why}; verl computes that entropy only when asked: set actor_rollout_ref.actor.calculate_entropy=True.")
    if run.gec_enabled:
        check_gec_supported(config)
    return run
