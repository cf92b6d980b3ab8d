"""verl adapter for the ``edge_eda`` and ``gepo`` advantage estimators.

verl calls registered estimators with token_level_rewards, response_mask, index (uid), config
(= ``config.algorithm``) only. EDA also needs the old policy's per-token entropy and GEPO the old
log-probs; ``trainer_hooks`` hands them over (the batch is passed as ``batch=`` -- the signature of
upstream PR #7473 -- or parked in ``pending_inputs`` by the v1 hook). Each estimator unpacks, calls one
pure function from ``edge_verl.algorithms``, records its metrics for the step, and packs the result.
Missing inputs raise; there is no silent fallback to GRPO.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from omegaconf import OmegaConf

from edge_verl.algorithms.eda import compute_eda_advantages
from edge_verl.algorithms.gepo import compute_gepo_advantages
from edge_verl.algorithms.group_stats import group_index_from_uids, grpo_advantages, zero_variance_group_fraction
from edge_verl.config import EdaConfig, GepoConfig
from edge_verl.integration import state

EDA_NAME = "edge_eda"
GEPO_NAME = "gepo"
ESTIMATORS = (EDA_NAME, GEPO_NAME)
ENTROPY_KEYS = ("entropys", "entropy", "edge_verl_entropys")
METRIC_PREFIX = "edge_verl"

# Inputs the v1 trainer hook fetched for the current advantage step, and metrics awaiting verl's logger.
_pending_inputs: dict[str, torch.Tensor] = {}
_pending_metrics: dict[str, float] = {}


def add_pending_inputs(**tensors: torch.Tensor) -> None:
    """Park tensors for the estimator call that follows (the trainer hooks do this)."""
    _pending_inputs.update(tensors)


def clear_pending_inputs() -> None:
    _pending_inputs.clear()


def pop_pending_metrics() -> dict[str, float]:
    metrics = dict(_pending_metrics)
    _pending_metrics.clear()
    return metrics


def config_section(config: Any, name: str) -> dict:
    """``config.algorithm.<name>`` (a DictConfig, a dict, or absent) as a plain dict."""
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


def eda_config(config: Any) -> EdaConfig:
    return EdaConfig.from_mapping(config_section(config, EDA_NAME))


def gepo_config(config: Any) -> GepoConfig:
    return GepoConfig.from_mapping(config_section(config, GEPO_NAME))


def check_supported(config: Any, estimator: str) -> None:
    """Refuse verl settings under which the estimator's inputs do not exist."""
    if bypass_mode_enabled(config):
        raise ValueError(
            f"algorithm.adv_estimator={estimator} needs the old-policy forward pass (per-token entropy / "
            "old_log_probs), which algorithm.rollout_correction.bypass_mode=True skips; set it to False."
        )


def _norm_by_std(config: Any) -> bool:
    if config is None:
        return True
    return bool(config.get("norm_adv_by_std_in_grpo", True) if hasattr(config, "get") else True)


def _find_tensor(batch: Optional[Mapping], keys: tuple[str, ...], shape: torch.Size) -> Optional[torch.Tensor]:
    for source in (batch, _pending_inputs):
        if source is None:
            continue
        for key in keys:
            if key in source.keys():
                tensor = source[key]
                if tensor.shape != shape:
                    raise ValueError(f"{key} has shape {tuple(tensor.shape)}, response_mask {tuple(shape)}")
                return tensor
    return None


def _require(tensor: Optional[torch.Tensor], what: str, estimator: str, hint: str) -> torch.Tensor:
    if tensor is None:
        raise KeyError(f"algorithm.adv_estimator={estimator} needs {what}, which this batch does not carry. {hint}")
    return tensor


_HINT = "Run verl through the edge_verl plugin (edge-verl doctor) and keep algorithm.rollout_correction.bypass_mode=False."
_ENTROPY_WHAT = "the old policy's per-token entropy ('entropys'/'entropy')"


def _unpack(estimator, token_level_rewards, response_mask, index, batch, keys, what):
    """(token tensor from ``keys``, group_index, num_groups, is_pad, scores), all on the rewards' device."""
    uids = _require(index, "uid groups (index)", estimator, "verl passes them when the batch has 'uid'.")
    source = _require(_find_tensor(batch, keys, response_mask.shape), what, estimator, _HINT)
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    device = token_level_rewards.device
    scores = token_level_rewards.sum(dim=-1).to(torch.float32)
    return source.to(device), group_index.to(device), num_groups, is_pad.to(device), scores


def _common_metrics(scores, group_index, num_groups, valid, before, after) -> dict[str, float]:
    rows_before, rows_after = before[valid], after[valid]
    return {
        "zero_variance_group_frac": zero_variance_group_fraction(scores, group_index, num_groups, valid),
        "adv_var_before": float(rows_before.var(unbiased=False)) if rows_before.numel() else 0.0,
        "adv_var_after": float(rows_after.var(unbiased=False)) if rows_after.numel() else 0.0,
    }


def _publish(estimator: str, metrics: dict[str, float]) -> None:
    _pending_metrics.clear()
    _pending_metrics.update({f"{METRIC_PREFIX}/{estimator}/{key}": value for key, value in metrics.items()})


def compute_edge_eda_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    batch: Optional[Mapping] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator ``edge_eda``: EDGE-GRPO's Entropy-Driven Advantage (see edge_verl.algorithms.eda)."""
    check_supported(config, EDA_NAME)
    options = eda_config(config)
    token_entropy, group_index, num_groups, is_pad, scores = _unpack(
        EDA_NAME, token_level_rewards, response_mask, index, batch, ENTROPY_KEYS, _ENTROPY_WHAT
    )
    result = compute_eda_advantages(
        scores,
        token_entropy,
        response_mask,
        group_index,
        num_groups,
        is_pad,
        norm_by_std=_norm_by_std(config),
        std_epsilon=options.std_epsilon,
        entropy_epsilon=options.entropy_epsilon,
        ratio_clamp=options.ratio_clamp,
    )
    real = result.has_tokens
    metrics = _common_metrics(scores, group_index, num_groups, ~is_pad, result.outcome_advantages, result.eda_outcome_advantages)
    ratios = result.entropy_ratio[real]
    metrics.update(
        {
            "max_abs_adv": float(result.eda_outcome_advantages.abs().max()) if scores.numel() else 0.0,
            "entropy_ratio_min": float(ratios.min()) if ratios.numel() else 1.0,
            "entropy_ratio_max": float(ratios.max()) if ratios.numel() else 1.0,
            "response_entropy_mean": float(result.response_entropy[real].mean()) if ratios.numel() else 0.0,
        }
    )
    _publish(EDA_NAME, metrics)
    advantages = result.advantages.to(token_level_rewards.dtype)
    return advantages, advantages


def compute_gepo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    batch: Optional[Mapping] = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl estimator ``gepo``: GEPO's entropy-conditioned asymmetric scaling (see edge_verl.algorithms.gepo)."""
    check_supported(config, GEPO_NAME)
    options = gepo_config(config)
    keys, what = (ENTROPY_KEYS, _ENTROPY_WHAT) if options.group_entropy == "token_entropy" else (("old_log_probs",), "old_log_probs")
    source, group_index, num_groups, is_pad, scores = _unpack(
        GEPO_NAME, token_level_rewards, response_mask, index, batch, keys, what
    )
    valid = ~is_pad
    outcome = grpo_advantages(
        scores, group_index, num_groups, valid, norm_by_std=_norm_by_std(config), epsilon=options.std_epsilon
    )
    # verl computes advantages for training batches only, so every call here updates the EMA once;
    # validation never reaches an estimator (tested end-to-end: num_updates == training steps).
    result = compute_gepo_advantages(
        outcome,
        source,
        response_mask,
        group_index,
        num_groups,
        valid,
        state.gepo_thresholds(options),
        alpha_low=options.alpha_low,
        alpha_high=options.alpha_high,
        beta_low=options.beta_low,
        beta_high=options.beta_high,
        estimator=options.group_entropy,
        order=options.ema_order,
    )
    metrics = _common_metrics(scores, group_index, num_groups, valid, outcome, result.shaped_outcome_advantages)
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
            "ema_updates": float(state.gepo_thresholds(options).num_updates),
            "pos_attenuated_frac": float(result.positive_attenuated.sum() / positives.sum().clamp(min=1)),
            "neg_attenuated_frac": float(result.negative_attenuated.sum() / negatives.sum().clamp(min=1)),
        }
    )
    _publish(GEPO_NAME, metrics)
    advantages = result.advantages.to(token_level_rewards.dtype)
    return advantages, advantages


def register_estimators(core_algos_module) -> None:
    """Register both estimators in verl's registry (idempotent)."""
    core_algos_module.register_adv_est(EDA_NAME)(compute_edge_eda_advantage)
    core_algos_module.register_adv_est(GEPO_NAME)(compute_gepo_advantage)
