"""The estimator ``edge_eda``: Entropy-Driven Advantage (EDGE-GRPO, arXiv 2507.21848, Eqs. 3, 6, 7), declared
whole here: its math (pure torch), its options (``EdaConfig``), what it reads (the old policy's per-token
entropy), its loss columns and factor (the gradient form), its metrics.

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
  same guards. Its diagnostic, ``base.entropy_gradient_share`` (any estimator's ``LossScale``), reads the loss's
  gradient with respect to its two inputs (``base.loss_gradients``, also the source of GEC's per-origin gradient
  shares).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Optional

import numpy as np
import torch

from pydantic import field_validator

from edge_verl.config import _check_finite, option
from edge_verl.estimators.base import (
    GRADIENT_SHARE_METRIC, Estimator, EstimatorOptions, EstimatorOutput, GroupBatch, LossScale, Metric, register_estimator,
)
from edge_verl.estimators.groups import group_sum, grpo_outcome, masked_response_mean, masked_row_sum_and_count
from edge_verl.estimators.statistics import advantage_variance_metrics, masked_extreme, masked_mean, on_host

NAME = __name__.rsplit(".", 1)[-1]  # "edge_eda": the registry key is the module's name

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


@dataclass(frozen=True)
class EdaResult:
    """advantages (B, T); outcome_advantages (B,) = GRPO A_i; eda_outcome_advantages (B,) = A_i / P_hat_i;
    response_entropy (B,) = P_i; entropy_ratio (B,) = P_hat_i; has_tokens (B,) real rows with tokens;
    group_entropy (B,) = the detached normaliser mean_{j in g} P_j of each row whose P_hat follows its
    entropy (0 for rows left unscaled: no tokens, padding, groups at or below entropy_epsilon);
    tied_group_frac (0-d) = the fraction of groups whose scores all tie (``base.tied_group_fraction``)."""

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


# --- its options -------------------------------------------------------------------------------------------


class EdaConfig(EstimatorOptions):
    """Entropy-Driven Advantage (estimator ``edge_eda``)."""

    section: ClassVar[str] = NAME
    token_inputs: ClassVar[tuple[str, ...]] = ("entropy",)  # the old policy's per-token entropy
    std_epsilon: float = option(0.0001, ge=0.0, description=(
        "added to the group std in A_i; 1e-4 as in the EDGE-GRPO reference code (verl's GRPO uses 1e-6)."
    ))
    entropy_epsilon: float = option(1e-06, gt=0.0, description=(
        "guard, not in the paper: P_hat is floored here and groups whose mean entropy is at most this are left "
        "unscaled, so zero entropy never divides by zero."
    ))
    ratio_clamp: Optional[tuple[float, float]] = option(None, description=(
        "optional [low, high] bound on P_hat; None (default) = the final reference code, which has no clamp; "
        "the paper's first code version used [0.1, 10]."
    ))
    entropy_gradient: bool = option(False, description=(
        "False (default) = the detached form (a constant advantage from the old policy's entropy, what both "
        "third-party ports do); True = the reference code's form, with gradient through the current policy's "
        "entropy inside the actor loss (both explained in edge_verl/estimators/edge_eda.py). The EDGE recipes "
        "set True. It needs actor_rollout_ref.actor.calculate_entropy=True (checked before the first rollout). "
        "Off by default because it changes the actor's loss and costs memory and an entropy backward in every "
        "update."
    ))

    @field_validator("ratio_clamp", mode="before")
    @classmethod
    def _clamp(cls, value: Any) -> Optional[tuple[float, float]]:
        if value is None:
            return None
        clamp = tuple(value)
        if len(clamp) != 2:
            raise ValueError(f"edge_eda.ratio_clamp={value!r} must be [low, high] or null")
        low = _check_finite("edge_eda", "ratio_clamp[0]", clamp[0])
        high = _check_finite("edge_eda", "ratio_clamp[1]", clamp[1])
        if not 0 < low < high:
            raise ValueError(f"edge_eda.ratio_clamp={value!r} needs 0 < low < high")
        return (low, high)

    @property
    def loss_option(self) -> Optional[str]:
        """The gradient form moves EDA's work into the actor loss (its ``LossScale``, ``loss_factor``)."""
        return f"algorithm.{NAME}.entropy_gradient=True" if self.entropy_gradient else None


# --- its declaration ---------------------------------------------------------------------------------------

# The gradient form (``EdaConfig.entropy_gradient``): per-token columns the estimator writes next to ``advantages``
# for the actor loss (the detached normaliser, the old policy's group mean response entropy, 0 on rows left
# unscaled; the old P_hat) and the batch-level guard options they were computed with.
EDA_GROUP_ENTROPY_COLUMN = "edge_eda_group_entropy"
EDA_RATIO_COLUMN = "edge_eda_entropy_ratio"
EDA_OPTIONS_KEY = "edge_eda_loss_options"


def compute(batch: GroupBatch, options: EdaConfig, state: None) -> EstimatorOutput:
    """EDA on one step's batch: the advantages, the step metrics, and in the gradient form what the actor loss
    needs to rescale the advantages (``loss_factor``), laid on each row's response tokens."""
    result = compute_eda_advantages(
        batch.scores,
        batch.tokens["entropy"],
        batch.response_mask,
        batch.group_index,
        batch.num_groups,
        batch.valid,
        norm_by_std=batch.norm_by_std,
        std_epsilon=options.std_epsilon,
        entropy_epsilon=options.entropy_epsilon,
        ratio_clamp=options.ratio_clamp,
    )
    output = EstimatorOutput(
        result.advantages,
        eda_step_metrics(result, batch.valid),
        outcome=result.eda_outcome_advantages,
        per_sample={"response_entropy": result.response_entropy, "entropy_ratio": result.entropy_ratio},
        result=result,
    )
    if options.entropy_gradient:
        mask = batch.response_mask.to(torch.float32)
        output.loss_columns = {
            EDA_GROUP_ENTROPY_COLUMN: result.group_entropy[:, None] * mask,
            EDA_RATIO_COLUMN: result.entropy_ratio[:, None] * mask,
        }
        output.loss_options = {
            EDA_OPTIONS_KEY: {
                "entropy_epsilon": options.entropy_epsilon,
                "ratio_clamp": list(options.ratio_clamp) if options.ratio_clamp is not None else None,
            }
        }
    return output


def loss_factor(columns: Mapping[str, torch.Tensor], options: Mapping[str, Any], entropy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """EDA's gradient form in the loss: s_i = P_hat_i^old / P_hat_i(theta) (``entropy_gradient_scale``), with
    P_i(theta) the masked mean of the current entropy over the response, the normaliser and P_hat^old from the
    columns, and the guards the estimator used; the rows with a normaliser above entropy_epsilon."""
    mask = columns["response_mask"].to(torch.bool)
    group_entropy = masked_response_mean(columns[EDA_GROUP_ENTROPY_COLUMN].to(torch.float32), mask)
    old_ratio = masked_response_mean(columns[EDA_RATIO_COLUMN].to(torch.float32), mask)
    epsilon = float(options["entropy_epsilon"])
    clamp = options.get("ratio_clamp")
    scale = entropy_gradient_scale(
        masked_response_mean(entropy.to(torch.float32), mask),
        group_entropy,
        old_ratio,
        entropy_epsilon=epsilon,
        ratio_clamp=(float(clamp[0]), float(clamp[1])) if clamp is not None else None,
    )
    return scale, group_entropy > epsilon


EDA = register_estimator(
    Estimator(
        name=NAME,
        description="EDGE-GRPO's Entropy-Driven Advantage (edge_verl/estimators/edge_eda.py)",
        config=EdaConfig,
        compute=compute,
        # the gradient form: the actor loss rescales the advantages with the current entropy
        loss=LossScale((EDA_GROUP_ENTROPY_COLUMN, EDA_RATIO_COLUMN), EDA_OPTIONS_KEY, loss_factor),
        metrics=(
            Metric("response_entropy_mean", panel="entropy"),
            Metric("entropy_ratio_min", panel="statistics"),
            Metric("entropy_ratio_max", panel="statistics"),
            Metric("entropy_ratio_p1", label="EDA entropy ratio p1"),
            Metric("entropy_ratio_p99", label="EDA entropy ratio p99"),
            # the actor loss's, in the gradient form (integration/actor_loss.py)
            Metric(GRADIENT_SHARE_METRIC, label="EDA entropy term's share of the gradient", short="EDA H share",
                   panel="statistics", actor=True),
        ),
    )
)
