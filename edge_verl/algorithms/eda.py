"""Entropy-Driven Advantage (EDGE-GRPO, arXiv 2507.21848, Eqs. 3, 6, 7). Pure torch.

Shape legend: B responses, T response tokens, P groups.

Differs from GRPO:
- each response's GRPO advantage is divided by its normalised response entropy
  P_hat_i = P_i / mean_{j in g} P_j, where P_i is the masked mean token entropy (Eq. 3, 6, 7);
  confident (low-entropy) responses get a larger |A|, uncertain ones a smaller |A|; the sign is kept;
- the std in the GRPO advantage uses epsilon 1e-4 (the reference code), not verl's 1e-6.
Unchanged: all-tied groups still get A = 0 (EDA cannot break ties; GEC does).

Deliberate guards (the reference code has none, see ``EdaConfig``): a group whose mean entropy is
<= entropy_epsilon gets P_hat = 1 (no scaling), and P_hat is floored at entropy_epsilon so that a
zero-entropy response gives a large but finite advantage; ``ratio_clamp`` optionally bounds P_hat.

Two forms (``EdaConfig.entropy_gradient``):
- detached: ``compute_eda_advantages`` at the advantage step, from the OLD policy's entropy; the loss sees
  a constant advantage (what both third-party ports do);
- with gradient through entropy (the reference code, ``grpo_aha_trainer.py`` ``_compute_loss``): the loss
  uses A_i * mean_g.detach() / P_i(theta) with the CURRENT policy's P_i, so d loss / d P_i =
  A_i * mean_g / P_i^2 (times the loss's own factors) adds an advantage-weighted entropy term. Here the
  detached normaliser is the old policy's group mean (the reference's current-policy mean, detached, is
  the same number at the first mini-batch), and ``entropy_gradient_scale`` turns the detached advantage
  into that form inside the loss: A_hat_i * P_hat_i^old / P_hat_i(theta) = A_i / P_hat_i(theta), with the
  same guards. Its diagnostic, ``entropy_gradient_share``, reads the loss's gradient with respect to its two
  inputs (``loss_gradients``, also the source of GEC's per-origin gradient shares).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from edge_verl.algorithms.group_stats import (
    advantage_variance_metrics, masked_extreme, masked_mean, masked_quantiles, on_host, group_sum, grpo_outcome, masked_row_sum_and_count,
)


@dataclass(frozen=True)
class EdaResult:
    """advantages (B, T); outcome_advantages (B,) = GRPO A_i; eda_outcome_advantages (B,) = A_i / P_hat_i;
    response_entropy (B,) = P_i; entropy_ratio (B,) = P_hat_i; has_tokens (B,) real rows with tokens;
    group_entropy (B,) = the detached normaliser mean_{j in g} P_j of each row whose P_hat follows its
    entropy (0 for rows left unscaled: no tokens, padding, groups at or below entropy_epsilon);
    tied_group_frac (0-d) = the fraction of groups whose scores all tie (``group_stats.tied_group_fraction``)."""

    advantages: torch.Tensor
    outcome_advantages: torch.Tensor
    eda_outcome_advantages: torch.Tensor
    response_entropy: torch.Tensor
    entropy_ratio: torch.Tensor
    has_tokens: torch.Tensor
    group_entropy: torch.Tensor
    tied_group_frac: torch.Tensor


def ratio_bounds(entropy_epsilon: float, ratio_clamp: tuple[float, float] | None) -> tuple[float, float]:
    """[low, high] that P_hat is clamped to: the entropy_epsilon floor, then the optional ratio_clamp."""
    if ratio_clamp is None:
        return entropy_epsilon, math.inf
    return max(entropy_epsilon, ratio_clamp[0]), ratio_clamp[1]


def group_entropy_mean(
    response_entropy: torch.Tensor, group_index: torch.Tensor, num_groups: int, has_tokens: torch.Tensor
) -> torch.Tensor:
    """(B,) mean of P_j over the responses with tokens of each row's group (Eq. 6's denominator)."""
    weights = has_tokens.to(response_entropy.dtype)
    count = group_sum(weights, group_index, num_groups)
    group_mean = group_sum(response_entropy * weights, group_index, num_groups) / count.clamp(min=1.0)
    return group_mean.index_select(0, group_index)


def _guarded_ratio(
    response_entropy: torch.Tensor, group_entropy: torch.Tensor, entropy_epsilon: float, ratio_clamp: tuple[float, float] | None
) -> torch.Tensor:
    """P / normaliser within ``ratio_bounds``; 1 where the normaliser is <= entropy_epsilon (no scaling)."""
    degenerate = group_entropy <= entropy_epsilon
    ratio = response_entropy / torch.where(degenerate, 1.0, group_entropy)
    low, high = ratio_bounds(entropy_epsilon, ratio_clamp)
    return torch.where(degenerate, 1.0, ratio.clamp(min=low, max=high))


def entropy_gradient_scale(
    response_entropy: torch.Tensor,
    group_entropy: torch.Tensor,
    entropy_ratio: torch.Tensor,
    *,
    entropy_epsilon: float,
    ratio_clamp: tuple[float, float] | None,
) -> torch.Tensor:
    """(B,) factor s_i = P_hat_i^old / P_hat_i(theta) that turns the detached EDA advantage into the reference's.

    response_entropy (B,) = P_i(theta), the CURRENT policy's masked mean token entropy, with gradient;
    group_entropy (B,) = the detached normaliser from ``EdaResult.group_entropy`` (0: row left unscaled, s = 1);
    entropy_ratio (B,) = P_hat_i^old from ``EdaResult.entropy_ratio``. Then A_hat_i * s_i = A_i / P_hat_i(theta)
    with P_hat_i(theta) = P_i(theta) / group_entropy_i under the same guards as the advantage step; s = 1
    (value) wherever theta = theta_old, and the gradient flows through P_i(theta) only.
    """
    current = _guarded_ratio(response_entropy, group_entropy, entropy_epsilon, ratio_clamp)  # 1 on unscaled rows
    old = torch.where(group_entropy > entropy_epsilon, entropy_ratio.to(current.dtype), torch.ones_like(current))
    return old / current


def loss_gradients(loss: torch.Tensor, log_prob: torch.Tensor, entropy: Optional[torch.Tensor]) -> Optional[tuple]:
    """(dL/dlogp, dL/dH) over the loss's elementwise ops (``retain_graph``: the trainer's backward follows);
    None without a graph (no_grad, or a loss that does not depend on the policy). A missing path gives None."""
    inputs = [tensor for tensor in (log_prob, entropy) if tensor is not None and tensor.requires_grad]
    if not (torch.is_grad_enabled() and loss.requires_grad and inputs):
        return None
    grads = iter(torch.autograd.grad(loss, inputs, retain_graph=True, allow_unused=True))
    return tuple(next(grads) if tensor is not None and tensor.requires_grad else None for tensor in (log_prob, entropy))


def entropy_gradient_share(grad_log_prob: Optional[torch.Tensor], grad_entropy: Optional[torch.Tensor]) -> float:
    """|dL/dH| / (|dL/dlogp| + |dL/dH|), norms over the micro-batch's response tokens: of the loss gradient
    with respect to the policy's outputs, the share that reaches them through the entropy (a cheap proxy for
    the share in parameter space, no second backward through the model); 0 without any gradient."""
    through_entropy = float(grad_entropy.norm()) if grad_entropy is not None else 0.0
    through_log_prob = float(grad_log_prob.norm()) if grad_log_prob is not None else 0.0
    total = through_log_prob + through_entropy
    return through_entropy / total if total > 0 else 0.0


def compute_eda_advantages(
    scores: torch.Tensor,
    token_entropy: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    *,
    norm_by_std: bool = True,
    std_epsilon: float = 1e-4,
    entropy_epsilon: float = 1e-6,
    ratio_clamp: tuple[float, float] | None = None,
) -> EdaResult:
    """EDA advantages.

    scores (B,) outcome rewards; token_entropy (B, T) old-policy token entropy (detached, at the
    sampling temperature); response_mask (B, T); group_index (B,) in [0, P); valid (B,) rows taking part
    (False for padding rows). Masked tokens and invalid rows get advantage 0.
    """
    token_entropy = token_entropy.to(torch.float32)
    scores = scores.to(torch.float32)
    real = valid.to(scores.device)
    # One float copy of the mask (verl's is int64; a mixed-dtype product is ~3x slower on a CPU) serves the
    # entropy product and becomes the output, scaled in place: the only (B, T) allocation.
    mask = response_mask.to(torch.float32, copy=True)
    # Non-finite token entropies count as 0 (masked_row_sum); Eq. 3's masked mean.
    entropy_sum, lengths = masked_row_sum_and_count(token_entropy, mask)
    response_entropy = entropy_sum / lengths.clamp(min=1.0)
    has_tokens = (lengths > 0) & real
    outcome, tied = grpo_outcome(scores, group_index, num_groups, real, norm_by_std=norm_by_std, epsilon=std_epsilon)
    row_mean = group_entropy_mean(response_entropy, group_index, num_groups, has_tokens)
    group_entropy = torch.where(has_tokens & (row_mean > entropy_epsilon), row_mean, 0.0)
    ratio = _guarded_ratio(response_entropy, group_entropy, entropy_epsilon, ratio_clamp)
    eda_outcome = outcome / ratio
    advantages = mask.mul_(eda_outcome[:, None])
    return EdaResult(advantages, outcome, eda_outcome, response_entropy, ratio, has_tokens, group_entropy, tied)


def eda_step_metrics(result: EdaResult, valid: torch.Tensor) -> dict[str, float]:
    """EDA's metrics of one step: the advantage variance before / after the entropy scaling, tied groups,
    |advantage| and P_hat extremes and quantiles, the mean response entropy."""
    before, after, ratio, entropy, valid, real, tied = on_host(
        result.outcome_advantages, result.eda_outcome_advantages, result.entropy_ratio, result.response_entropy,
        valid, result.has_tokens, result.tied_group_frac,
    )
    valid, real = valid > 0, real > 0
    return {
        **advantage_variance_metrics(before, after, valid, tied[0]),
        "max_abs_adv": masked_extreme(np.abs(after), valid, largest=True, empty=0.0),
        "entropy_ratio_min": masked_extreme(ratio, real, largest=False, empty=1.0),
        "entropy_ratio_max": masked_extreme(ratio, real, largest=True, empty=1.0),
        "response_entropy_mean": masked_mean(entropy, real),
        **masked_quantiles(np.abs(after), valid, "abs_adv", empty=0.0),
        **masked_quantiles(ratio, real, "entropy_ratio", empty=1.0),
    }
