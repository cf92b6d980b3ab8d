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

import warnings
from typing import Any, Mapping, Optional

import numpy as np
import torch

from edge_verl.algorithms.eda import compute_eda_advantages
from edge_verl.algorithms.gepo import GepoThresholds, compute_gepo_advantages
from edge_verl.algorithms.group_stats import group_index_from_uids
from edge_verl.config import EdaConfig, GepoConfig
from edge_verl.integration import names
from edge_verl.integration.run import AdvantageStep, TrainingRun, current_run, current_step, estimator_options, norm_adv_by_std, prefixed

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

    def common_metrics(self, before: np.ndarray, after: np.ndarray, valid: np.ndarray, tied_group_frac: float) -> dict[str, float]:
        return {
            "zero_variance_group_frac": float(tied_group_frac),
            # unbiased (ddof = 1), as the EDGE-GRPO reference logs it and as edge_verl/adv/var
            "adv_var_before": masked_variance(before, valid),
            "adv_var_after": masked_variance(after, valid),
        }


def on_host(*tensors: torch.Tensor) -> list[np.ndarray]:
    """The tensors, flattened, as float64 numpy arrays, with ONE device-to-host copy for all of them: the
    step metrics are a few dozen reductions over (B,) vectors, cheaper in numpy than as small torch ops.

    float32, float64 and bool tensors only (the pure functions' outputs). CPU tensors are read in place
    (numpy views, widened); others go through one ``torch.cat``, which promotes them to their widest float
    type (each value exact, as in float64).
    """
    if all(tensor.device.type == "cpu" for tensor in tensors):
        arrays = [(tensor.detach() if tensor.requires_grad else tensor).numpy() for tensor in tensors]
        return [array.reshape(-1).astype(np.float64) for array in arrays]
    flat = torch.cat([tensor.reshape(-1) for tensor in tensors]).detach().cpu().numpy().astype(np.float64)
    return np.split(flat, np.cumsum([tensor.numel() for tensor in tensors])[:-1])


def masked_variance(values: np.ndarray, rows: np.ndarray, ddof: int = 1) -> float:
    """Variance (unbiased with the default ``ddof=1``) of ``values`` over ``rows`` (bool); 0 with ``ddof``
    rows or fewer. numpy's own ``var`` algorithm (pairwise sums, the same value to the last bit) without its
    per-call overhead, which is most of the cost on (B,) vectors."""
    picked = values[rows]
    if picked.size <= ddof:
        return 0.0
    deviation = picked - np.add.reduce(picked) / picked.size
    return float(np.add.reduce(deviation * deviation) / (picked.size - ddof))


def masked_extreme(values: np.ndarray, rows: np.ndarray, largest: bool, empty: float) -> float:
    """Max (``largest``) or min of ``values`` over ``rows``; ``empty`` when no row is selected."""
    picked = values[rows]
    if not picked.size:
        return empty
    return float(picked.max() if largest else picked.min())


# EDA's stability per step (EDGE-GRPO's reviewers: the normalised entropy in the denominator has no stated
# bound): these quantiles of |advantage| and of the entropy ratio P_hat, next to verl's actor/grad_norm.
QUANTILES = {"p1": 0.01, "p50": 0.5, "p99": 0.99}


def masked_quantiles(values: np.ndarray, rows: np.ndarray, name: str, empty: float) -> dict[str, float]:
    """``<name>_p1``, ``_p50``, ``_p99`` of ``values`` over ``rows`` (numpy's linear interpolation);
    ``empty`` for each when no row is selected."""
    picked = values[rows]
    if not picked.size:
        return {f"{name}_{label}": empty for label in QUANTILES}
    points = np.quantile(picked, list(QUANTILES.values()))
    return {f"{name}_{label}": float(point) for label, point in zip(QUANTILES, points)}


def masked_mean(values: np.ndarray, rows: np.ndarray, empty: float = 0.0) -> float:
    picked = values[rows]
    return float(picked.mean()) if picked.size else empty


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
        before, after, ratio, entropy, valid, real, tied = on_host(
            result.outcome_advantages, result.eda_outcome_advantages, result.entropy_ratio, result.response_entropy,
            data.valid, result.has_tokens, result.tied_group_frac,
        )
        valid, real = valid > 0, real > 0
        metrics = data.common_metrics(before, after, valid, tied[0])
        metrics.update(
            {
                "max_abs_adv": masked_extreme(np.abs(after), valid, largest=True, empty=0.0),
                "entropy_ratio_min": masked_extreme(ratio, real, largest=False, empty=1.0),
                "entropy_ratio_max": masked_extreme(ratio, real, largest=True, empty=1.0),
                "response_entropy_mean": masked_mean(entropy, real),
                **masked_quantiles(np.abs(after), valid, "abs_adv", empty=0.0),
                **masked_quantiles(ratio, real, "entropy_ratio", empty=1.0),
            }
        )
        _report(step, estimator, metrics)
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
        outcome, shaped, valid, positive, negative, group_entropy, group_valid, tied = on_host(
            result.outcome_advantages, result.shaped_outcome_advantages, data.valid, result.positive_attenuated,
            result.negative_attenuated, result.group_entropy, result.group_valid, result.tied_group_frac,
        )
        valid, group_valid = valid > 0, group_valid > 0
        metrics = data.common_metrics(outcome, shaped, valid, tied[0])
        metrics.update(
            {
                "group_entropy_mean": masked_mean(group_entropy, group_valid),
                "group_entropy_std": float(np.sqrt(masked_variance(group_entropy, group_valid, ddof=0))),
                "h_low": result.h_low,
                "h_high": result.h_high,
                "candidate_h_low": result.candidate_low,
                "candidate_h_high": result.candidate_high,
                "ema_updates": float(thresholds.num_updates),
                "pos_attenuated_frac": float(np.count_nonzero(positive) / max(1, np.count_nonzero((outcome > 0) & valid))),
                "neg_attenuated_frac": float(np.count_nonzero(negative) / max(1, np.count_nonzero((outcome < 0) & valid))),
            }
        )
        _report(step, estimator, metrics)
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
