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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from edge_verl.algorithms.group_stats import grpo_advantages, group_sum, masked_row_sum


@dataclass(frozen=True)
class EdaResult:
    """advantages (B, T); outcome_advantages (B,) = GRPO A_i; eda_outcome_advantages (B,) = A_i / P_hat_i;
    response_entropy (B,) = P_i; entropy_ratio (B,) = P_hat_i; has_tokens (B,) real rows with tokens."""

    advantages: torch.Tensor
    outcome_advantages: torch.Tensor
    eda_outcome_advantages: torch.Tensor
    response_entropy: torch.Tensor
    entropy_ratio: torch.Tensor
    has_tokens: torch.Tensor


def compute_entropy_ratio(
    response_entropy: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    has_tokens: torch.Tensor,
    *,
    entropy_epsilon: float,
    ratio_clamp: tuple[float, float] | None,
) -> torch.Tensor:
    """P_hat (B,) = P_i / mean over the group's responses with tokens (Eq. 6); 1 for rows without tokens."""
    weights = has_tokens.to(response_entropy.dtype)
    count = group_sum(weights, group_index, num_groups)
    group_mean = group_sum(response_entropy * weights, group_index, num_groups) / count.clamp(min=1.0)
    row_mean = group_mean[group_index]
    degenerate = row_mean <= entropy_epsilon
    ratio = response_entropy / torch.where(degenerate, torch.ones_like(row_mean), row_mean)
    ratio = torch.where(degenerate | ~has_tokens, torch.ones_like(ratio), ratio.clamp(min=entropy_epsilon))
    if ratio_clamp is not None:
        ratio = ratio.clamp(min=ratio_clamp[0], max=ratio_clamp[1])
    return ratio


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
    lengths = response_mask.sum(dim=-1).to(torch.float32)
    has_tokens = (lengths > 0) & real
    outcome = grpo_advantages(scores, group_index, num_groups, real, norm_by_std=norm_by_std, epsilon=std_epsilon)
    # Non-finite token entropies count as 0 (masked_row_sum); Eq. 3's masked mean.
    response_entropy = masked_row_sum(token_entropy, response_mask) / lengths.clamp(min=1.0)
    ratio = compute_entropy_ratio(
        response_entropy,
        group_index,
        num_groups,
        has_tokens,
        entropy_epsilon=entropy_epsilon,
        ratio_clamp=ratio_clamp,
    )
    eda_outcome = outcome / ratio
    advantages = eda_outcome[:, None] * response_mask.to(eda_outcome.dtype)
    return EdaResult(advantages, outcome, eda_outcome, response_entropy, ratio, has_tokens)
