"""A step's statistics of a batch's groups, for the trainer's metrics and GEC's (how the groups were answered, the
advantages, the responses as sampled, each data source apart), and the host-side reductions the estimators' step
metrics share (pure torch and numpy, no verl import)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

import numpy as np
import torch

from edge_verl.estimators.groups import (
    group_mean_std, group_sum, grpo_outcome, masked_row_sum_and_count, tied_group_fraction,
)

if TYPE_CHECKING:
    from edge_verl.estimators.base import Estimator


# A response is correct when its score is above this (GEC's default correct_threshold; the papers' rewards are 0/1).
CORRECT_THRESHOLD = 0.5


def outcome_statistics(
    scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor, threshold: float = CORRECT_THRESHOLD
) -> dict[str, float]:
    """How a batch's groups were answered, over the valid responses (groups with none are left out):

    score_mean: mean score; correct_frac: fraction of responses scoring above ``threshold``;
    all_wrong_group_frac / all_right_group_frac: fraction of groups none / all of whose responses are
        correct (all-wrong groups are where GRPO's advantage collapses and GEC corrects).
    Zeros for a batch without valid responses.
    """
    valid = valid.to(torch.bool)
    scores = scores.to(torch.float32)
    correct = ((scores > threshold) & valid).to(torch.float32)
    count = group_sum(valid.to(torch.float32), group_index, num_groups)
    right = group_sum(correct, group_index, num_groups)
    present = count > 0
    groups = present.sum().clamp(min=1).to(torch.float32)
    responses = valid.sum().clamp(min=1).to(torch.float32)
    values = torch.stack((
        (scores * valid).sum() / responses,
        correct.sum() / responses,
        ((right == 0) & present).sum() / groups,
        ((right == count) & present).sum() / groups,
    )).tolist()
    return dict(zip(("score_mean", "correct_frac", "all_wrong_group_frac", "all_right_group_frac"), values))


def advantage_statistics(
    advantages: torch.Tensor, response_mask: torch.Tensor, scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor
) -> dict[str, float]:
    """Statistics of any estimator's output, comparable across estimators (EDGE-GRPO Fig. 5):

    var: unbiased variance (ddof = 1, as the EDGE-GRPO reference logs it) over the valid responses of each
        response's advantage (its mean over response tokens; outcome estimators broadcast one value);
    zero_variance_group_frac: fraction of groups (>= 2 valid responses) whose scores all tie.
    """
    sums, lengths = masked_row_sum_and_count(advantages.to(torch.float32), response_mask)
    valid = valid & (lengths > 0)
    per_response = sums / lengths.clamp(min=1.0)
    _, std, count = group_mean_std(scores, group_index, num_groups, valid)
    tied = tied_group_fraction(std, count)
    per_response = per_response[valid]
    if per_response.numel() < 2:
        variance, tied_frac = 0.0, float(tied)
    else:  # one host sync for both
        variance, tied_frac = torch.stack((per_response.var(unbiased=True).to(tied.dtype), tied)).tolist()
    return {"var": variance if math.isfinite(variance) else 0.0, "zero_variance_group_frac": tied_frac}


def as_sampled_statistics(
    sampled_scores: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    uncorrected: torch.Tensor,
    *,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> dict[str, float]:
    """The advantage statistics of a batch whose rewards were changed after sampling (GEC), on the
    responses as the policy sampled them (EDGE-GRPO Fig. 5's variance rises by construction when corrected,
    rewarded responses are inserted):

    adv_var, zero_variance_group_frac: ``advantage_statistics`` of the GRPO advantages of the rewards as
        sampled (``sampled_scores``, before any correction), grouped as trained;
    adv_var_uncorrected: the variance of the advantages as trained (``advantages`` (B, T)) over the responses
        left as sampled (``uncorrected`` (B,)) only;
    score_mean, correct_frac, all_wrong_group_frac, all_right_group_frac: ``outcome_statistics`` of the
        rewards as sampled (the logged reward of a GEC run is the corrected one).
    """
    outcome, _ = grpo_outcome(sampled_scores, group_index, num_groups, valid, norm_by_std=norm_by_std, epsilon=epsilon)
    mask = response_mask.to(torch.float32)
    stats = advantage_statistics(outcome[:, None] * mask, mask, sampled_scores, group_index, num_groups, valid)
    kept = advantage_statistics(advantages, mask, sampled_scores, group_index, num_groups, valid & uncorrected)
    return {
        "adv_var": stats["var"],
        "zero_variance_group_frac": stats["zero_variance_group_frac"],
        "adv_var_uncorrected": kept["var"],
        **outcome_statistics(sampled_scores, group_index, num_groups, valid),
    }


def per_source_statistics(
    sources: Sequence,
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_probs: Optional[torch.Tensor],
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    per_response: Optional[Mapping[str, torch.Tensor]] = None,
    estimator: Optional["Estimator"] = None,
) -> dict[str, dict[str, float]]:
    """Every training statistic of one step split by the responses' data source (a task of a mixture):
    {source: {stat: value}} over the valid responses of that source (a source with none is left out).

    score_mean, correct_frac, all_wrong_group_frac, all_right_group_frac: ``outcome_statistics``;
    zero_variance_group_frac: groups (>= 2 valid responses) whose scores all tie; response_length: mean
    number of response tokens; sampled_entropy: the token-pooled mean of -log pi_old over the sampled tokens
    (``old_log_probs``; left out when None), GEPO's Monte-Carlo entropy estimate (its Eq. 4) over the
    source's responses; responses: how many. With ``estimator`` (the step's) and the ``per_response`` values its
    ``compute`` returned: the estimator's own statistics of the source (its ``source_statistics``; GEPO's group
    entropy and attenuated fractions). A group's responses share one source (verl repeats a prompt's row, its data source included).
    """
    names = [str(value) for value in (sources.tolist() if hasattr(sources, "tolist") else sources)]
    if len(names) != scores.shape[0]:
        raise ValueError(f"per_source_statistics: {len(names)} sources for {scores.shape[0]} responses")
    labels, codes = np.unique(np.array(names, dtype=str), return_inverse=True)
    codes = torch.as_tensor(codes.reshape(-1), device=valid.device)
    mask = response_mask.to(torch.float32)
    lengths = mask.sum(dim=-1)
    nll = None if old_log_probs is None else -(old_log_probs.to(torch.float32) * mask).sum(dim=-1)
    valid = valid.to(torch.bool) & (lengths > 0)
    found: dict[str, dict[str, float]] = {}
    for code, source in enumerate(labels.tolist()):
        rows = valid & (codes == code)
        count = int(rows.sum())
        if not count:
            continue
        stats = outcome_statistics(scores, group_index, num_groups, rows)
        _, std, group_count = group_mean_std(scores.to(torch.float32), group_index, num_groups, rows)
        stats["zero_variance_group_frac"] = float(tied_group_fraction(std, group_count))
        stats["response_length"] = float(lengths[rows].mean())
        stats["responses"] = float(count)
        if nll is not None:
            stats["sampled_entropy"] = float(nll[rows].sum() / lengths[rows].sum())
        if estimator is not None and estimator.source_statistics is not None and per_response:
            stats.update(estimator.source_statistics(per_response, rows, group_index, num_groups))
        found[source] = stats
    return found


# Step metrics: (B,) results reduced on the host.
# The estimators' step metrics (``edge_eda.eda_step_metrics``, ``gepo.gepo_step_metrics``) read their result's (B,)
# vectors off the device ONCE (``on_host``) and reduce them in numpy: a few dozen reductions over (B,) vectors,
# cheaper there than as small torch ops, and none of them a host sync of its own.

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


def masked_mean(values: np.ndarray, rows: np.ndarray, empty: float = 0.0) -> float:
    picked = values[rows]
    return float(picked.mean()) if picked.size else empty


def advantage_variance_metrics(before: np.ndarray, after: np.ndarray, valid: np.ndarray, tied_group_frac: float) -> dict[str, float]:
    """The step metrics every estimator of the plugin reports: tied groups, the advantage variance before and
    after its change to GRPO's advantage."""
    return {
        "zero_variance_group_frac": float(tied_group_frac),
        # unbiased (ddof = 1), as the EDGE-GRPO reference logs it and as edge_verl/adv/var
        "adv_var_before": masked_variance(before, valid),
        "adv_var_after": masked_variance(after, valid),
    }
