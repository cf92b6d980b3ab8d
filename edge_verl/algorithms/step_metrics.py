"""The per-step metrics of the plugin's estimators, from their results. Pure numpy and torch, no verl.

The adapters (``edge_verl.integration.estimators``) call one of ``eda_step_metrics`` /
``gepo_step_metrics`` after the estimator's pure function and prefix what it returns. Each reads the
result's (B,) vectors off the device ONCE (``on_host``) and reduces them in numpy: a few dozen reductions
over (B,) vectors, cheaper there than as small torch ops, and none of them a host sync of its own.

Shape legend: B responses, P groups; ``valid`` (B,) the rows that take part (padding rows do not).
"""

from __future__ import annotations

import numpy as np
import torch

from edge_verl.algorithms.eda import EdaResult
from edge_verl.algorithms.gepo import GepoResult

# EDA's stability per step (EDGE-GRPO's reviewers: the normalised entropy in the denominator has no stated
# bound): these quantiles of |advantage| and of the entropy ratio P_hat, next to verl's actor/grad_norm.
QUANTILES = {"p1": 0.01, "p50": 0.5, "p99": 0.99}


def on_host(*tensors: torch.Tensor) -> list[np.ndarray]:
    """The tensors, flattened, as float64 numpy arrays, with ONE device-to-host copy for all of them.

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


def _common_metrics(before: np.ndarray, after: np.ndarray, valid: np.ndarray, tied_group_frac: float) -> dict[str, float]:
    return {
        "zero_variance_group_frac": float(tied_group_frac),
        # unbiased (ddof = 1), as the EDGE-GRPO reference logs it and as edge_verl/adv/var
        "adv_var_before": masked_variance(before, valid),
        "adv_var_after": masked_variance(after, valid),
    }


def eda_step_metrics(result: EdaResult, valid: torch.Tensor) -> dict[str, float]:
    """EDA's metrics of one step: the advantage variance before / after the entropy scaling, tied groups,
    |advantage| and P_hat extremes and quantiles, the mean response entropy."""
    before, after, ratio, entropy, valid, real, tied = on_host(
        result.outcome_advantages, result.eda_outcome_advantages, result.entropy_ratio, result.response_entropy,
        valid, result.has_tokens, result.tied_group_frac,
    )
    valid, real = valid > 0, real > 0
    return {
        **_common_metrics(before, after, valid, tied[0]),
        "max_abs_adv": masked_extreme(np.abs(after), valid, largest=True, empty=0.0),
        "entropy_ratio_min": masked_extreme(ratio, real, largest=False, empty=1.0),
        "entropy_ratio_max": masked_extreme(ratio, real, largest=True, empty=1.0),
        "response_entropy_mean": masked_mean(entropy, real),
        **masked_quantiles(np.abs(after), valid, "abs_adv", empty=0.0),
        **masked_quantiles(ratio, real, "entropy_ratio", empty=1.0),
    }


def gepo_step_metrics(result: GepoResult, valid: torch.Tensor, ema_updates: int) -> dict[str, float]:
    """GEPO's metrics of one step: the advantage variance before / after shaping, tied groups, the group
    entropy's mean and std (P,), the thresholds used and this step's candidates, the EMA's update count
    (``ema_updates``, after this step), and the fractions of positive / negative advantages attenuated."""
    outcome, shaped, valid, positive, negative, group_entropy, group_valid, tied = on_host(
        result.outcome_advantages, result.shaped_outcome_advantages, valid, result.positive_attenuated,
        result.negative_attenuated, result.group_entropy, result.group_valid, result.tied_group_frac,
    )
    valid, group_valid = valid > 0, group_valid > 0
    return {
        **_common_metrics(outcome, shaped, valid, tied[0]),
        "group_entropy_mean": masked_mean(group_entropy, group_valid),
        "group_entropy_std": float(np.sqrt(masked_variance(group_entropy, group_valid, ddof=0))),
        "h_low": result.h_low,
        "h_high": result.h_high,
        "candidate_h_low": result.candidate_low,
        "candidate_h_high": result.candidate_high,
        "ema_updates": float(ema_updates),
        "pos_attenuated_frac": float(np.count_nonzero(positive) / max(1, np.count_nonzero((outcome > 0) & valid))),
        "neg_attenuated_frac": float(np.count_nonzero(negative) / max(1, np.count_nonzero((outcome < 0) & valid))),
    }
