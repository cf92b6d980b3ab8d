"""One verl training run as the plugin sees it, its advantage steps, and verl 0.9.1's PPO step adapted to them: the
run (options parsed once), the step (a scoped context), the ONE adapter verl's registry calls for every estimator,
the v1 trainer's adapter and the hook in the actor's loss. No verl import at module level: the preflight runs in
processes that never import verl.

- **``TrainingRun``**: one per verl trainer that uses the plugin (``plugin_in_use``), created when the trainer
  loads its checkpoint (before the first rollout, ``start_run``) and attached to the trainer object. It holds the
  run's options parsed and validated ONCE (which estimator, its registry entry and options, whether GEC is on, the
  extra metrics, the seeding) and the estimator's training state (GEPO's EMA thresholds; saved with every
  checkpoint, ``checkpoint.py``). ``check_run_config`` checks what one option section cannot (EDA's gradient form and
  its prerequisite, GEC's rollout settings and token budgets, a placebo's reward settings, the estimator's fewest
  groups); the preflight (``preflight.py``) runs it before Ray, with the data files' checks. A plain verl run gets
  no run, and every adapter passes it straight through.
- **``AdvantageStep``**: one per advantage computation, opened by the trainer's adapter with ``with
  advantage_step(run, entropy=...) as step:`` around verl's own code. Steps do not nest (a second one is an
  error), and every path, exceptions included, closes the step. ``active_run`` makes a run current for the legacy
  trainer's ``fit`` (its advantage function and agent-loop manager have no reference to the trainer). Both
  "current" slots are ``contextvars.ContextVar``s: scoped, reset by the ``with`` blocks, private to the thread.
- **The estimator adapter** (``verl_estimator``): the ONE function verl's registry calls for every estimator of
  the registry (``edge_verl/estimators/``). verl calls a registered estimator with token_level_rewards,
  response_mask, index (uid) and config (= ``config.algorithm``) only; the per-token inputs an estimator reads come
  from the open step (filled by the trainer adapter) or from ``batch=`` (the signature of upstream PR #7473, verl's
  own key names). It unpacks into a ``GroupBatch``, calls the estimator's function, hands its metrics, loss
  columns and per-response values to the step, and packs. Missing inputs raise; there is no silent fallback to
  GRPO. ``register_estimators`` puts it in verl's registry when verl imports ``core_algos`` (``plugin.py``).
- **``V1Adapter``** wraps the v1 trainer's ``_compute_advantage`` (fetch the estimator's inputs from the
  TransferQueue once, run verl's advantage code inside the step, put the step's metrics into verl's ``metrics`` and
  its loss columns into the TransferQueue), ``_compute_metrics`` (GEC's and the grader's metrics from the rollout's
  ``extra_fields``), ``_update_actor``, the checkpoint methods and ``v1.utils.compute_advantage``; a seeded run's
  ``ReplayBuffer.sample`` returns the step's samples in (prompt, sample) order instead of completion order.
- **The loss hook** wraps ``losses.ppo_loss`` and the policy-loss lookup it uses, which every actor backend of verl
  0.9.1 calls (FSDP and Megatron engines, both trainers). What it does is decided by the columns the batch carries
  (written at the advantage step): an estimator's ``LossScale`` (EDA's gradient form) and GEC's token origins with
  how the loss treats injected tokens; any other batch goes through verl's loss untouched.

The values that travel by a channel verl's signatures do not show are listed with their reasons in
ARCHITECTURE.md ("How values travel").
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
import warnings
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import numpy as np
import torch
from omegaconf import OmegaConf

from edge_verl.algorithms import gec as gec_math
from edge_verl.algorithms import GEC_AGENT_LOOP
from edge_verl.algorithms.gec import GEC_INFO_KEY, GEC_LOSS_OPTIONS_KEY, GEC_ORIGIN_COLUMN, GecConfig
from edge_verl.config import PROMPT_KEY_FIELD, MetricsConfig, SeedingConfig, keyed_seed, seed_global_generators
from edge_verl.estimators.base import (
    ACTOR_METRIC_PREFIX, ESTIMATORS, GRADIENT_SHARE_METRIC, LOG_RATIO_CLAMP, LOSS_SCALE_METRIC, POLICY_LOSS_KEYWORDS,
    TOKEN_INPUTS, VANILLA_POLICY_LOSS, VERL_BATCH_KEYS, VERL_GRPO_EPSILON, Estimator, GroupBatch, batch_token_inputs,
    entropy_gradient_share, group_index_from_uids, loss_gradients,
)
from edge_verl.integration.checkpoint import resumed_folder, restore_run_state, save_state
from edge_verl.integration.internals import CORE

# Every metric the plugin adds to verl's step metrics is prefixed METRIC_PREFIX, then a scope: the advantage
# statistics of any estimator (``edge_metrics.advantage_stats``), each data source's training statistics
# (``edge_metrics.per_source``), the grader's outcomes, GEC's loss diagnostics (in the actor, ``actor/gec/...``).
METRIC_PREFIX = "edge_verl"
ADVANTAGE_SCOPE, BY_SOURCE_SCOPE, GRADER_SCOPE = "adv", "by_source", "grader"
GEC_LOSS_SCOPE = "gec"
GEC_ACTOR_SCOPE = f"{ACTOR_METRIC_PREFIX}/{GEC_LOSS_SCOPE}"
# The reward's extra-info key saying who decided each call (``edge_verl.reward.score.GRADER_OUTCOMES``), verl's
# extra_fields key (v1 trainer) holding the reward function's extra info per sample, and the
# ``reward.custom_reward_function.path`` that means edge_verl's reward.
REWARD_GRADER_KEY = "grader"
REWARD_EXTRA_INFO_FIELD = "reward_extra_info"
REWARD_MODULE = "edge_verl.reward"


# --- the run's options, parsed once -----------------------------------------------------------------------------


def config_section(config: Any, name: str) -> dict:
    """``config.<name>`` (a DictConfig, a dict, or absent) as a plain dict."""
    if config is None:
        return {}
    section = config.get(name, None) if hasattr(config, "get") else getattr(config, name, None)
    if section is None:
        return {}
    if OmegaConf.is_config(section):
        return OmegaConf.to_container(section, resolve=True)
    return dict(section)

def bypass_mode_enabled(algorithm_config: Any) -> bool:
    """verl's bypass mode skips the old-policy pass (no entropy, old_log_probs := rollout log-probs)."""
    return bool(config_section(algorithm_config, "rollout_correction").get("bypass_mode", False))

def norm_adv_by_std(algorithm_config: Any) -> bool:
    """verl's ``algorithm.norm_adv_by_std_in_grpo`` (default True), honoured by both estimators."""
    return bool(algorithm_config.get("norm_adv_by_std_in_grpo", True)) if hasattr(algorithm_config, "get") else True

def estimator_options(algorithm_config: Any, estimator: str) -> Any:
    """The validated options of one of the plugin's estimators (``estimators.ESTIMATORS``) from
    ``algorithm.<estimator>``."""
    if bypass_mode_enabled(algorithm_config):
        raise ValueError(
            f"algorithm.adv_estimator={estimator} needs the old-policy forward pass (per-token entropy / "
            "old_log_probs), which algorithm.rollout_correction.bypass_mode=True skips; set it to False."
        )
    return ESTIMATORS[estimator].options(config_section(algorithm_config, estimator))

def plugin_in_use(algorithm_config: Any) -> bool:
    """The run asks for something of the plugin: one of its estimators, or options under
    ``algorithm.edge_gec`` / ``algorithm.edge_metrics`` / ``algorithm.edge_seeding`` (which are then validated,
    even when they switch nothing on). Plain look-ups, nothing parsed: a plain verl run pays nothing."""
    if not hasattr(algorithm_config, "get"):
        return False
    if str(algorithm_config.get("adv_estimator", "")) in ESTIMATORS:
        return True
    sections = (GecConfig.section, MetricsConfig.section, SeedingConfig.section)
    return any((section := algorithm_config.get(name, None)) is not None and len(section) > 0 for name in sections)

def seeding_options(algorithm_config: Any) -> Optional[SeedingConfig]:
    """The validated ``algorithm.edge_seeding`` options of a run that uses the plugin, None for a plain run
    (whose sampling stays verl's)."""
    if not plugin_in_use(algorithm_config):
        return None
    return SeedingConfig.from_mapping(config_section(algorithm_config, SeedingConfig.section))

def sampling_seed(config: Any) -> Optional[int]:
    """The run's sampling seed (``actor_rollout_ref.rollout.seed``) when its responses are seeded one by one
    (``algorithm.edge_seeding.enable`` in a run that uses the plugin), else None. ``config``: verl's whole config."""
    options = seeding_options(config.get("algorithm", None))
    if options is None or not options.enable:
        return None
    return int(config.actor_rollout_ref.rollout.get("seed", 0) or 0)

def gec_options(algorithm_config: Any) -> GecConfig:
    """The validated ``algorithm.edge_gec`` options (``enable`` is GEC's one switch)."""
    return GecConfig.from_mapping(config_section(algorithm_config, GecConfig.section))


@dataclass
class TrainingRun:
    """The plugin's view of one verl training run (see module docstring).

    estimator: ``algorithm.adv_estimator``; entry: its ``estimators.Estimator`` when it is one of ours, and
    options its validated config; gec: the validated GEC options (``gec.enable`` says whether GEC is on);
    metrics: the extra metrics asked for (``algorithm.edge_metrics``); seeding: whether responses are seeded one
    by one and the update batch ordered (``algorithm.edge_seeding``); state: the estimator's training state
    (GEPO's thresholds; saved with every checkpoint under ``entry.state_key``); grader_metrics: the run
    grades with edge_verl's reward (log ``edge_verl/grader/*``).
    """

    estimator: str
    options: Any
    gec: GecConfig
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    seeding: SeedingConfig = field(default_factory=SeedingConfig)
    state: Any = None
    grader_metrics: bool = False
    norm_adv_by_std: bool = True  # verl's algorithm.norm_adv_by_std_in_grpo

    @classmethod
    def from_config(cls, algorithm_config: Any) -> "TrainingRun":
        """Parse and validate ``config.algorithm`` once; errors name the key and the allowed values."""
        estimator = str(algorithm_config.get("adv_estimator", "") if hasattr(algorithm_config, "get") else "")
        entry = ESTIMATORS.get(estimator)
        options = estimator_options(algorithm_config, estimator) if entry is not None else None
        return cls(
            estimator=estimator,
            options=options,
            gec=gec_options(algorithm_config),
            metrics=MetricsConfig.from_mapping(config_section(algorithm_config, MetricsConfig.section)),
            seeding=SeedingConfig.from_mapping(config_section(algorithm_config, SeedingConfig.section)),
            state=entry.new_state(options) if entry is not None else None,
            norm_adv_by_std=norm_adv_by_std(algorithm_config),
        )

    @property
    def entry(self) -> Optional[Estimator]:
        """The estimator's table entry (None for verl's own estimators)."""
        return ESTIMATORS.get(self.estimator) if self.options is not None else None

    @property
    def std_epsilon(self) -> float:
        """The epsilon of the estimator's GRPO normalisation (verl's for verl's estimators)."""
        return self.entry.std_epsilon(self.options) if self.entry is not None else VERL_GRPO_EPSILON

    @property
    def uses_plugin_estimator(self) -> bool:
        return self.options is not None

    @property
    def gec_enabled(self) -> bool:
        return self.gec.enable

    @property
    def advantage_stats(self) -> bool:
        return self.metrics.advantage_stats

    @property
    def per_source(self) -> bool:
        return self.metrics.per_source

    @property
    def opens_advantage_step(self) -> bool:
        """The advantage step has work for the plugin: its estimator, statistics of verl's (per data source
        too), or GEC's token origins for the actor loss."""
        return self.uses_plugin_estimator or self.advantage_stats or self.per_source or self.gec_enabled

    @property
    def token_inputs(self) -> tuple[str, ...]:
        """The per-token inputs the estimator reads with its options (``estimators.TOKEN_INPUTS``)."""
        return self.entry.inputs(self.options) if self.entry is not None else ()

    @property
    def needs_entropy(self) -> bool:
        """The estimator reads the old policy's per-token entropy (EDA; GEPO with token_entropy)."""
        return "entropy" in self.token_inputs

    @property
    def loss_metrics(self) -> tuple[tuple[str, str], ...]:
        """(actor metric key, or key prefix ending in "/", without verl's "actor/"; the option that asks for
        it) for each feature whose work these options move into the actor loss (EDA's gradient form, GEC's
        masked / sft): an update must report it."""
        wanted = [self.entry.loss_metric(self.options) if self.entry is not None else None]
        if self.gec.enable and self.gec.injected_loss != "surrogate":
            wanted.append((f"{GEC_LOSS_SCOPE}/", f"algorithm.{GecConfig.section}.injected_loss={self.gec.injected_loss}"))
        return tuple(key for key in wanted if key is not None)

    def state_dict(self) -> dict:
        """The estimator's state under its ``state_key`` ({} without state)."""
        return {self.entry.state_key: self.state.state_dict()} if self.state is not None else {}


# --- the run's options, checked together (before Ray, ``preflight.py``; and again in the trainer, ``start_run``) ---


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


# --- attached to verl's trainer -------------------------------------------------------------------------------

_RUN_ATTRIBUTE = "_edge_verl_run"


def agent_names(dataset: Any) -> Optional[list]:
    """The ``agent_name`` column of a verl RL dataset ([] without the column; None when unreadable)."""
    frame = getattr(dataset, "dataframe", None)
    if frame is None or not hasattr(frame, "column_names"):
        return None
    return list(frame["agent_name"]) if "agent_name" in frame.column_names else []

def start_run(trainer: Any) -> Optional[TrainingRun]:
    """The run's ``TrainingRun`` (None for a run that does not use the plugin), checked against its data;
    attached to the trainer. A seeded run also seeds the trainer process's global generators from its seed (verl
    shuffles its validation loader with torch's global generator)."""
    config = trainer.config
    run = check_run_config(config) if plugin_in_use(config.algorithm) else None
    if run is not None:
        agent = config.actor_rollout_ref.rollout.get("agent", None) or {}
        check_gec_rows(
            run.gec_enabled,
            agent.get("default_agent_loop", None),
            agent_names(getattr(trainer, "train_dataset", None)),
            agent_names(getattr(trainer, "val_dataset", None)),
        )
    if run is not None and run.seeding.enable:  # before the first rollout, validation and dataloader iteration
        seed_global_generators(keyed_seed("trainer", sampling_seed(config)))
    setattr(trainer, _RUN_ATTRIBUTE, run)
    return run

def run_of(trainer: Any) -> Optional[TrainingRun]:
    return getattr(trainer, _RUN_ATTRIBUTE) if hasattr(trainer, _RUN_ATTRIBUTE) else start_run(trainer)


_NOT_IN_WORKERS = "the edge_verl plugin did not run in the actor workers (check VERL_USE_EXTERNAL_PLUGINS and `edge-verl doctor`)."


def check_loss_hook_ran(run: Optional[TrainingRun], metric_keys: Iterable[str]) -> None:
    """Work a feature moves into the actor workers' loss (EDA's gradient form, GEC's masked / sft controls;
    ``TrainingRun.loss_metrics``) reports a metric there: an update without it means the plugin was not
    loaded in the workers (the paper's surrogate, or the detached form, would train silently)."""
    if run is None:
        return
    keys = set(metric_keys)
    for metric, option in run.loss_metrics:
        wanted = f"{ACTOR_METRIC_PREFIX}/{metric}"
        found = any(key.startswith(wanted) for key in keys) if wanted.endswith("/") else wanted in keys
        if not found:
            shown = wanted + "*" if wanted.endswith("/") else wanted
            raise RuntimeError(f"{option} but the actor update reported no {shown} metric: {_NOT_IN_WORKERS}")


# --- the advantage step ---------------------------------------------------------------------------------------


@dataclass
class AdvantageStep:
    """Inputs handed to the estimator for one advantage computation, and what it hands back.

    inputs: per-token tensors (B, T) under the plugin's names: "entropy" (old policy's token entropy),
    "old_log_probs". metrics: the step's metrics, already prefixed for verl's logger. loss_columns:
    per-token tensors (B, T) the estimator wants next to ``advantages`` in the actor's batch (EDA's
    gradient form: ``estimators/edge_eda.py``'s ``EDA_*_COLUMN``), 0 off the response tokens; loss_options: batch-level values
    for the actor loss (its ``EDA_OPTIONS_KEY``). The trainer adapters return all three to verl.
    sources: the responses' ``data_source`` (B,), when the run logs per-source statistics and the adapter's
    batch carries them; per_response: per-response (B,) values an estimator hands to those statistics
    (GEPO: ``estimators.base.per_source_statistics``'s ``gepo`` fields).
    """

    run: Optional[TrainingRun]  # None: verl's compute_advantage called outside a trainer
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    loss_columns: dict[str, torch.Tensor] = field(default_factory=dict)
    loss_options: dict[str, Any] = field(default_factory=dict)
    sources: Optional[Any] = None
    per_response: dict[str, torch.Tensor] = field(default_factory=dict)
    _groupings: dict[int, tuple[Any, tuple]] = field(default_factory=dict, repr=False)

    def grouping(self, uids: Any) -> tuple[torch.Tensor, int, torch.Tensor]:
        """``group_index_from_uids(uids)``, computed once per uid array in this step: the estimator and the
        step's advantage statistics share it (verl hands both the same ``uid`` array)."""
        cached = self._groupings.get(id(uids))
        if cached is None or cached[0] is not uids:
            cached = self._groupings[id(uids)] = (uids, group_index_from_uids(uids))
        return cached[1]


_CURRENT_RUN: ContextVar[Optional[TrainingRun]] = ContextVar("edge_verl_run", default=None)
_CURRENT_STEP: ContextVar[Optional[AdvantageStep]] = ContextVar("edge_verl_step", default=None)


def current_run() -> Optional[TrainingRun]:
    return _CURRENT_RUN.get()

def current_step() -> Optional[AdvantageStep]:
    return _CURRENT_STEP.get()

@contextlib.contextmanager
def active_run(run: TrainingRun) -> Iterator[TrainingRun]:
    """Make ``run`` the current training run for the block (the legacy trainer's ``fit``)."""
    token = _CURRENT_RUN.set(run)
    try:
        yield run
    finally:
        _CURRENT_RUN.reset(token)

@contextlib.contextmanager
def advantage_step(run: Optional[TrainingRun], **inputs: Optional[torch.Tensor]) -> Iterator[AdvantageStep]:
    """One advantage computation of ``run``: hand ``inputs`` (None values are skipped) to the estimator."""
    if _CURRENT_STEP.get() is not None:
        raise RuntimeError("an advantage step is already open: each trainer adapter opens exactly one per step")
    step = AdvantageStep(run=run, inputs={key: value for key, value in inputs.items() if value is not None})
    token = _CURRENT_STEP.set(step)
    try:
        yield step
    finally:
        _CURRENT_STEP.reset(token)

def prefixed(metrics: Mapping[str, float], *scope: str) -> dict[str, float]:
    """``{"x": 1}`` -> ``{"edge_verl/<scope>/x": 1}`` (verl's logger groups by the prefix)."""
    prefix = "/".join((METRIC_PREFIX, *scope))
    return {f"{prefix}/{key}": value for key, value in metrics.items()}


# --- the estimator adapter: what verl's registry calls for every estimator of the registry -------------------


_HINT = (
    "Run verl through the edge_verl plugin (edge-verl doctor), inside one of verl's trainers, and keep "
    "algorithm.rollout_correction.bypass_mode=False."
)


def _token_input(name: str, step: Optional[AdvantageStep], batch: Optional[Mapping], estimator: str, shape) -> torch.Tensor:
    """Input ``name`` (B, T) from ``batch`` (verl's names) or the open step; errors say what to change."""
    tensor = None
    if batch is not None:
        tensor = next((batch[key] for key, ours in VERL_BATCH_KEYS.items() if ours == name and key in batch.keys()), None)
    if tensor is None and step is not None:
        tensor = step.inputs.get(name)
    if tensor is None:
        raise KeyError(f"algorithm.adv_estimator={estimator} needs {TOKEN_INPUTS[name].description}, which this batch does not carry. {_HINT}")
    if tensor.shape != shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}, response_mask {tuple(shape)}")
    return tensor


def _context(entry: Estimator, config: Any) -> tuple[Optional[AdvantageStep], Optional[TrainingRun], Any, bool]:
    """The open step, the current run, the entry's options and ``norm_adv_by_std_in_grpo``, all parsed once
    per run; outside a run, parsed from ``config``."""
    step = current_step()
    run = step.run if step is not None else current_run()
    if run is not None and run.estimator == entry.name:
        return step, run, run.options, run.norm_adv_by_std
    return step, None, estimator_options(config, entry.name), norm_adv_by_std(config)


class _Batch:
    """The common unpacking: uid groups (shared with the step's other metrics) and outcome scores on the
    rewards' device."""

    def __init__(self, estimator: str, token_level_rewards: torch.Tensor, index: Any, step: Optional[AdvantageStep]):
        if index is None:
            raise KeyError(f"algorithm.adv_estimator={estimator} needs uid groups (index); verl passes them when the batch has 'uid'.")
        group_index, self.num_groups, is_pad = step.grouping(index) if step is not None else group_index_from_uids(index)
        device = token_level_rewards.device
        self.group_index = group_index.to(device)
        self.valid = ~is_pad.to(device)
        self.scores = token_level_rewards.sum(dim=-1).to(torch.float32)


def _state(entry: Estimator, run: Optional[TrainingRun]) -> Any:
    """The entry's training state, which belongs to a training run (None for an estimator without one)."""
    if entry.state is None:
        return None
    if run is None or run.state is None:
        raise RuntimeError(
            f"algorithm.adv_estimator={entry.name} keeps training state across steps, which belongs to a training "
            "run: verl's trainers provide one through the edge_verl plugin; elsewhere call the estimator inside "
            "`with edge_verl.integration.trainer.active_run(TrainingRun.from_config(config.algorithm))`."
        )
    return run.state


def verl_estimator(entry: Estimator) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The function verl's registry calls for ``entry``: unpack verl's arguments and the open step into a
    ``GroupBatch``, call the entry's ONE function, hand its metrics, loss columns and per-response values to
    the step, and return verl's (advantages, returns)."""

    def compute_advantage(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        batch: Optional[Mapping] = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        step, run, options, norm_by_std = _context(entry, config)
        state = _state(entry, run)
        device = token_level_rewards.device
        tokens = {name: _token_input(name, step, batch, entry.name, response_mask.shape).to(device) for name in entry.inputs(options)}
        data = _Batch(entry.name, token_level_rewards, index, step)
        group_batch = GroupBatch(
            scores=data.scores, response_mask=response_mask, group_index=data.group_index, num_groups=data.num_groups,
            valid=data.valid, tokens=tokens, norm_by_std=norm_by_std,
        )
        output = entry.compute(group_batch, options, state)
        if step is not None:
            step.metrics.update(prefixed(output.metrics, entry.name))
            step.loss_columns.update(output.loss_columns)
            step.loss_options.update(output.loss_options)
            if run is not None and run.per_source:
                step.per_response.update(output.per_response)
        advantages = output.advantages.to(token_level_rewards.dtype)
        return advantages, advantages

    compute_advantage.__name__ = compute_advantage.__qualname__ = f"compute_{entry.name}_advantage"
    compute_advantage.__doc__ = f"verl estimator ``{entry.name}``: {entry.description} (edge_verl.integration.trainer)."
    return compute_advantage


_ADAPTERS: dict[str, Callable] = {}


def adapter_of(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The one verl function of the table's entry ``name`` (built once, so registration is idempotent)."""
    function = _ADAPTERS.get(name)
    if function is None:
        function = _ADAPTERS[name] = verl_estimator(ESTIMATORS[name])
    return function


def register_estimators(core_algos_module: Any) -> None:
    """Register every estimator of the table in verl's registry (idempotent): verl's import of
    ``core_algos`` calls it, so an entry added before (by a module in ``EDGE_VERL_FEATURE_MODULES``, which
    the plugin imports first, ``integration/plugin.py``) is registered with the paper's two.

    Decided by feature, not by version: a verl that ships its own estimator under one of these names (the
    upstream series in upstream/verl/) keeps it, and importing verl must not fail over the name; the
    plugin's one is then not registered, and a warning says so.
    """
    for name in ESTIMATORS:
        function = adapter_of(name)
        present = core_algos_module.ADV_ESTIMATOR_REGISTRY.get(name)  # in VERL_INTERNALS
        if present is not None and present is not function:
            warnings.warn(
                f"verl already registers the advantage estimator {name!r} ({getattr(present, '__module__', present)}); "
                "edge_verl's is not registered and verl's own is used.",
                stacklevel=2,
            )
            continue
        core_algos_module.register_adv_est(name)(function)


# --- the run's state with verl's checkpoints (``checkpoint.py``) -------------------------------------------------


def wrap_load_checkpoint(original: Callable) -> Callable:
    def _load_checkpoint(self, *args, **kwargs):
        run = run_of(self)
        result = original(self, *args, **kwargs)
        folder = resumed_folder(self)
        if run is not None and folder is not None:
            restore_run_state(run, folder)
        return result

    return _load_checkpoint

def wrap_save_checkpoint(original: Callable) -> Callable:
    def _save_checkpoint(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        run = run_of(self)
        if run is not None and run.state is not None:
            save_state(os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"), run.state_dict())
        return result

    return _save_checkpoint


# --- a seeded run's update batch in (prompt, sample) order (v1) ----------------------------------------------------


def _values(column: Any) -> list:
    """A TransferQueue column as a list of Python values (a tensor, a non-tensor stack, or a plain sequence)."""
    if hasattr(column, "tolist"):
        return column.tolist()
    return [getattr(item, "data", item) for item in column]


def _order_key(key: str, prompt: Any, session: Any) -> tuple:
    """verl's sample key is ``{uid}_{session_id}_{output index}``; the uid is random, the prompt key is not."""
    return int(prompt), int(session), int(key.rsplit("_", 1)[-1])


# The sampling seed of a replay buffer's run, set by the trainer that builds it (``ReplayBuffer`` gets only the
# trainer's v1 section of the config, not ``algorithm``).
_BUFFER_SEED = "_edge_verl_sampling_seed"


def wrap_build_replay_buffer(original: Callable) -> Callable:
    def _build_replay_buffer(self, *args, **kwargs):
        buffer = original(self, *args, **kwargs)
        setattr(buffer, _BUFFER_SEED, sampling_seed(self.config))
        return buffer

    return _build_replay_buffer


def wrap_replay_buffer_sample(tq_module: Any) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        def sample(self, global_steps, partition_id, batch_size, *args, **kwargs):
            batch, metrics = original(self, global_steps, partition_id, batch_size, *args, **kwargs)
            if not batch.keys or getattr(self, _BUFFER_SEED, None) is None:
                return batch, metrics
            fields = tq_module.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                            select_fields=[PROMPT_KEY_FIELD, "session_id"])
            prompts, sessions = _values(fields[PROMPT_KEY_FIELD]), _values(fields["session_id"])
            order = sorted(range(len(batch.keys)), key=lambda i: _order_key(batch.keys[i], prompts[i], sessions[i]))
            ordered = dataclasses.replace(batch, keys=[batch.keys[i] for i in order], tags=[batch.tags[i] for i in order])
            return ordered, metrics

        return sample

    return make


def install_replay_buffer(module: Any) -> None:
    CORE.wrap(module, "ReplayBuffer.sample", wrap_replay_buffer_sample(module.tq))


# --- what both trainers' adapters compute: advantage statistics, GEC's and the grader's metrics -------------------


def after_actor_update(run: Optional[TrainingRun], metrics: dict) -> None:
    """Both trainers' ``_update_actor``, on the update's metrics (verl's, reduced): stop a run whose loss
    hook did not run in the workers, and turn GEC's per-origin sums into their statistics in place."""
    check_loss_hook_ran(run, metrics)
    if run is not None and run.gec_enabled:
        finish_gec_actor_metrics(metrics)


def advantage_metrics(data: Any, step: Any) -> dict[str, float]:
    """``edge_verl/adv/*`` of a verl batch after its advantage step (any estimator; the step's uid grouping)."""
    from edge_verl.estimators.base import advantage_statistics, outcome_statistics, response_valid

    batch = data.batch
    group_index, num_groups, is_pad = step.grouping(data.non_tensor_batch["uid"])
    advantages = batch["advantages"]
    scores = batch["token_level_rewards"].sum(dim=-1).to(torch.float32)
    device = advantages.device
    stats = advantage_statistics(advantages, batch["response_mask"], scores, group_index.to(device), num_groups, ~is_pad.to(device))
    valid = response_valid(batch["response_mask"], is_pad.to(device))
    stats.update(outcome_statistics(scores, group_index.to(device), num_groups, valid))
    return prefixed(stats, ADVANTAGE_SCOPE)


def step_inputs(data: Any) -> dict[str, torch.Tensor]:
    """The estimators' per-token inputs in a verl batch, under their names (``estimators.base.TOKEN_INPUTS``)."""
    return batch_token_inputs(data.batch)


def compute_advantage_in_step(original: Callable, step: Any, data: Any, args: tuple, kwargs: dict) -> Any:
    """verl's ``compute_advantage`` inside an open step, with the batch's inputs for the estimator and,
    when the run asks for them (``edge_metrics.advantage_stats``), the advantage statistics of whatever
    estimator ran (the plugin's estimators report their own variance and tied groups in any case)."""
    for key, value in step_inputs(data).items():
        step.inputs.setdefault(key, value)
    data = original(data, *args, **kwargs)
    if step.run is not None and step.run.advantage_stats:
        step.metrics.update(advantage_metrics(data, step))
    if step.run is not None and step.run.per_source:
        step.metrics.update(per_source_metrics(data, step))
    return data


def per_source_metrics(data: Any, step: Any) -> dict[str, float]:
    """``edge_verl/by_source/<data_source>/*`` of a verl batch after its advantage step: the responses'
    sources from the step (the v1 adapter reads them from the TransferQueue) or the batch (legacy)."""
    from edge_verl.estimators.base import per_source_statistics

    sources = step.sources if step.sources is not None else data.non_tensor_batch.get("data_source")
    if sources is None:
        raise KeyError("algorithm.edge_metrics.per_source=True needs each row's data_source, which this batch does not carry")
    batch = data.batch
    group_index, num_groups, is_pad = step.grouping(data.non_tensor_batch["uid"])
    device = batch["response_mask"].device
    found = per_source_statistics(
        sources, batch["token_level_rewards"].sum(dim=-1).to(torch.float32), batch["response_mask"],
        batch["old_log_probs"] if "old_log_probs" in batch.keys() else None, group_index.to(device), num_groups, ~is_pad.to(device),
        gepo=step.per_response or None,
    )
    return {key: value for source, stats in found.items() for key, value in prefixed(stats, BY_SOURCE_SCOPE, source).items()}


def gec_advantage_outputs(
    run: TrainingRun, step: Any, infos: list, uids: Any, response_mask: torch.Tensor, advantages: torch.Tensor, scores: torch.Tensor,
    entropy: Optional[torch.Tensor] = None,
) -> None:
    """GEC at the advantage step (any estimator): ``gec.advantage_step_outputs`` of the rows' records
    (``infos`` (B,): each row's ``extra_fields["edge_verl_gec"]``, None where GEC did not run; ``scores`` (B,)
    final rewards; ``entropy`` (B, T) the old policy's) into the step: each response token's origin and the
    injected tokens' treatment as loss column and options (the actor's loss, below), the statistics as
    sampled and as trained as ``edge_verl/gec/sampled/*`` and ``edge_verl/gec/final/*``."""
    outputs = gec_math.advantage_step_outputs(
        infos, response_mask, advantages, scores, step.grouping(uids),
        norm_by_std=run.norm_adv_by_std, epsilon=run.std_epsilon, entropy=entropy,
    )
    step.loss_columns[GEC_ORIGIN_COLUMN] = outputs.origins
    options = run.gec
    step.loss_options[GEC_LOSS_OPTIONS_KEY] = {
        "injected_loss": options.injected_loss, "sft_coef": options.sft_coef, "injected_share": outputs.injected_share,
    }
    step.metrics.update(prefixed(outputs.sampled, "gec", "sampled"))
    step.metrics.update(prefixed(outputs.final, "gec", "final"))


def finish_gec_actor_metrics(metrics: dict) -> None:
    """The actor update's per-origin sums (``actor/gec/<origin>/_*``, reduced by verl) replaced in place by
    the shares and means they give (``gec.finish_origin_metrics``)."""
    finished = gec_math.finish_origin_metrics(metrics, GEC_ACTOR_SCOPE)
    for key in gec_math.raw_keys(metrics, GEC_ACTOR_SCOPE):
        metrics.pop(key)
    metrics.update(finished)


def gec_metrics(infos, final_scores, uids, response_mask, old_log_probs) -> dict[str, float]:
    return prefixed(gec_math.summarize_corrections(infos, final_scores, uids, response_mask, old_log_probs))


def grader_metrics(outcomes: Iterable) -> dict[str, float]:
    from edge_verl.reward.score import grader_outcome_fractions

    return prefixed(grader_outcome_fractions(outcomes), GRADER_SCOPE)


# --- the v1 trainer ------------------------------------------------------------------------------------------

class V1Adapter:
    """``PPOTrainer``: every step's data lives in the TransferQueue (``tq``); ``_compute_advantage(batch,
    metrics)`` fetches what verl's advantage code reads and writes the advantages back."""

    def __init__(self, tq_module: Any):
        self.tq = tq_module

    def compute_advantage(self, original: Callable) -> Callable:
        def _compute_advantage(trainer, batch, metrics, *args, **kwargs):
            run = run_of(trainer)
            if run is None or not run.opens_advantage_step:
                return original(trainer, batch, metrics, *args, **kwargs)
            entropy = response_mask = sources = None
            if run.needs_entropy:
                fetched = self.tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["entropy", "response_mask"])
                response_mask = fetched["response_mask"]
                entropy = fetched.to_padded_tensor()["entropy"]
            if run.per_source:  # verl's advantage batch holds uid, not data_source
                sources = self.tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["data_source"]).pop("data_source").tolist()
            with advantage_step(run, entropy=entropy) as step:
                step.sources = sources
                result = original(trainer, batch, metrics, *args, **kwargs)
            if run.gec_enabled:
                fields = ["extra_fields", "uid", "response_mask", "advantages", "rm_scores"]
                fields += [] if entropy is not None else ["entropy"]  # the sampled tokens' entropy (gec/sampled/entropy)
                data = self.tq.kv_batch_get(keys=result.keys, partition_id=result.partition_id, select_fields=fields)
                extras = data.pop("extra_fields").tolist()
                uids = np.array([str(uid) for uid in data.pop("uid").tolist()], dtype=object)
                response_mask = data["response_mask"] if response_mask is None else response_mask
                padded = data.to_padded_tensor()
                infos = [extra.get(GEC_INFO_KEY) if isinstance(extra, dict) else None for extra in extras]
                scores = padded["rm_scores"].sum(dim=-1)
                gec_advantage_outputs(run, step, infos, uids, padded["response_mask"], padded["advantages"], scores,
                                      entropy=entropy if entropy is not None else padded["entropy"])
            metrics.update(step.metrics)
            return self.put_loss_inputs(result, step, response_mask) if step.loss_columns else result

        return _compute_advantage

    def put_loss_inputs(self, batch: Any, step: Any, response_mask: Any) -> Any:
        """The estimator's loss columns into the TransferQueue next to ``advantages`` (nested the same way,
        on the rows' response lengths), its loss options into the batch's extra_info (which reaches the
        actor update as non-tensor data)."""
        from tensordict import TensorDict
        from verl.workers.utils.padding import response_to_nested

        fields = TensorDict({key: response_to_nested(column, response_mask) for key, column in step.loss_columns.items()}, batch_size=len(batch.keys))
        stored = self.tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
        stored.extra_info = {**(batch.extra_info or {}), **(stored.extra_info or {}), **step.loss_options}
        return stored

    @staticmethod
    def utils_compute_advantage(original: Callable) -> Callable:
        """``v1.utils.compute_advantage``: called by ``_compute_advantage``, inside the step it opened (any
        other caller gets verl's function as it is)."""

        def compute_advantage(data, *args, **kwargs):
            step = current_step()
            if step is None:
                return original(data, *args, **kwargs)
            return compute_advantage_in_step(original, step, data, args, kwargs)

        return compute_advantage

    def compute_metrics(self, original: Callable) -> Callable:
        def _compute_metrics(trainer, batch, metrics, *args, **kwargs):
            result = original(trainer, batch, metrics, *args, **kwargs)
            run = run_of(trainer)
            if run is None or not (run.gec_enabled or run.grader_metrics):
                return result
            keys = [key for key, tag in zip(batch.keys, batch.tags) if not tag.get("is_padding", False)]
            fields = ["extra_fields", "uid", "rm_scores", "response_mask", "old_log_probs"] if run.gec_enabled else ["extra_fields"]
            data = self.tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
            extras = [extra if isinstance(extra, dict) else {} for extra in data.pop("extra_fields").tolist()]
            if run.grader_metrics:
                metrics.update(grader_metrics((extra.get(REWARD_EXTRA_INFO_FIELD) or {}).get(REWARD_GRADER_KEY) for extra in extras))
            if run.gec_enabled:
                uids = [str(uid) for uid in data.pop("uid").tolist()]
                padded = data.to_padded_tensor()
                infos = [extra.get(GEC_INFO_KEY) for extra in extras]
                metrics.update(gec_metrics(infos, padded["rm_scores"].sum(dim=-1), uids, padded["response_mask"], padded["old_log_probs"]))
            return result

        return _compute_metrics

    @staticmethod
    def update_actor(original: Callable) -> Callable:
        def _update_actor(self, batch, metrics, *args, **kwargs):
            result = original(self, batch, metrics, *args, **kwargs)
            after_actor_update(run_of(self), metrics)
            return result

        return _update_actor

    @classmethod
    def install(cls, module: Any) -> None:
        adapter = cls(module.tq)
        for path, make in (
            ("PPOTrainer._compute_advantage", adapter.compute_advantage),
            ("PPOTrainer._compute_metrics", adapter.compute_metrics),
            ("PPOTrainer._update_actor", cls.update_actor),
            ("PPOTrainer._load_checkpoint", wrap_load_checkpoint),
            ("PPOTrainer._save_checkpoint", wrap_save_checkpoint),
        ):
            CORE.wrap(module, path, make)

    @classmethod
    def install_utils(cls, module: Any) -> None:
        CORE.wrap(module, "compute_advantage", cls.utils_compute_advantage)


# === the actor's loss (in every actor worker) ==================================================================

# An estimator with a ``LossScale`` whose columns the micro-batch carries (EDA's gradient form): per micro-batch,
# the entry's factor from those columns and the current policy's entropy (``model_output["entropy"]``, which needs
# ``actor.calculate_entropy=True``); verl's own policy loss (any ``policy_loss.loss_mode``, its clipping and
# ``loss_agg_mode`` unchanged) then receives the advantages times that factor. Diagnostics:
# ``actor/<estimator>/entropy_grad_share`` (one ``autograd.grad`` over the loss's elementwise ops, no second
# backward through the model) and ``actor/<estimator>/loss_scale_mean``.
#
# GEC: each response token's origin (``GEC_ORIGIN_COLUMN``) and, batch-level, how the loss treats injected
# tokens (``GEC_LOSS_OPTIONS_KEY``: ``edge_gec.injected_loss`` surrogate | masked | sft, ``sft_coef``, and
# ``injected_share``, which turns the mini-batch's token count into its injected-token count for the SFT term's
# token mean). The surrogate receives the advantages and log-probs of ``gec.treat_injected``, the SFT term is added
# to verl's loss, and the per-origin sums (``gec.origin_sums``) go into ``actor/gec/<origin>/...``, turned into
# shares and means once verl has reduced them (``gec.finish_origin_metrics``).

# The modules that bind ``ppo_loss`` by name at import (``from verl.workers.utils.losses import ppo_loss``),
# when imported before ``losses`` finished (each has its entry in ``internals.CORE``).
_PPO_LOSS_IMPORTERS = ("verl.workers.engine_workers", "verl.trainer.distillation.losses")


@dataclass
class _LossScale:
    """An estimator's factor for the policy loss of one micro-batch (its ``estimators.LossScale``), and the
    tensors its diagnostics need; ``scope``: the estimator's name, its metrics' scope."""

    scope: str
    scale: torch.Tensor  # (B, T) s_i on each row's tokens
    entropy: torch.Tensor  # (B, T) the current entropy the scale was computed from (with gradient)
    active: torch.Tensor  # (B,) rows whose advantage follows the entropy
    metrics: dict[str, float]


@dataclass
class _GecTokens:
    """GEC's per-token origins in one micro-batch and how the loss treats the injected ones."""

    origins: torch.Tensor  # (B, T) int64 codes of gec.ORIGINS
    injected_loss: str
    sft_coef: float
    injected_share: float  # the step's injected tokens / its response tokens
    sums: dict[str, float] = field(default_factory=dict)  # gec_math.origin_sums (+ the SFT term's NLL sum)
    sft_term: Optional[torch.Tensor] = None  # added to verl's loss after the surrogate


@dataclass
class _MicroBatch:
    """What the hook set up for one micro-batch: an estimator's loss scale (EDA's gradient form), GEC's tokens, or both."""

    scaled: Optional[_LossScale] = None
    gec: Optional[_GecTokens] = None


_CURRENT: ContextVar[Optional[_MicroBatch]] = ContextVar("edge_verl_actor_loss", default=None)


def _scaling_estimator(keys: Any) -> Optional[Estimator]:
    """The estimator whose ``LossScale`` columns the micro-batch carries (at most one runs per step)."""
    return next((entry for entry in ESTIMATORS.values() if entry.loss is not None and entry.loss.columns[0] in keys), None)


def is_active(data: Any) -> bool:
    """The micro-batch asks the hook for something: an estimator's loss scale or GEC's token treatment."""
    keys = data.keys()
    return _scaling_estimator(keys) is not None or GEC_ORIGIN_COLUMN in keys


def _options(data: Any, key: str, column: str, writer: str) -> dict:
    from verl.utils import tensordict_utils as tu

    options = tu.get_non_tensor_data(data=data, key=key, default=None)
    if options is None:
        raise RuntimeError(
            f"The batch carries {column} but not {key}: {writer} writes both; was the batch built by another "
            "version of edge_verl?"
        )
    return dict(options)


def _loss_scale(entry: Estimator, model_output: Any, data: Any, gec: Optional["_GecTokens"]) -> _LossScale:
    """The estimator's factor from the current entropy (``entry.loss.factor``); with GEC's masked / sft
    control, the injected tokens' entropy enters it as a constant (its value kept, its gradient stopped), so
    that no gradient reaches them through the entropy path either."""
    from verl.workers.utils.padding import no_padding_2_padding

    loss = entry.loss
    entropy = model_output.get("entropy", None)
    if entropy is None:
        raise RuntimeError(
            f"The {entry.name} estimator's loss scale needs the current policy's entropy in the actor loss: "
            "set actor_rollout_ref.actor.calculate_entropy=True."
        )
    entropy = no_padding_2_padding(entropy, data)
    columns = data.select("response_mask", *loss.columns).to_padded_tensor()
    if gec is not None and gec.injected_loss != "surrogate":
        injected = gec_math.not_sampled(gec.origins.to(entropy.device))
        entropy = torch.where(injected, entropy.detach(), entropy)
    options = _options(data, loss.options_key, loss.columns[0], f"the {entry.name} estimator")
    factor, active = loss.factor(dict(columns.items()), options, entropy)
    mask = columns["response_mask"].to(factor.dtype)
    return _LossScale(entry.name, factor[:, None] * mask, entropy, active, {})


def _gec_tokens(data: Any) -> _GecTokens:
    columns = data.select(GEC_ORIGIN_COLUMN).to_padded_tensor()
    options = _options(data, GEC_LOSS_OPTIONS_KEY, GEC_ORIGIN_COLUMN, "the plugin's GEC advantage step")
    return _GecTokens(
        origins=columns[GEC_ORIGIN_COLUMN].round().to(torch.int64),
        injected_loss=str(options["injected_loss"]),
        sft_coef=float(options["sft_coef"]),
        injected_share=float(options["injected_share"]),
    )


def _make_ppo_loss(original: Callable) -> Callable:
    def ppo_loss(config, model_output, data, dp_group=None):
        if not is_active(data):
            return original(config, model_output, data, dp_group)
        from verl.utils.metric import AggregationType, Metric

        keys = data.keys()
        gec = _gec_tokens(data) if GEC_ORIGIN_COLUMN in keys else None
        scaling = _scaling_estimator(keys)
        scaled = _loss_scale(scaling, model_output, data, gec) if scaling is not None else None
        state = _MicroBatch(scaled=scaled, gec=gec)
        token = _CURRENT.set(state)
        try:
            loss, metrics = original(config, model_output, data, dp_group)
        finally:
            _CURRENT.reset(token)
        if state.scaled is not None:
            for key, value in state.scaled.metrics.items():
                metrics[f"{state.scaled.scope}/{key}"] = Metric(value=value, aggregation=AggregationType.MEAN)
        if state.gec is not None:
            if state.gec.sft_term is not None:
                loss = loss + state.gec.sft_term
            for key, value in state.gec.sums.items():  # verl's trainer prefixes them with ACTOR_METRIC_PREFIX
                aggregation = AggregationType.MAX if key.endswith(gec_math.RAW_MAX) else AggregationType.MEAN
                metrics[f"{GEC_LOSS_SCOPE}/{key}"] = Metric(value=value, aggregation=aggregation)
        return loss, metrics

    return ppo_loss


@dataclass(frozen=True)
class VanillaClip:
    """verl's vanilla PPO clipping (``compute_policy_loss_vanilla``): the ratio range [1 - low, 1 + high]
    and, for negative advantages, the dual clip's bound ``ratio_c`` (verl's ``clip_ratio_c``)."""

    low: float
    high: float
    ratio_c: float


def _vanilla_clip(config: Any) -> VanillaClip:
    """verl's vanilla PPO clipping from the actor config (``compute_policy_loss_vanilla``): clip_ratio_low /
    _high, else clip_ratio; the dual clip's clip_ratio_c."""
    clip = config.clip_ratio
    low, high = getattr(config, "clip_ratio_low", None), getattr(config, "clip_ratio_high", None)
    return VanillaClip(float(clip if low is None else low), float(clip if high is None else high), float(config.clip_ratio_c))


def vanilla_clipped(ratio: torch.Tensor, advantages: torch.Tensor, clip: VanillaClip) -> torch.Tensor:
    """(B, T) bool: the tokens whose gradient verl's vanilla PPO loss clips away, by verl's own comparisons:
    the clipped term wins (its ``pg_clipfrac``: A > 0 and ratio > 1 + high, or A < 0 and ratio < 1 - low) or,
    for A < 0, the dual clip's bound -A * ratio_c caps the loss (its ``pg_clipfrac_lower``: ratio > ratio_c).
    The two sets are disjoint, so a batch's fraction is the sum of verl's two fractions."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip.low, 1 + clip.high)
    surrogate = torch.maximum(unclipped, clipped)
    return (clipped > unclipped) | ((advantages < 0) & (surrogate > -advantages * clip.ratio_c))


def origin_sums(
    origins: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip: Optional[VanillaClip],
    grad: Optional[torch.Tensor] = None,
) -> dict[str, float]:
    """GEC's per-origin sums of one micro-batch (``gec.origin_sums``) with verl's ratio (the log-ratio clamped to
    ``LOG_RATIO_CLAMP`` before exp, as verl's loss) and, with verl's vanilla clipping (``clip``; None for any other
    loss mode), the tokens it clips."""
    with torch.no_grad():
        log_ratio = (log_prob.detach().float() - old_log_prob.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = log_ratio.exp()
        clipped = vanilla_clipped(ratio, advantages.detach().float(), clip) if clip is not None else None
    return gec_math.origin_sums(origins, response_mask, old_log_prob, ratio, clipped, grad)


def _sft_term(tokens: _GecTokens, log_prob: torch.Tensor, injected: torch.Tensor, config: Any) -> torch.Tensor:
    """sft_coef x the token-mean NLL of the injected tokens, normalised like verl's token-mean loss: the
    mini-batch's (global) token count times the step's injected share (exact with one mini-batch)."""
    info = getattr(config, "global_batch_info", {}) or {}
    batch_tokens = info.get("batch_num_tokens")
    num_tokens = None if batch_tokens is None else float(batch_tokens) * tokens.injected_share
    nll = gec_math.injected_nll(log_prob, injected, num_tokens, int(info.get("dp_size", 1) or 1))
    return tokens.sft_coef * nll


def _make_policy_loss(policy_loss_fn: Callable, state: _MicroBatch, loss_mode: str) -> Callable:
    @functools.wraps(policy_loss_fn)
    def policy_loss(*args, **kwargs):
        if args or any(keyword not in kwargs for keyword in POLICY_LOSS_KEYWORDS):
            raise RuntimeError(
                f"edge_verl's loss hook expects verl's ppo_loss to call the policy loss with the keywords {POLICY_LOSS_KEYWORDS}"
            )
        advantages, log_prob = kwargs["advantages"], kwargs["log_prob"]
        scaled, gec = state.scaled, state.gec
        if scaled is not None:
            if advantages.shape != scaled.scale.shape:
                raise RuntimeError(f"advantages {tuple(advantages.shape)} and the {scaled.scope} loss scale {tuple(scaled.scale.shape)} differ")
            advantages = advantages * scaled.scale.to(advantages.dtype)
        injected = None
        if gec is not None:
            if gec.origins.shape != advantages.shape:
                raise RuntimeError(f"advantages {tuple(advantages.shape)} and GEC's origins {tuple(gec.origins.shape)} differ")
            injected = gec_math.not_sampled(gec.origins) & kwargs["response_mask"].to(torch.bool)
            kwargs["log_prob"], advantages = gec_math.treat_injected(log_prob, advantages, injected, gec.injected_loss)
        kwargs["advantages"] = advantages
        loss, metrics = policy_loss_fn(**kwargs)
        grads = loss_gradients(loss, log_prob, scaled.entropy if scaled is not None else None)
        if scaled is not None:
            if grads is not None:
                scaled.metrics[GRADIENT_SHARE_METRIC] = entropy_gradient_share(*grads)
            active = scaled.active
            scaled.metrics[LOSS_SCALE_METRIC] = float(scaled.scale.detach().amax(dim=-1)[active].mean()) if bool(active.any()) else 1.0
        if gec is not None:
            clip = _vanilla_clip(kwargs["config"]) if loss_mode == VANILLA_POLICY_LOSS else None
            grad = None if grads is None else grads[0] if grads[0] is not None else torch.zeros_like(log_prob)
            gec.sums = origin_sums(gec.origins, kwargs["response_mask"], kwargs["old_log_prob"], log_prob, advantages, clip, grad)
            if gec.injected_loss == "sft":
                gec.sft_term = _sft_term(gec, log_prob, injected, kwargs["config"])
                gec.sums[gec_math.NLL_SUM] = float(-(log_prob.detach() * injected).sum())
        return loss, metrics

    return policy_loss


def _make_get_policy_loss_fn(original: Callable) -> Callable:
    def get_policy_loss_fn(name, *args, **kwargs):
        # verl's own function, except inside a micro-batch the hook set up (EDA's scale, GEC's tokens);
        # ``name`` is the loss mode verl runs (``policy_loss.loss_mode``)
        policy_loss_fn = original(name, *args, **kwargs)
        state = _CURRENT.get()
        return policy_loss_fn if state is None else _make_policy_loss(policy_loss_fn, state, str(name))

    return get_policy_loss_fn


def patch_losses(module: Any) -> None:
    """Wrap ``ppo_loss`` and the policy-loss lookup it uses; rebind importers that already hold the original."""
    original = getattr(module.ppo_loss, "__wrapped__", module.ppo_loss)
    CORE.wrap(module, "ppo_loss", _make_ppo_loss)
    CORE.wrap(module, "get_policy_loss_fn", _make_get_policy_loss_fn)
    for name in _PPO_LOSS_IMPORTERS:
        importer = sys.modules.get(name)
        if importer is not None and getattr(importer, "ppo_loss", None) is original:
            CORE.wrap(importer, "ppo_loss", _make_ppo_loss)
