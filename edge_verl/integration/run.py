"""One verl training run as the plugin sees it, in the trainer's process (verl's TaskRunner): its options parsed
once (``TrainingRun``), its advantage steps (``AdvantageStep``) and the scopes of the metrics it logs. No verl import:
the preflight builds a run before Ray, in processes that never import verl.

- **``TrainingRun``**: one per verl trainer that uses the plugin (``plugin_in_use``), created when the trainer
  loads its checkpoint (before the first rollout, ``trainer_run.start_run``) and attached to the trainer object. It
  holds the run's options parsed and validated ONCE (which estimator, its registry entry and options, whether GEC is
  on, the extra metrics, the seeding) and the estimator's training state (GEPO's EMA thresholds; saved with every
  checkpoint, ``checkpoint.py``). What one option section cannot check is ``run_checks.py``'s. A plain verl run gets
  no run, and every adapter passes it straight through.
- **``AdvantageStep``**: one per advantage computation, opened by the trainer's adapter with ``with
  advantage_step(run, entropy=...) as step:`` around verl's own code. Steps do not nest (a second one is an
  error), and every path, exceptions included, closes the step. ``active_run`` makes a run current for the legacy
  trainer's ``fit`` (its advantage function and agent-loop manager have no reference to the trainer). Both
  "current" slots are ``contextvars.ContextVar``s: scoped, reset by the ``with`` blocks, private to the thread.

The values that travel by a channel verl's signatures do not show are listed with their reasons in
ARCHITECTURE.md ("How values travel").
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional

import torch
from omegaconf import OmegaConf

from edge_verl.algorithms.gec import GecConfig
from edge_verl.config import MetricsConfig, SeedingConfig
from edge_verl.estimators.base import ESTIMATORS, VERL_GRPO_EPSILON, Estimator
from edge_verl.estimators.groups import group_index_from_uids
from edge_verl.integration.internals import ACTOR_METRIC_PREFIX

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
    (its ``Estimator.source_statistics`` reads them; GEPO's group entropy and attenuation masks).
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
