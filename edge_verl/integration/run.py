"""What the plugin knows about one training run, and about the advantage step in progress.

Two scopes, both explicit objects (no module-level mutable state):

- ``TrainingRun``: one per verl trainer, created when the trainer loads its checkpoint (before the first
  rollout), attached to the trainer object. It holds the run's options parsed and validated ONCE (which
  estimator, its config dataclass, whether GEC is on), GEPO's EMA thresholds (training state, saved with
  every checkpoint by the trainer hooks), and the legacy trainer's estimator metrics waiting for verl's
  metric collection. ``with active_run(run):`` (the trainers' ``fit`` wrappers) makes it the current run.
- ``AdvantageStep``: one per advantage computation. The trainer wrapper that sees the inputs verl does
  not pass to estimators (the old policy's per-token entropy, old log-probs) opens ``with
  advantage_step(entropy=...) as step:`` around verl's own code; the estimator, called by verl, reads
  ``current_step()`` and writes its metrics into ``step.metrics``; the wrapper hands them to verl's step
  metrics after the block. Nested blocks (v1: the trainer method, then verl's ``compute_advantage``) join
  the outer step. Every path, exceptions included, restores the previous context.

Both "current" slots are ``contextvars.ContextVar``s: scoped, reset by the ``with`` blocks, and private
to the thread (a second trainer in another thread never sees this one's step).
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional

import torch
from omegaconf import OmegaConf

from edge_verl.algorithms.gepo import GepoThresholds
from edge_verl.config import EdaConfig, GecConfig, GepoConfig, MetricsConfig
from edge_verl.integration import names


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


def estimator_options(algorithm_config: Any, estimator: str) -> EdaConfig | GepoConfig:
    """The validated options of one of the plugin's estimators from ``algorithm.<estimator>``."""
    if bypass_mode_enabled(algorithm_config):
        raise ValueError(
            f"algorithm.adv_estimator={estimator} needs the old-policy forward pass (per-token entropy / "
            "old_log_probs), which algorithm.rollout_correction.bypass_mode=True skips; set it to False."
        )
    options_class = EdaConfig if estimator == names.EDA_ESTIMATOR else GepoConfig
    return options_class.from_mapping(config_section(algorithm_config, estimator))


def gec_options(algorithm_config: Any) -> GecConfig:
    """The validated ``algorithm.edge_gec`` options (``enable`` is GEC's one switch)."""
    return GecConfig.from_mapping(config_section(algorithm_config, names.GEC_SECTION))


@dataclass
class TrainingRun:
    """The plugin's view of one verl training run (see module docstring).

    estimator: ``algorithm.adv_estimator``; options: its validated config when it is one of ours;
    gec: the validated GEC options (``gec.enable`` says whether GEC is on); metrics: the extra metrics asked
    for (``algorithm.edge_metrics``); thresholds: GEPO's state.
    """

    estimator: str
    options: Optional[EdaConfig | GepoConfig]
    gec: GecConfig
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    thresholds: Optional[GepoThresholds] = None
    grader_metrics: bool = False  # the run's reward is edge_verl's: log edge_verl/grader/* (set from verl's config)
    norm_adv_by_std: bool = True  # verl's algorithm.norm_adv_by_std_in_grpo
    pending_metrics: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_config(cls, algorithm_config: Any) -> "TrainingRun":
        """Parse and validate ``config.algorithm`` once; errors name the key and the allowed values."""
        estimator = str(algorithm_config.get("adv_estimator", "") if hasattr(algorithm_config, "get") else "")
        options = estimator_options(algorithm_config, estimator) if estimator in names.ESTIMATORS else None
        thresholds = GepoThresholds(gamma=options.gamma, init=options.ema_init) if isinstance(options, GepoConfig) else None
        metrics = MetricsConfig.from_mapping(config_section(algorithm_config, names.METRICS_SECTION))
        return cls(
            estimator=estimator,
            options=options,
            gec=gec_options(algorithm_config),
            metrics=metrics,
            thresholds=thresholds,
            norm_adv_by_std=norm_adv_by_std(algorithm_config),
        )

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
    def opens_advantage_step(self) -> bool:
        """The advantage step has work for the plugin: its estimator, or statistics of verl's."""
        return self.uses_plugin_estimator or self.advantage_stats

    @property
    def needs_entropy(self) -> bool:
        """The estimator reads the old policy's per-token entropy (EDA; GEPO with token_entropy)."""
        if self.options is None:
            return False
        return self.estimator == names.EDA_ESTIMATOR or self.options.group_entropy == "token_entropy"

    @property
    def entropy_gradient(self) -> bool:
        """EDA in the reference's form: the actor loss rescales the advantage with the current entropy."""
        return isinstance(self.options, EdaConfig) and self.options.entropy_gradient

    @property
    def is_ours(self) -> bool:
        """True when any of the plugin's hooks has work to do in this run."""
        return self.opens_advantage_step or self.gec_enabled

    def state_dict(self) -> dict:
        return {"gepo_thresholds": self.thresholds.state_dict() if self.thresholds is not None else None}


@dataclass
class AdvantageStep:
    """Inputs handed to the estimator for one advantage computation, and the metrics it reports.

    inputs: per-token tensors (B, T) under the plugin's names: "entropy" (old policy's token entropy),
    "old_log_probs". metrics: the estimator's metrics, already prefixed for verl's logger.
    loss_columns: per-token tensors (B, T) the estimator wants next to ``advantages`` in the actor's
    batch (EDA's gradient form, ``names.EDA_*_COLUMN``), 0 off the response tokens; loss_options: batch-level values for the actor loss (``names.EDA_OPTIONS_KEY``). The trainer hooks
    write both where the actor update reads its batch (legacy: the DataProto; v1: the TransferQueue).
    """

    run: Optional[TrainingRun]
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    loss_columns: dict[str, torch.Tensor] = field(default_factory=dict)
    loss_options: dict[str, Any] = field(default_factory=dict)
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
    """Make ``run`` the current training run for the block (the trainers' ``fit``)."""
    token = _CURRENT_RUN.set(run)
    try:
        yield run
    finally:
        _CURRENT_RUN.reset(token)


@contextlib.contextmanager
def advantage_step(**inputs: Optional[torch.Tensor]) -> Iterator[AdvantageStep]:
    """One advantage computation: hand ``inputs`` (None values are skipped) to the estimator inside.

    Inside an open step (nested wrappers), the inputs are added to it and the same step is yielded.
    """
    given = {key: value for key, value in inputs.items() if value is not None}
    outer = _CURRENT_STEP.get()
    if outer is not None:
        for key, value in given.items():
            outer.inputs.setdefault(key, value)
        yield outer
        return
    step = AdvantageStep(run=_CURRENT_RUN.get(), inputs=given)
    token = _CURRENT_STEP.set(step)
    try:
        yield step
    finally:
        _CURRENT_STEP.reset(token)


def prefixed(metrics: Mapping[str, float], *scope: str) -> dict[str, float]:
    """``{"x": 1}`` -> ``{"edge_verl/<scope>/x": 1}`` (verl's logger groups by the prefix)."""
    prefix = "/".join((names.METRIC_PREFIX, *scope))
    return {f"{prefix}/{key}": value for key, value in metrics.items()}
