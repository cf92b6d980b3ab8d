"""The estimator ``gepo``: Group Entropy-Controlled Policy Optimization (GEPO, arXiv 2607.16850, Eqs. 4, 7, 8, 9),
declared whole here: its math (pure torch), its options (``GepoConfig``), what it reads (the old log-probs, or the
old policy's entropy), its training state (``GepoThresholds``, saved with every checkpoint), its metrics.

Shape legend: B responses, T response tokens, P groups.

Differs from GRPO:
- a group entropy H_g is estimated from the old policy (Eq. 4: token-pooled sampled-token NLL);
- adaptive thresholds H_low/H_high come from the batch's group-entropy mean/std (Eq. 8), smoothed by an
  EMA across steps (Eq. 9) -- training state, see ``GepoThresholds``;
- positive advantages in confident groups (H_g < H_low) are scaled by alpha_low, negative advantages in
  uncertain groups (H_g > H_high) by alpha_high; everything else is unchanged (Eq. 7).
The GRPO advantage A_i itself and the policy loss are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, Mapping

import numpy as np
import torch

from pydantic import model_validator

from edge_verl.config import option
from edge_verl.estimators.base import (
    Estimator, EstimatorOptions, EstimatorOutput, GroupBatch, Metric, MinGroups, register_estimator,
)
from edge_verl.estimators.groups import group_sum, grpo_outcome, masked_row_sum_and_count
from edge_verl.estimators.statistics import advantage_variance_metrics, masked_mean, masked_variance, on_host

NAME = __name__.rsplit(".", 1)[-1]  # "gepo": the registry key is the module's name

GROUP_ENTROPY_ESTIMATORS = ("token_pooled", "response_mean", "token_entropy")
# One group per step is not GEPO: the thresholds (Eq. 8) come from the spread of the step's group entropies.
MIN_GROUPS = MinGroups(2, "its thresholds are the step's group-entropy mean -/+ beta x their std (Eq. 8): with one "
                          "group the std is 0, both thresholds are that group's entropy and no advantage is ever scaled "
                          "(GEPO's paper: 32 prompts per step)")


def compute_group_entropy(
    token_values: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    *,
    estimator: str = "token_pooled",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group entropy H_g (P,) and which groups have any token (P,) bool.

    token_values (B, T): old_log_probs of the sampled tokens for "token_pooled"/"response_mean"
    (the entropy estimate is their negation), per-token entropy for "token_entropy".
    - token_pooled (Eq. 4): sum of NLL over the group's tokens / number of the group's tokens;
    - response_mean: mean over the group's responses of each response's mean NLL;
    - token_entropy: token-pooled exact entropy instead of the sampled-token NLL.
    """
    if estimator not in GROUP_ENTROPY_ESTIMATORS:
        raise ValueError(f"group entropy estimator {estimator!r}; allowed: {GROUP_ENTROPY_ESTIMATORS}")
    sign = 1.0 if estimator == "token_entropy" else -1.0
    row_valid = valid.to(torch.float32)
    # Row-level reductions only (one fused pass over (B, T)); non-finite values count as 0.
    row_total, row_tokens = masked_row_sum_and_count(token_values.to(torch.float32), response_mask)
    row_tokens = row_tokens * row_valid
    row_total = sign * row_total * row_valid
    if estimator == "response_mean":
        has_tokens = row_tokens > 0
        row_mean = row_total / row_tokens.clamp(min=1.0)
        responses = group_sum(has_tokens.float(), group_index, num_groups)
        entropy = group_sum(row_mean * has_tokens.float(), group_index, num_groups) / responses.clamp(min=1.0)
        return entropy, responses > 0
    tokens = group_sum(row_tokens, group_index, num_groups)
    entropy = group_sum(row_total, group_index, num_groups) / tokens.clamp(min=1.0)
    return entropy, tokens > 0


def batch_entropy_stats(group_entropy: torch.Tensor, group_valid: torch.Tensor) -> tuple[float, float]:
    """(mu, sigma) over the step's valid groups; sigma is the population std (ddof = 0)."""
    values = group_entropy[group_valid]
    if values.numel() == 0:
        return 0.0, 0.0
    mean = values.mean()
    deviation = values - mean
    mu, sigma = torch.stack((mean, (deviation * deviation).mean().sqrt())).tolist()  # one host sync
    return mu, sigma


def candidate_thresholds(mu: float, sigma: float, beta_low: float, beta_high: float) -> tuple[float, float]:
    """Eq. 8: (mu - beta_low * sigma, mu + beta_high * sigma)."""
    return mu - beta_low * sigma, mu + beta_high * sigma


class GepoThresholds:
    """EMA-smoothed entropy thresholds (Eq. 9), the only cross-step state of GEPO.

    ``update`` moves the thresholds towards this step's candidates: H <- (1 - gamma) H + gamma H_hat, with
    the first update seeding H = H_hat (``init="first_batch"``, default) or starting from 0 (``init="zero"``).
    Save it with ``state_dict()`` and restore with ``load_state_dict()``.
    """

    INITS = ("first_batch", "zero")

    def __init__(self, gamma: float = 0.01, init: str = "first_batch"):
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma={gamma!r} must be in (0, 1]")
        if init not in self.INITS:
            raise ValueError(f"init={init!r}; allowed: {self.INITS}")
        self.gamma = float(gamma)
        self.init = init
        self.h_low = 0.0
        self.h_high = 0.0
        self.num_updates = 0

    def update(self, candidate_low: float, candidate_high: float) -> None:
        if self.num_updates == 0 and self.init == "first_batch":
            self.h_low, self.h_high = float(candidate_low), float(candidate_high)
        else:
            self.h_low = (1.0 - self.gamma) * self.h_low + self.gamma * float(candidate_low)
            self.h_high = (1.0 - self.gamma) * self.h_high + self.gamma * float(candidate_high)
        self.num_updates += 1

    def state_dict(self) -> dict:
        return {"h_low": self.h_low, "h_high": self.h_high, "num_updates": self.num_updates, "gamma": self.gamma, "init": self.init}

    def load_state_dict(self, state: dict) -> None:
        missing = {"h_low", "h_high", "num_updates"} - set(state)
        if missing:
            raise KeyError(f"GEPO threshold state lacks {sorted(missing)}")
        self.h_low = float(state["h_low"])
        self.h_high = float(state["h_high"])
        self.num_updates = int(state["num_updates"])

    def __repr__(self) -> str:
        return f"GepoThresholds(h_low={self.h_low:.6g}, h_high={self.h_high:.6g}, num_updates={self.num_updates})"


def shape_advantages(
    outcome_advantages: torch.Tensor,
    row_group_entropy: torch.Tensor,
    h_low: float,
    h_high: float,
    alpha_low: float,
    alpha_high: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 7 on outcome advantages (B,). Returns (shaped (B,), positive attenuated (B,) bool, negative
    attenuated (B,) bool). Inequalities are strict; A = 0 is untouched."""
    positive = (outcome_advantages > 0) & (row_group_entropy < h_low)
    negative = (outcome_advantages < 0) & (row_group_entropy > h_high)
    shaped = torch.where(positive, alpha_low * outcome_advantages, outcome_advantages)
    shaped = torch.where(negative, alpha_high * outcome_advantages, shaped)
    return shaped, positive, negative


@dataclass(frozen=True)
class GepoResult:
    """advantages (B, T); outcome/shaped (B,); group_entropy (P,); thresholds used; attenuation masks (B,);
    tied_group_frac (0-d): the fraction of groups whose scores all tie."""

    advantages: torch.Tensor
    outcome_advantages: torch.Tensor
    shaped_outcome_advantages: torch.Tensor
    group_entropy: torch.Tensor
    group_valid: torch.Tensor
    h_low: float
    h_high: float
    candidate_low: float
    candidate_high: float
    positive_attenuated: torch.Tensor
    negative_attenuated: torch.Tensor
    tied_group_frac: torch.Tensor


def compute_gepo_advantages(
    scores: torch.Tensor,
    entropy_source: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    thresholds: GepoThresholds,
    *,
    norm_by_std: bool = True,
    std_epsilon: float = 1e-6,
    alpha_low: float = 0.5,
    alpha_high: float = 0.2,
    beta_low: float = 0.2,
    beta_high: float = 0.3,
    estimator: str = "token_pooled",
    order: str = "update_then_apply",
    update_state: bool = True,
) -> GepoResult:
    """GEPO advantages (Eqs. 4, 7-9) from outcome scores.

    scores (B,) outcome rewards -> GRPO's A_i (``norm_by_std``, ``std_epsilon`` as verl's GRPO);
    entropy_source (B, T): old_log_probs (or token entropy for estimator="token_entropy"); response_mask
    (B, T); valid (B,) rows taking part in statistics (False for padding rows).
    ``thresholds`` is updated in place when ``update_state`` (False: shape with frozen thresholds). ``order``:
    "update_then_apply" (default) shapes with the thresholds after this step's EMA update,
    "apply_then_update" with the previous ones (the first step then seeds and applies).
    """
    outcome_advantages, tied = grpo_outcome(
        scores.to(torch.float32), group_index, num_groups, valid, norm_by_std=norm_by_std, epsilon=std_epsilon
    )
    # One float copy of the mask (verl's is int64; a mixed-dtype product is ~3x slower on a CPU) serves the
    # entropy product and becomes the output, scaled in place: the only (B, T) allocation.
    mask = response_mask.to(torch.float32, copy=True)
    group_entropy, group_valid = compute_group_entropy(
        entropy_source, mask, group_index, num_groups, valid, estimator=estimator
    )
    candidates = candidate_thresholds(*batch_entropy_stats(group_entropy, group_valid), beta_low, beta_high)
    has_groups = bool(group_valid.any())
    if order == "apply_then_update" and thresholds.num_updates > 0:
        h_low, h_high = thresholds.h_low, thresholds.h_high
        if update_state and has_groups:
            thresholds.update(*candidates)
    else:
        if update_state and has_groups:
            thresholds.update(*candidates)
        h_low, h_high = (thresholds.h_low, thresholds.h_high) if thresholds.num_updates > 0 else candidates
    row_entropy = group_entropy.index_select(0, group_index)
    # grpo_outcome gives invalid rows A = 0, which Eq. 7 leaves 0 and never counts as attenuated.
    shaped, positive, negative = shape_advantages(outcome_advantages, row_entropy, h_low, h_high, alpha_low, alpha_high)
    advantages = mask.mul_(shaped[:, None])
    return GepoResult(
        advantages,
        outcome_advantages,
        shaped,
        group_entropy,
        group_valid,
        h_low,
        h_high,
        candidates[0],
        candidates[1],
        positive,
        negative,
        tied,
    )


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
        **advantage_variance_metrics(outcome, shaped, valid, tied[0]),
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


# --- its options -------------------------------------------------------------------------------------------


GEPO_ABLATIONS = ("none", "no_high_entropy_control", "no_low_entropy_control", "symmetric")
EMA_ORDERS = ("update_then_apply", "apply_then_update")


class GepoConfig(EstimatorOptions):
    """Group-entropy-conditioned asymmetric advantage scaling (estimator ``gepo``)."""

    section: ClassVar[str] = NAME
    alpha_low: float = option(
        0.5, ge=0.0, le=1.0, description="factor on positive advantages in confident groups (H_g < H_low); paper 0.5."
    )
    alpha_high: float = option(0.2, ge=0.0, le=1.0, description=(
        "factor on negative advantages in uncertain groups (H_g > H_high); paper 0.2. The paper requires "
        'alpha_high < alpha_low (otherwise responses shrink: "length collapse").'
    ))
    beta_low: float = option(0.2, ge=0.0, description="threshold widths in batch std units (Eq. 8); paper 0.2 and 0.3.")
    beta_high: float = option(0.3, ge=0.0, description="threshold widths in batch std units (Eq. 8); paper 0.2 and 0.3.")
    gamma: float = option(0.01, le=1.0, gt=0.0, reason='would freeze the thresholds forever', description=(
        "EMA rate of the thresholds (Eq. 9); paper 0.01."
    ))
    group_entropy: Literal[GROUP_ENTROPY_ESTIMATORS] = option("token_pooled", description=(
        '"token_pooled" (Eq. 4, default), "response_mean" (mean of per-response mean NLL) or "token_entropy" '
        "(exact per-token entropy instead of the sampled-token NLL)."
    ))
    ema_order: Literal[EMA_ORDERS] = option("update_then_apply", description=(
        '"update_then_apply" (default: this batch updates the EMA, then shapes) or "apply_then_update".'
    ))
    ema_init: Literal[GepoThresholds.INITS] = option("first_batch", description=(
        '"first_batch" (default: seed the EMA with the first candidates) or "zero" (literal Eq. 9; needs '
        "~1/gamma steps to recover)."
    ))
    std_epsilon: float = option(1e-06, ge=0.0, description="epsilon of the unchanged GRPO advantage; verl's 1e-6.")
    resume_without_state: bool = option(False, description=(
        "False (default) makes resuming from a checkpoint that lacks the thresholds an error; True starts the "
        "thresholds afresh instead."
    ))
    ablation: Literal[GEPO_ABLATIONS] = option("none", description=(
        '"none" (default: the method, alpha_high < alpha_low enforced so that a typo cannot invert the '
        "asymmetry), or one of the paper's ablations, named so that the guard is lifted only on purpose: "
        '"no_high_entropy_control" (negatives in uncertain groups not attenuated: needs alpha_high = 1), '
        '"no_low_entropy_control" (positives in confident groups not attenuated: needs alpha_low = 1), '
        '"symmetric" (one factor for both: needs alpha_high = alpha_low).'
    ))

    @model_validator(mode="after")
    def _paper_or_an_ablation(self) -> "GepoConfig":
        if self.ablation == "none" and not self.alpha_high < self.alpha_low:
            raise ValueError(
                f"gepo.alpha_high={self.alpha_high!r} must be < gepo.alpha_low={self.alpha_low!r}: the paper "
                "attenuates negatives in uncertain groups more strongly, otherwise responses shrink (length collapse). "
                f"To run one of the paper's ablations on purpose, set gepo.ablation ({', '.join(GEPO_ABLATIONS[1:])})."
            )
        rule = {
            "no_high_entropy_control": ("alpha_high = 1", self.alpha_high == 1.0),
            "no_low_entropy_control": ("alpha_low = 1 > alpha_high", self.alpha_low == 1.0 > self.alpha_high),
            "symmetric": ("alpha_high = alpha_low", self.alpha_high == self.alpha_low),
        }.get(self.ablation)
        if rule is not None and not rule[1]:
            raise ValueError(
                f"gepo.ablation={self.ablation} needs {rule[0]}; got alpha_low={self.alpha_low!r}, alpha_high={self.alpha_high!r}"
            )
        return self

    @property
    def token_inputs(self) -> tuple[str, ...]:
        """The old policy's per-token entropy with ``group_entropy=token_entropy``, else its log-probs."""
        return ("entropy",) if self.group_entropy == "token_entropy" else ("old_log_probs",)


# --- its declaration ---------------------------------------------------------------------------------------


def compute(batch: GroupBatch, options: GepoConfig, thresholds: GepoThresholds) -> EstimatorOutput:
    """GEPO on one step's batch; every call updates the thresholds' EMA once (verl computes advantages for
    training batches only: validation never reaches an estimator, tested end to end)."""
    source = batch.tokens["entropy" if options.group_entropy == "token_entropy" else "old_log_probs"]
    result = compute_gepo_advantages(
        batch.scores,
        source,
        batch.response_mask,
        batch.group_index,
        batch.num_groups,
        batch.valid,
        thresholds,
        norm_by_std=batch.norm_by_std,
        std_epsilon=options.std_epsilon,
        alpha_low=options.alpha_low,
        alpha_high=options.alpha_high,
        beta_low=options.beta_low,
        beta_high=options.beta_high,
        estimator=options.group_entropy,
        order=options.ema_order,
    )
    outcome = result.shaped_outcome_advantages
    group_entropy = result.group_entropy.index_select(0, batch.group_index)
    return EstimatorOutput(
        result.advantages,
        gepo_step_metrics(result, batch.valid, thresholds.num_updates),
        per_response={
            "group_entropy": group_entropy,
            "outcome": result.outcome_advantages,
            "positive_attenuated": result.positive_attenuated,
            "negative_attenuated": result.negative_attenuated,
        },
        outcome=outcome,
        per_sample={
            "positive_attenuated": result.positive_attenuated.float(),
            "negative_attenuated": result.negative_attenuated.float(),
            "h_low": torch.full_like(outcome, result.h_low),
            "h_high": torch.full_like(outcome, result.h_high),
            "group_entropy": group_entropy,
        },
        extras={"h_low": result.h_low, "h_high": result.h_high, "unshaped_outcome": result.outcome_advantages},
        result=result,
    )


def source_statistics(per_response: Mapping[str, torch.Tensor], rows: torch.Tensor, group_index: torch.Tensor,
                      num_groups: int) -> dict[str, float]:
    """GEPO's statistics of one data source's responses (``rows``), as its step metrics define them for the batch:
    group_entropy_mean (over the source's groups; each response carries its group's entropy), pos_attenuated_frac /
    neg_attenuated_frac (attenuated among the source's positive / negative advantages before shaping)."""
    groups = torch.unique(group_index[rows])
    first = torch.zeros(num_groups, dtype=torch.float32, device=group_index.device)
    first.index_put_((group_index[rows],), per_response["group_entropy"][rows].to(torch.float32))  # one value per group
    outcome = per_response["outcome"][rows]
    return {
        "group_entropy_mean": float(first[groups].mean()),
        "pos_attenuated_frac": float(per_response["positive_attenuated"][rows].sum() / max(1, int((outcome > 0).sum()))),
        "neg_attenuated_frac": float(per_response["negative_attenuated"][rows].sum() / max(1, int((outcome < 0).sum()))),
    }


GEPO = register_estimator(
    Estimator(
        name=NAME,
        description="GEPO's group-entropy-conditioned asymmetric advantage scaling (edge_verl/estimators/gepo.py)",
        config=GepoConfig,
        compute=compute,
        state=lambda options: GepoThresholds(gamma=options.gamma, init=options.ema_init),
        state_key="gepo_thresholds",
        state_label="GEPO thresholds",
        min_groups=MIN_GROUPS,
        source_statistics=source_statistics,
        metrics=(
            Metric("group_entropy_mean", short="GEPO H group", panel="entropy"),
            Metric("h_low", label="GEPO h_low", short="GEPO h_low", panel="statistics"),
            Metric("h_high", label="GEPO h_high", short="GEPO h_high", panel="statistics"),
            Metric("pos_attenuated_frac", label="GEPO positive advantages attenuated", short="GEPO pos att", panel="statistics"),
            Metric("neg_attenuated_frac", label="GEPO negative advantages attenuated", short="GEPO neg att", panel="statistics"),
        ),
    )
)
