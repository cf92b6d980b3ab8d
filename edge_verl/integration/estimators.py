"""verl adapter for the ``edge_eda`` and ``gepo`` advantage estimators.

verl 0.9.1 calls a registered estimator with token_level_rewards, response_mask, index (uid) and config
(= ``config.algorithm``) only. EDA also needs the old policy's per-token entropy and GEPO the old
log-probs: they come from the open ``AdvantageStep`` (``edge_verl.integration.run``, filled by the
trainer hooks) or from ``batch=`` (the signature of upstream PR #7473, verl's own key names). Each
estimator unpacks, calls one pure function from ``edge_verl.algorithms``, reports its metrics to the
step, and packs. Options come parsed once from the current ``TrainingRun``. Missing inputs raise; there
is no silent fallback to GRPO.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch

from edge_verl.algorithms.eda import compute_eda_advantages
from edge_verl.algorithms.gepo import GepoThresholds, compute_gepo_advantages
from edge_verl.algorithms.group_stats import group_index_from_uids, zero_variance_group_fraction
from edge_verl.config import EdaConfig, GepoConfig
from edge_verl.integration import names
from edge_verl.integration.run import AdvantageStep, TrainingRun, current_run, current_step, estimator_options, prefixed

# verl's names for the per-token inputs in a batch -> the plugin's names. verl calls the old policy's
# entropy "entropys" in the legacy trainer and "entropy" in the v1 trainer.
BATCH_KEYS = {"entropys": "entropy", "entropy": "entropy", "old_log_probs": "old_log_probs"}

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
        tensor = next((batch[key] for key, ours in BATCH_KEYS.items() if ours == name and key in batch.keys()), None)
    if tensor is None and step is not None:
        tensor = step.inputs.get(name)
    if tensor is None:
        raise KeyError(f"algorithm.adv_estimator={estimator} needs {_WHAT[name]}, which this batch does not carry. {_HINT}")
    if tensor.shape != shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}, response_mask {tuple(shape)}")
    return tensor


def _context(
    estimator: str, config: Any
) -> tuple[Optional[AdvantageStep], Optional[TrainingRun], EdaConfig | GepoConfig]:
    """The open step, the current run and its options for ``estimator``; outside a run, the options
    parsed from ``config``."""
    step = current_step()
    run = step.run if step is not None else current_run()
    if run is not None and run.estimator == estimator:
        return step, run, run.options
    return step, None, estimator_options(config, estimator)


def _norm_by_std(config: Any) -> bool:
    return bool(config.get("norm_adv_by_std_in_grpo", True)) if hasattr(config, "get") else True


class _Batch:
    """The common unpacking: uid groups and outcome scores on the rewards' device."""

    def __init__(self, estimator: str, token_level_rewards: torch.Tensor, index: Any):
        if index is None:
            raise KeyError(f"algorithm.adv_estimator={estimator} needs uid groups (index); verl passes them when the batch has 'uid'.")
        group_index, self.num_groups, is_pad = group_index_from_uids(index)
        device = token_level_rewards.device
        self.group_index = group_index.to(device)
        self.valid = ~is_pad.to(device)
        self.scores = token_level_rewards.sum(dim=-1).to(torch.float32)

    def common_metrics(self, before: torch.Tensor, after: torch.Tensor) -> dict[str, float]:
        rows_before, rows_after = before[self.valid], after[self.valid]
        return {
            "zero_variance_group_frac": zero_variance_group_fraction(self.scores, self.group_index, self.num_groups, self.valid),
            # unbiased (ddof = 1), as the EDGE-GRPO reference logs it and as edge_verl/adv/var
            "adv_var_before": float(rows_before.var()) if rows_before.numel() >= 2 else 0.0,
            "adv_var_after": float(rows_after.var()) if rows_after.numel() >= 2 else 0.0,
        }


def _report(step: Optional[AdvantageStep], estimator: str, metrics: dict[str, float]) -> None:
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
    step, _, options = _context(estimator, config)
    token_entropy = _token_input("entropy", step, batch, estimator, response_mask.shape)
    data = _Batch(estimator, token_level_rewards, index)
    result = compute_eda_advantages(
        data.scores,
        token_entropy.to(token_level_rewards.device),
        response_mask,
        data.group_index,
        data.num_groups,
        data.valid,
        norm_by_std=_norm_by_std(config),
        std_epsilon=options.std_epsilon,
        entropy_epsilon=options.entropy_epsilon,
        ratio_clamp=options.ratio_clamp,
    )
    if step is not None:
        real = result.has_tokens
        ratios = result.entropy_ratio[real]
        metrics = data.common_metrics(result.outcome_advantages, result.eda_outcome_advantages)
        metrics.update(
            {
                "max_abs_adv": float(result.eda_outcome_advantages.abs().max()) if data.scores.numel() else 0.0,
                "entropy_ratio_min": float(ratios.min()) if ratios.numel() else 1.0,
                "entropy_ratio_max": float(ratios.max()) if ratios.numel() else 1.0,
                "response_entropy_mean": float(result.response_entropy[real].mean()) if ratios.numel() else 0.0,
            }
        )
        _report(step, estimator, metrics)
        if options.entropy_gradient:
            _hand_to_loss(step, result, response_mask, options)
    advantages = result.advantages.to(token_level_rewards.dtype)
    return advantages, advantages


def _hand_to_loss(step: AdvantageStep, result: Any, response_mask: torch.Tensor, options: EdaConfig) -> None:
    """EDA's gradient form: what the actor loss needs to rescale this batch's advantages
    (``edge_verl.integration.eda_loss``), laid on each row's response tokens."""
    mask = response_mask.to(torch.float32)
    step.loss_columns = {
        names.EDA_GROUP_ENTROPY_COLUMN: result.group_entropy[:, None] * mask,
        names.EDA_RATIO_COLUMN: result.entropy_ratio[:, None] * mask,
    }
    step.response_mask = response_mask
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
    step, run, options = _context(estimator, config)
    thresholds = _gepo_thresholds(run)
    source_name = "entropy" if options.group_entropy == "token_entropy" else "old_log_probs"
    source = _token_input(source_name, step, batch, estimator, response_mask.shape)
    data = _Batch(estimator, token_level_rewards, index)
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
        norm_by_std=_norm_by_std(config),
        std_epsilon=options.std_epsilon,
        alpha_low=options.alpha_low,
        alpha_high=options.alpha_high,
        beta_low=options.beta_low,
        beta_high=options.beta_high,
        estimator=options.group_entropy,
        order=options.ema_order,
    )
    if step is not None:
        outcome, valid = result.outcome_advantages, data.valid
        metrics = data.common_metrics(outcome, result.shaped_outcome_advantages)
        entropies = result.group_entropy[result.group_valid]
        positives, negatives = (outcome > 0) & valid, (outcome < 0) & valid
        metrics.update(
            {
                "group_entropy_mean": float(entropies.mean()) if entropies.numel() else 0.0,
                "group_entropy_std": float(entropies.std(unbiased=False)) if entropies.numel() else 0.0,
                "h_low": result.h_low,
                "h_high": result.h_high,
                "candidate_h_low": result.candidate_low,
                "candidate_h_high": result.candidate_high,
                "ema_updates": float(thresholds.num_updates),
                "pos_attenuated_frac": float(result.positive_attenuated.sum() / positives.sum().clamp(min=1)),
                "neg_attenuated_frac": float(result.negative_attenuated.sum() / negatives.sum().clamp(min=1)),
            }
        )
        _report(step, estimator, metrics)
    advantages = result.advantages.to(token_level_rewards.dtype)
    return advantages, advantages


def register_estimators(core_algos_module: Any) -> None:
    """Register both estimators in verl's registry (idempotent)."""
    core_algos_module.register_adv_est(names.EDA_ESTIMATOR)(compute_edge_eda_advantage)
    core_algos_module.register_adv_est(names.GEPO_ESTIMATOR)(compute_gepo_advantage)
