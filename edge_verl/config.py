"""Validated configuration, one dataclass per feature. Defaults are the papers' values; every deviation
from the papers or their reference code is a named option whose docstring line says why it exists.

verl users set these under ``algorithm.edge_eda.*`` / ``algorithm.gepo.*`` (``+algorithm.gepo.alpha_low=0.5``
on the command line, or without ``+`` through the Hydra config shipped in ``edge_verl/conf/``).
Errors name the bad key or value and the allowed ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

from edge_verl.algorithms.gec import ANSWER_TEMPLATE, REFLECTION_PHRASE
from edge_verl.algorithms.gepo import GROUP_ENTROPY_ESTIMATORS, GepoThresholds


def _from_mapping(cls, values: Optional[Mapping[str, Any]]):
    values = dict(values or {})
    allowed = {field.name for field in fields(cls)}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown option(s) {unknown}; allowed: {sorted(allowed)}")
    return cls(**values)


def _check_finite(owner: str, name: str, value: Any, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}.{name}={value!r} must be a finite number")
    if low is not None and value < low:
        raise ValueError(f"{owner}.{name}={value!r} must be >= {low}")
    if high is not None and value > high:
        raise ValueError(f"{owner}.{name}={value!r} must be <= {high}")
    return float(value)


def _check_choice(owner: str, name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{owner}.{name}={value!r}; allowed: {list(allowed)}")


@dataclass(frozen=True)
class EdaConfig:
    """Entropy-Driven Advantage (estimator ``edge_eda``).

    std_epsilon: added to the group std in A_i; 1e-4 as in the EDGE-GRPO reference code (verl's GRPO uses 1e-6).
    entropy_epsilon: guard, not in the paper: P_hat is floored here and groups whose mean entropy is at most
        this are left unscaled, so zero entropy never divides by zero.
    ratio_clamp: optional [low, high] bound on P_hat; None (default) = the final reference code, which has no
        clamp; the paper's first code version used [0.1, 10].
    """

    std_epsilon: float = 1e-4
    entropy_epsilon: float = 1e-6
    ratio_clamp: Optional[tuple[float, float]] = None

    def __post_init__(self) -> None:
        _check_finite("edge_eda", "std_epsilon", self.std_epsilon, low=0.0)
        _check_finite("edge_eda", "entropy_epsilon", self.entropy_epsilon, low=0.0)
        if self.entropy_epsilon <= 0:
            raise ValueError(f"edge_eda.entropy_epsilon={self.entropy_epsilon!r} must be > 0")
        if self.ratio_clamp is not None:
            clamp = tuple(self.ratio_clamp)
            if len(clamp) != 2:
                raise ValueError(f"edge_eda.ratio_clamp={self.ratio_clamp!r} must be [low, high] or null")
            low = _check_finite("edge_eda", "ratio_clamp[0]", clamp[0])
            high = _check_finite("edge_eda", "ratio_clamp[1]", clamp[1])
            if not 0 < low < high:
                raise ValueError(f"edge_eda.ratio_clamp={self.ratio_clamp!r} needs 0 < low < high")
            object.__setattr__(self, "ratio_clamp", (low, high))

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "EdaConfig":
        return _from_mapping(cls, values)


@dataclass(frozen=True)
class GepoConfig:
    """Group-entropy-conditioned asymmetric advantage scaling (estimator ``gepo``).

    alpha_low: factor on positive advantages in confident groups (H_g < H_low); paper 0.5.
    alpha_high: factor on negative advantages in uncertain groups (H_g > H_high); paper 0.2. The paper
        requires alpha_high < alpha_low (otherwise responses shrink: "length collapse").
    beta_low, beta_high: threshold widths in batch std units (Eq. 8); paper 0.2 and 0.3.
    gamma: EMA rate of the thresholds (Eq. 9); paper 0.01.
    group_entropy: "token_pooled" (Eq. 4, default), "response_mean" (mean of per-response mean NLL) or
        "token_entropy" (exact per-token entropy instead of the sampled-token NLL).
    ema_order: "update_then_apply" (default: this batch updates the EMA, then shapes) or "apply_then_update".
    ema_init: "first_batch" (default: seed the EMA with the first candidates) or "zero" (literal Eq. 9;
        needs ~1/gamma steps to recover).
    std_epsilon: epsilon of the unchanged GRPO advantage; verl's 1e-6.
    resume_without_state: False (default) makes resuming from a checkpoint that lacks the thresholds an
        error; True starts the thresholds afresh instead.
    """

    alpha_low: float = 0.5
    alpha_high: float = 0.2
    beta_low: float = 0.2
    beta_high: float = 0.3
    gamma: float = 0.01
    group_entropy: str = "token_pooled"
    ema_order: str = "update_then_apply"
    ema_init: str = "first_batch"
    std_epsilon: float = 1e-6
    resume_without_state: bool = False

    def __post_init__(self) -> None:
        for name in ("alpha_low", "alpha_high"):
            _check_finite("gepo", name, getattr(self, name), low=0.0, high=1.0)
        for name in ("beta_low", "beta_high"):
            _check_finite("gepo", name, getattr(self, name), low=0.0)
        _check_finite("gepo", "gamma", self.gamma, low=0.0, high=1.0)
        if self.gamma == 0:
            raise ValueError("gepo.gamma=0 would freeze the thresholds forever; it must be in (0, 1]")
        if not self.alpha_high < self.alpha_low:
            raise ValueError(
                f"gepo.alpha_high={self.alpha_high!r} must be < gepo.alpha_low={self.alpha_low!r}: the paper "
                "attenuates negatives in uncertain groups more strongly, otherwise responses shrink (length collapse)"
            )
        _check_finite("gepo", "std_epsilon", self.std_epsilon, low=0.0)
        _check_choice("gepo", "group_entropy", self.group_entropy, GROUP_ENTROPY_ESTIMATORS)
        _check_choice("gepo", "ema_order", self.ema_order, ("update_then_apply", "apply_then_update"))
        _check_choice("gepo", "ema_init", self.ema_init, GepoThresholds.INITS)
        if not isinstance(self.resume_without_state, bool):
            raise ValueError(f"gepo.resume_without_state={self.resume_without_state!r} must be true or false")

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "GepoConfig":
        return _from_mapping(cls, values)


@dataclass(frozen=True)
class GecConfig:
    """Guided Error Correction (agent loop ``edge_gec``), options under ``algorithm.edge_gec``.

    enable: GEC's one switch (default off). When on, the training data must mark its rows for the
        ``edge_gec`` agent loop (``agent_name`` column; scripts/prepare_data.py writes *_gec.parquet) and
        rollout log-probs must be off; when off, data with such rows is refused. Both checked before the
        first rollout.
    probabilities: [regenerate, inject_answer, replace_solution]; paper [0.5, 0.25, 0.25].
    force_regenerate: the paper's Force-R ablation (regenerate with probability 1); overrides probabilities.
    scope: "every_incorrect" (paper: every incorrect response) or "all_wrong_groups" (only groups in which
        no response is correct).
    continuation_tokens: budget of the regenerate branch; paper 256 (always also capped so the whole
        response stays within rollout.response_length).
    reflection_phrase / answer_template: the paper's texts; answer_template must contain "{answer}".
    missing_solution: what a replace_solution draw does for a row without a reference solution: "regenerate"
        (default; counted in metrics as a fallback), "inject_answer", or "skip" (leave the response as is).
    correct_threshold: a response whose reward score exceeds this counts as correct (binary reward: 0.5).
    seed: seeds the per-response random source together with uid and sample index; paper seed 42.
    group_timeout_s: in "all_wrong_groups" mode, how long a response waits for its siblings' verdicts.
    """

    enable: bool = False
    probabilities: tuple[float, float, float] = (0.5, 0.25, 0.25)
    force_regenerate: bool = False
    scope: str = "every_incorrect"
    continuation_tokens: int = 256
    reflection_phrase: str = REFLECTION_PHRASE
    answer_template: str = ANSWER_TEMPLATE
    missing_solution: str = "regenerate"
    correct_threshold: float = 0.5
    seed: int = 42
    group_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("enable", "force_regenerate"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"edge_gec.{name}={getattr(self, name)!r} must be true or false")
        probabilities = tuple(self.probabilities)
        if len(probabilities) != 3:
            raise ValueError(f"edge_gec.probabilities={self.probabilities!r} needs 3 values [regenerate, inject_answer, replace_solution]")
        for index, value in enumerate(probabilities):
            _check_finite("edge_gec", f"probabilities[{index}]", value, low=0.0, high=1.0)
        if abs(sum(probabilities) - 1.0) > 1e-6:
            raise ValueError(f"edge_gec.probabilities={self.probabilities!r} must sum to 1")
        if self.force_regenerate:
            probabilities = (1.0, 0.0, 0.0)
        object.__setattr__(self, "probabilities", tuple(float(p) for p in probabilities))
        _check_choice("edge_gec", "scope", self.scope, ("every_incorrect", "all_wrong_groups"))
        _check_choice("edge_gec", "missing_solution", self.missing_solution, ("regenerate", "inject_answer", "skip"))
        if isinstance(self.continuation_tokens, bool) or not isinstance(self.continuation_tokens, int) or self.continuation_tokens < 1:
            raise ValueError(f"edge_gec.continuation_tokens={self.continuation_tokens!r} must be an integer >= 1")
        if not isinstance(self.reflection_phrase, str) or not self.reflection_phrase:
            raise ValueError("edge_gec.reflection_phrase must be a non-empty string")
        if not isinstance(self.answer_template, str) or "{answer}" not in self.answer_template:
            raise ValueError(f"edge_gec.answer_template={self.answer_template!r} must contain '{{answer}}'")
        _check_finite("edge_gec", "correct_threshold", self.correct_threshold)
        _check_finite("edge_gec", "group_timeout_s", self.group_timeout_s, low=0.001)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"edge_gec.seed={self.seed!r} must be an integer")

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "GecConfig":
        return _from_mapping(cls, values)


@dataclass(frozen=True)
class MetricsConfig:
    """Extra metrics for any estimator, verl's built-ins included (options under ``algorithm.edge_metrics``).

    advantage_stats: log ``edge_verl/adv/var`` (unbiased variance of the per-response advantages) and
        ``edge_verl/adv/zero_variance_group_frac`` every step, whatever ``algorithm.adv_estimator`` is, so
        GRPO and EDGE curves are comparable (EDGE-GRPO Fig. 5). Off by default: with the plugin installed, a
        plain verl run logs nothing extra unless asked; the recipes switch it on.
    """

    advantage_stats: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.advantage_stats, bool):
            raise ValueError(f"edge_metrics.advantage_stats={self.advantage_stats!r} must be true or false")

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "MetricsConfig":
        return _from_mapping(cls, values)
