"""Vectorised per-group statistics over verl's ``uid`` groups (pure torch, no verl import).

Shape legend: B responses in the batch, T response tokens, P groups (prompts).
- ``group_index`` (B,) long in [0, P): which group each response belongs to.
- ``valid`` (B,) bool: rows that take part in statistics. verl's v1 batch balancing appends padding
  rows (uid "pad...", all-zero response_mask); they are excluded everywhere and get advantage 0.

Every reduction is a ``scatter_add``/``index_add`` over ``group_index``: no Python loop over samples or
groups, so cost is O(B*T) and runs on whatever device the tensors are on.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

PAD_UID_PREFIX = "pad"
# masked_row_sum: CPU inputs above this many elements are reduced in blocks of ~_BLOCK_ELEMENTS (1 MB).
_BLOCKED_MIN_ELEMENTS = 1 << 20
_BLOCK_ELEMENTS = 1 << 18


def group_index_from_uids(uids: Sequence | np.ndarray) -> tuple[torch.Tensor, int, torch.Tensor]:
    """uids (B,) -> (group_index (B,) long, num_groups P, is_pad (B,) bool).

    Group ids follow first appearance, so a permutation of the batch permutes nothing but the rows. One
    dict pass over the rows (no sort): ~12 us for 256 rows, ~0.4 ms for 8192 (numpy's unique on strings,
    which verl's grouping uses, takes ~5x that).
    """
    codes: dict[str, int] = {}
    index = [codes.setdefault(uid if type(uid) is str else str(uid), len(codes)) for uid in uids]
    group_index = torch.tensor(index, dtype=torch.long)
    pad_groups = torch.tensor([uid.startswith(PAD_UID_PREFIX) for uid in codes], dtype=torch.bool)
    return group_index, len(codes), pad_groups[group_index] if index else torch.zeros(0, dtype=torch.bool)


def response_valid(response_mask: torch.Tensor, is_pad: torch.Tensor | None = None) -> torch.Tensor:
    """(B,) bool: rows with at least one response token that are not padding rows."""
    valid = response_mask.sum(dim=-1) > 0
    if is_pad is not None:
        valid = valid & ~is_pad.to(valid.device)
    return valid


def masked_row_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) values and mask -> (B,) sum of values over each row's mask, non-finite values counted as 0.

    One pass, no (B, T) temporary on a CPU: large CPU inputs are multiplied and summed in blocks of rows
    that fit in cache, because a fresh (B, T) product costs its page faults every call (measured at
    8192 x 4096: 22 ms in blocks vs 52 ms for ``(values * mask).sum(-1)`` and 57 ms for ``einsum``); small
    inputs, GPU inputs (cached allocator) and inputs that need a gradient take the plain product.
    Rows whose sum is not finite (NaN/inf anywhere in the row, masked or not) are recomputed exactly with
    the non-finite entries zeroed.
    """
    mask = mask.to(values.dtype)
    rows = max(1, _BLOCK_ELEMENTS // max(1, values.shape[-1]))
    blocked = values.device.type == "cpu" and values.numel() > _BLOCKED_MIN_ELEMENTS and not (
        torch.is_grad_enabled() and values.requires_grad
    )
    if blocked:
        sums = torch.empty(values.shape[0], dtype=values.dtype)
        for start in range(0, values.shape[0], rows):
            block = slice(start, start + rows)
            torch.sum(values[block] * mask[block], dim=-1, out=sums[block])
    else:
        sums = (values * mask).sum(dim=-1)
    bad = ~torch.isfinite(sums)
    if bool(bad.any()):
        clean = torch.nan_to_num(values[bad], nan=0.0, posinf=0.0, neginf=0.0)
        sums = sums.clone()
        sums[bad] = (clean * mask[bad]).sum(dim=-1)
    return torch.nan_to_num(sums, nan=0.0, posinf=0.0, neginf=0.0)


def masked_response_mean(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """values (B, T), response_mask (B, T) -> (B,) mean over each row's response tokens (0 for empty rows)."""
    lengths = response_mask.sum(dim=-1).to(values.dtype)
    return masked_row_sum(values, response_mask) / lengths.clamp(min=1.0)


def group_sum(values: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """values (B,) -> (P,) per-group sums."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, group_index, values)


def group_mean_std(
    scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group mean and unbiased std of ``scores`` over valid rows, as verl's GRPO defines them.

    Returns (mean (P,), std (P,), count (P,)). A group with a single valid response has mean 0 and
    std 1 (verl's convention: its advantage is its raw score); an empty group has mean 0, std 1.
    """
    weights = valid.to(scores.dtype)
    count = group_sum(weights, group_index, num_groups)
    total = group_sum(scores * weights, group_index, num_groups)
    mean = total / count.clamp(min=1.0)
    deviation = (scores - mean[group_index]) * weights
    variance = group_sum(deviation * deviation, group_index, num_groups) / (count - 1.0).clamp(min=1.0)
    single = count < 2
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(variance), variance.sqrt())
    return mean, std, count


def grpo_outcome(
    scores: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    *,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``grpo_advantages`` and, from the same group statistics, the fraction of tied groups (a 0-d tensor,
    see ``tied_group_fraction``), so an estimator's metrics need no second pass over the groups."""
    mean, std, count = group_mean_std(scores, group_index, num_groups, valid)
    advantages = scores - mean[group_index]
    if norm_by_std:
        advantages = advantages / (std[group_index] + epsilon)
    return torch.where(valid, advantages, torch.zeros_like(advantages)), tied_group_fraction(std, count)


def grpo_advantages(
    scores: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    *,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """Outcome-level GRPO advantage (B,): (r_i - mean_g) / (std_g + epsilon), 0 on invalid rows.

    Identical to verl's ``compute_grpo_outcome_advantage`` (before broadcasting over tokens) for the
    same epsilon; ``norm_by_std=False`` is Dr.GRPO's mean-only variant.
    """
    return grpo_outcome(scores, group_index, num_groups, valid, norm_by_std=norm_by_std, epsilon=epsilon)[0]


def tied_group_fraction(std: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """0-d tensor: of the groups with >= 2 valid responses (``group_mean_std``'s std and count), the fraction
    whose scores all tie (std 0): GRPO's advantage collapse. 0 without such groups. No host sync."""
    multi = count >= 2
    return ((std == 0) & multi).sum().to(std.dtype) / multi.sum().clamp(min=1).to(std.dtype)


def zero_variance_group_fraction(
    scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor
) -> float:
    """Fraction of groups (with >= 2 valid responses) whose scores all tie: GRPO's advantage collapse."""
    _, std, count = group_mean_std(scores, group_index, num_groups, valid)
    return float(tied_group_fraction(std, count))


def advantage_statistics(
    advantages: torch.Tensor, response_mask: torch.Tensor, scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor
) -> dict[str, float]:
    """Statistics of any estimator's output, comparable across estimators (EDGE-GRPO Fig. 5):

    var: unbiased variance (ddof = 1, as the EDGE-GRPO reference logs it) over the valid responses of each
        response's advantage (its mean over response tokens; outcome estimators broadcast one value);
    zero_variance_group_frac: fraction of groups (>= 2 valid responses) whose scores all tie.
    """
    valid = valid & (response_mask.sum(dim=-1) > 0)
    per_response = masked_response_mean(advantages.to(torch.float32), response_mask)[valid]
    variance = float(per_response.var(unbiased=True)) if per_response.numel() >= 2 else 0.0
    return {
        "var": variance if math.isfinite(variance) else 0.0,
        "zero_variance_group_frac": zero_variance_group_fraction(scores, group_index, num_groups, valid),
    }
