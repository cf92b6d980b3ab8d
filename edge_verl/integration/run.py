"""What the plugin knows about one training run, and about the advantage step in progress.

Two scopes, both explicit objects:

- ``TrainingRun``: one per verl trainer that uses the plugin (``plugin_in_use``), created when the
  trainer loads its checkpoint (before the first rollout) and attached to the trainer object. It holds
  the run's options parsed and validated ONCE (which estimator, its config dataclass, whether GEC is on)
  and GEPO's EMA thresholds (training state, saved with every checkpoint by the trainer adapters). A
  plain verl run gets none, and every adapter passes it straight through.
- ``AdvantageStep``: one per advantage computation, opened by the trainer's adapter with ``with
  advantage_step(run, entropy=...) as step:`` around verl's own code. The estimator, called by verl,
  reads its inputs from ``current_step()`` and writes its metrics and loss columns into the step; the
  adapter returns them to verl after the block. Steps do not nest (a second one is an error), and every
  path, exceptions included, closes the step.

``active_run`` makes a run current for the legacy trainer's ``fit`` (its advantage function and agent-loop
manager have no reference to the trainer). Both "current" slots are ``contextvars.ContextVar``s: scoped,
reset by the ``with`` blocks, and private to the thread. They, and the other values that travel by a
channel verl's signatures do not show, are listed with their reasons in ARCHITECTURE.md ("How values
travel").
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional

import torch
from omegaconf import OmegaConf

from edge_verl import names
from edge_verl.config import GecConfig, MetricsConfig
from edge_verl.features import ESTIMATORS, GEC, VERL_GRPO_EPSILON, Estimator


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
    """The validated options of one of the plugin's estimators (``features.ESTIMATORS``) from
    ``algorithm.<estimator>``."""
    if bypass_mode_enabled(algorithm_config):
        raise ValueError(
            f"algorithm.adv_estimator={estimator} needs the old-policy forward pass (per-token entropy / "
            "old_log_probs), which algorithm.rollout_correction.bypass_mode=True skips; set it to False."
        )
    return ESTIMATORS[estimator].options(config_section(algorithm_config, estimator))


def plugin_in_use(algorithm_config: Any) -> bool:
    """The run asks for something of the plugin: one of its estimators, or options under
    ``algorithm.edge_gec`` / ``algorithm.edge_metrics`` (which are then validated, even when they switch
    nothing on). Plain look-ups, nothing parsed: a plain verl run pays nothing."""
    if not hasattr(algorithm_config, "get"):
        return False
    if str(algorithm_config.get("adv_estimator", "")) in ESTIMATORS:
        return True
    sections = (algorithm_config.get(names.GEC_SECTION, None), algorithm_config.get(names.METRICS_SECTION, None))
    return any(section is not None and len(section) > 0 for section in sections)


def gec_options(algorithm_config: Any) -> GecConfig:
    """The validated ``algorithm.edge_gec`` options (``enable`` is GEC's one switch)."""
    return GEC.options(config_section(algorithm_config, GEC.section))


@dataclass
class TrainingRun:
    """The plugin's view of one verl training run (see module docstring).

    estimator: ``algorithm.adv_estimator``; entry: its ``features.Estimator`` when it is one of ours, and
    options its validated config; gec: the validated GEC options (``gec.enable`` says whether GEC is on);
    metrics: the extra metrics asked for (``algorithm.edge_metrics``); state: the estimator's training state
    (GEPO's thresholds; saved with every checkpoint under ``entry.state_key``); grader_metrics: the run
    grades with edge_verl's reward (log ``edge_verl/grader/*``).
    """

    estimator: str
    options: Any
    gec: GecConfig
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
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
            metrics=MetricsConfig.from_mapping(config_section(algorithm_config, names.METRICS_SECTION)),
            state=entry.state(options) if entry is not None and entry.state is not None else None,
            norm_adv_by_std=norm_adv_by_std(algorithm_config),
        )

    @property
    def entry(self) -> Optional[Estimator]:
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
        """The per-token inputs the estimator reads with its options (``features.TOKEN_INPUTS``)."""
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
        wanted = [self.entry.loss_metric(self.options) if self.entry is not None else None, GEC.loss_metric(self.gec)]
        return tuple(key for key in wanted if key is not None)

    def state_dict(self) -> dict:
        """The estimator's state under its ``state_key`` ({} without state)."""
        return {self.entry.state_key: self.state.state_dict()} if self.state is not None else {}


@dataclass
class AdvantageStep:
    """Inputs handed to the estimator for one advantage computation, and what it hands back.

    inputs: per-token tensors (B, T) under the plugin's names: "entropy" (old policy's token entropy),
    "old_log_probs". metrics: the step's metrics, already prefixed for verl's logger. loss_columns:
    per-token tensors (B, T) the estimator wants next to ``advantages`` in the actor's batch (EDA's
    gradient form, ``names.EDA_*_COLUMN``), 0 off the response tokens; loss_options: batch-level values
    for the actor loss (``names.EDA_OPTIONS_KEY``). The trainer adapters return all three to verl.
    sources: the responses' ``data_source`` (B,), when the run logs per-source statistics and the adapter's
    batch carries them; per_response: per-response (B,) values an estimator hands to those statistics
    (GEPO: ``group_stats.per_source_statistics``'s ``gepo`` fields).
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
        from edge_verl.algorithms.group_stats import group_index_from_uids

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
    prefix = "/".join((names.METRIC_PREFIX, *scope))
    return {f"{prefix}/{key}": value for key, value in metrics.items()}
