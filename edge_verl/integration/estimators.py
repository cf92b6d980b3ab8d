"""verl adapter for the ``edge_eda`` and ``gepo`` advantage estimators.

verl 0.9.1 calls a registered estimator with token_level_rewards, response_mask, index (uid) and config
(= ``config.algorithm``) only. EDA also needs the old policy's per-token entropy and GEPO the old
log-probs: they come from the open ``AdvantageStep`` (``edge_verl.integration.run``, filled by the
trainer hooks) or from ``batch=`` (the signature of upstream PR #7473, verl's own key names). Each
estimator unpacks, calls one pure function from ``edge_verl.algorithms``, reports its metrics to the
step (``edge_verl.algorithms.step_metrics``), and packs. Options come parsed once from the current ``TrainingRun``. Missing inputs raise; there
is no silent fallback to GRPO.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional

import torch

from edge_verl.algorithms.eda import compute_eda_advantages
from edge_verl.algorithms.gepo import GepoThresholds, compute_gepo_advantages
from edge_verl.algorithms.group_stats import group_index_from_uids
from edge_verl.algorithms.step_metrics import eda_step_metrics, gepo_step_metrics
from edge_verl.config import EdaConfig, GepoConfig
from edge_verl.integration import names
from edge_verl.integration.run import AdvantageStep, TrainingRun, current_run, current_step, estimator_options, norm_adv_by_std, prefixed

_WHAT = {
    "entropy": "the old policy's per-token entropy",
    "old_log_probs": "the old policy's log-probs (old_log_probs)",
}
_HINT = (
    "Run verl through the edge_verl plugin (edge-verl doctor), inside one of verl's trainers, and keep "
    "algorithm.rollout_correction.bypass_mode=False."
)


def _token_input(name: str, step: Optional[AdvantageStep], batch: Optional[Mapping], estimator: str, shape) -> torch.Tensor:
    """Input ``name`` (B, T) from ``batch`` (verl's names) or the open step; errors say what to change."""
    tensor = None
    if batch is not None:
        tensor = next((batch[key] for key, ours in names.BATCH_KEYS.items() if ours == name and key in batch.keys()), None)
    if tensor is None and step is not None:
        tensor = step.inputs.get(name)
    if tensor is None:
        raise KeyError(f"algorithm.adv_estimator={estimator} needs {_WHAT[name]}, which this batch does not carry. {_HINT}")
    if tensor.shape != shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}, response_mask {tuple(shape)}")
    return tensor


def _context(
    estimator: str, config: Any
) -> tuple[Optional[AdvantageStep], Optional[TrainingRun], EdaConfig | GepoConfig, bool]:
    """The open step, the current run, its options for ``estimator`` and ``norm_adv_by_std_in_grpo``, all
    parsed once per run; outside a run, parsed from ``config``."""
    step = current_step()
    run = step.run if step is not None else current_run()
    if run is not None and run.estimator == estimator:
        return step, run, run.options, run.norm_adv_by_std
    return step, None, estimator_options(config, estimator), norm_adv_by_std(config)


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


def _report(step: Optional[AdvantageStep], estimator: str, metrics: Mapping[str, float]) -> None:
    if step is not None:
        step.metrics.update(prefixed(metrics, estimator))


def compute_edge_eda_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    batch: Optional[Mapping] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator ``edge_eda``: EDGE-GRPO's Entropy-Driven Advantage (see edge_verl.algorithms.eda)."""
    estimator = names.EDA_ESTIMATOR
    step, _, options, norm_by_std = _context(estimator, config)
    token_entropy = _token_input("entropy", step, batch, estimator, response_mask.shape)
    data = _Batch(estimator, token_level_rewards, index, step)
    result = compute_eda_advantages(
        data.scores,
        token_entropy.to(token_level_rewards.device),
        response_mask,
        data.group_index,
        data.num_groups,
        data.valid,
        norm_by_std=norm_by_std,
        std_epsilon=options.std_epsilon,
        entropy_epsilon=options.entropy_epsilon,
        ratio_clamp=options.ratio_clamp,
    )
    if step is not None:
        _report(step, estimator, eda_step_metrics(result, data.valid))
        if options.entropy_gradient:
            _hand_to_loss(step, result, response_mask, options)
    advantages = result.advantages.to(token_level_rewards.dtype)
    return advantages, advantages


def _hand_to_loss(step: AdvantageStep, result: Any, response_mask: torch.Tensor, options: EdaConfig) -> None:
    """EDA's gradient form: what the actor loss needs to rescale this batch's advantages
    (``edge_verl.integration.actor_loss``), laid on each row's response tokens."""
    mask = response_mask.to(torch.float32)
    step.loss_columns = {
        names.EDA_GROUP_ENTROPY_COLUMN: result.group_entropy[:, None] * mask,
        names.EDA_RATIO_COLUMN: result.entropy_ratio[:, None] * mask,
    }
    step.loss_options = {
        names.EDA_OPTIONS_KEY: {
            "entropy_epsilon": options.entropy_epsilon,
            "ratio_clamp": list(options.ratio_clamp) if options.ratio_clamp is not None else None,
        }
    }


def _gepo_thresholds(run: Optional[TrainingRun]) -> GepoThresholds:
    if run is None or run.thresholds is None:
        raise RuntimeError(
            "algorithm.adv_estimator=gepo keeps EMA thresholds across steps (training state), which belong to a "
            "training run: verl's trainers provide one through the edge_verl plugin; elsewhere call the "
            "estimator inside `with edge_verl.integration.run.active_run(TrainingRun.from_config(config.algorithm))`."
        )
    return run.thresholds


def compute_gepo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    batch: Optional[Mapping] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator ``gepo``: GEPO's entropy-conditioned asymmetric scaling (see edge_verl.algorithms.gepo)."""
    estimator = names.GEPO_ESTIMATOR
    step, run, options, norm_by_std = _context(estimator, config)
    thresholds = _gepo_thresholds(run)
    source_name = "entropy" if options.group_entropy == "token_entropy" else "old_log_probs"
    source = _token_input(source_name, step, batch, estimator, response_mask.shape)
    data = _Batch(estimator, token_level_rewards, index, step)
    # verl computes advantages for training batches only, so every call here updates the EMA once;
    # validation never reaches an estimator (tested end-to-end: num_updates == training steps).
    result = compute_gepo_advantages(
        data.scores,
        source.to(token_level_rewards.device),
        response_mask,
        data.group_index,
        data.num_groups,
        data.valid,
        thresholds,
        norm_by_std=norm_by_std,
        std_epsilon=options.std_epsilon,
        alpha_low=options.alpha_low,
        alpha_high=options.alpha_high,
        beta_low=options.beta_low,
        beta_high=options.beta_high,
        estimator=options.group_entropy,
        order=options.ema_order,
    )
    if step is not None:
        _report(step, estimator, gepo_step_metrics(result, data.valid, thresholds.num_updates))
        if run is not None and run.per_source:
            step.per_response.update(
                group_entropy=result.group_entropy.index_select(0, data.group_index), outcome=result.outcome_advantages,
                positive_attenuated=result.positive_attenuated, negative_attenuated=result.negative_attenuated,
            )
    advantages = result.advantages.to(token_level_rewards.dtype)
    return advantages, advantages


def register_estimators(core_algos_module: Any) -> None:
    """Register both estimators in verl's registry (idempotent).

    Decided by feature, not by version: a verl that ships its own estimator under one of these names (the
    upstream series in upstream/verl/) keeps it, and importing verl must not fail over the name; the
    plugin's one is then not registered, and a warning says so.
    """
    for name, function in ((names.EDA_ESTIMATOR, compute_edge_eda_advantage), (names.GEPO_ESTIMATOR, compute_gepo_advantage)):
        present = core_algos_module.ADV_ESTIMATOR_REGISTRY.get(name)  # in VERL_INTERNALS
        if present is not None and present is not function:
            warnings.warn(
                f"verl already registers the advantage estimator {name!r} ({getattr(present, '__module__', present)}); "
                "edge_verl's is not registered and verl's own is used.",
                stacklevel=2,
            )
            continue
        core_algos_module.register_adv_est(name)(function)
