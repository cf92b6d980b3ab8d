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

from edge_verl.algorithms.gec import ANSWER_TEMPLATE, INJECTED_LOSSES, REFLECTION_PHRASE
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


def _check_count(owner: str, name: str, value: Any, optional: bool) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}.{name}={value!r} must be an integer >= 1" + (" or null" if optional else ""))


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
    entropy_gradient: False (default) = the detached form: the advantage is computed once from the old
        policy's entropy, a constant in the loss (what both third-party ports do; needs nothing from the
        actor). True = the reference code's form: inside the actor loss the advantage is A_i / P_hat_i(theta)
        with the CURRENT policy's response entropy, so gradient flows through P_i (the normaliser stays
        detached: the old policy's group mean). The EDGE recipes set True. It needs the entropy in the loss
        (actor_rollout_ref.actor.calculate_entropy=True; checked before the first rollout). Off by default
        because it changes the actor's loss and costs an entropy forward/backward in every update.
    """

    std_epsilon: float = 1e-4
    entropy_epsilon: float = 1e-6
    ratio_clamp: Optional[tuple[float, float]] = None
    entropy_gradient: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.entropy_gradient, bool):
            raise ValueError(f"edge_eda.entropy_gradient={self.entropy_gradient!r} must be true or false")
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


GEPO_ABLATIONS = ("none", "no_high_entropy_control", "no_low_entropy_control", "symmetric")


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
    ablation: "none" (default: the method, alpha_high < alpha_low enforced so that a typo cannot invert the
        asymmetry), or one of the paper's ablations, named so that the guard is lifted only on purpose:
        "no_high_entropy_control" (negatives in uncertain groups not attenuated: needs alpha_high = 1),
        "no_low_entropy_control" (positives in confident groups not attenuated: needs alpha_low = 1),
        "symmetric" (one factor for both: needs alpha_high = alpha_low).
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
    ablation: str = "none"

    def __post_init__(self) -> None:
        for name in ("alpha_low", "alpha_high"):
            _check_finite("gepo", name, getattr(self, name), low=0.0, high=1.0)
        for name in ("beta_low", "beta_high"):
            _check_finite("gepo", name, getattr(self, name), low=0.0)
        _check_finite("gepo", "gamma", self.gamma, low=0.0, high=1.0)
        if self.gamma == 0:
            raise ValueError("gepo.gamma=0 would freeze the thresholds forever; it must be in (0, 1]")
        _check_choice("gepo", "ablation", self.ablation, GEPO_ABLATIONS)
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
        _check_finite("gepo", "std_epsilon", self.std_epsilon, low=0.0)
        _check_choice("gepo", "group_entropy", self.group_entropy, GROUP_ENTROPY_ESTIMATORS)
        _check_choice("gepo", "ema_order", self.ema_order, ("update_then_apply", "apply_then_update"))
        _check_choice("gepo", "ema_init", self.ema_init, GepoThresholds.INITS)
        if not isinstance(self.resume_without_state, bool):
            raise ValueError(f"gepo.resume_without_state={self.resume_without_state!r} must be true or false")

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "GepoConfig":
        return _from_mapping(cls, values)


ANSWER_SOURCES = ("gold", "placebo")
PLACEBO_REWARDS = ("as_gold", "graded")
FIRST_ATTEMPTS = ("keep", "drop")


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
    first_sample_tokens: the first sample's own cap (the loop passes it as max_tokens), so that a correction
        can grow past it: the reference samples up to 1024 tokens, then appends the phrase and up to 256 more.
        The recipes set 1024 with rollout.response_length = 1024 + continuation_tokens + 32 (room for the
        phrase; the fit is checked before the first rollout, and with the phrase's token count when the
        loop starts). None (default) = the first sample
        may use all of rollout.response_length and corrections are cut to fit in it, so a response truncated
        at the cap gets almost no continuation: a deviation kept because the default cannot know the
        run's lengths (1024 would not fit most response_length settings).
    max_prompt_tokens: only prompts SHORTER than this many tokens (chat template included) are corrected, as
        in the reference (``if prompt_length < 256``); longer ones are left as sampled and counted
        (gec/prompt_too_long). None = correct every prompt.
    reflection_phrase / answer_template: the paper's texts; answer_template must contain "{answer}".
    missing_solution: what a replace_solution draw does for a row without a reference solution: "regenerate"
        (default; counted in metrics as a fallback), "inject_answer", or "skip" (leave the response as is).
    correct_threshold: a response whose reward score exceeds this counts as correct (binary reward: 0.5).
    seed: seeds the per-response random source together with uid and sample index; paper seed 42.
    group_timeout_s: in "all_wrong_groups" mode, how long a response waits for its siblings' verdicts.

    The reviewers' controls (defaults = the paper; each a named deviation for testing a claim):
    injected_loss: how the actor trains the tokens GEC wrote and the policy did not sample (the phrase,
        the injected answer, the replaced solution; a regeneration's continuation IS sampled).
        "surrogate" (paper): through the GRPO surrogate like every token. "masked": no policy gradient
        through them (their advantage is 0 and their log-prob detached inside the loss), the group's
        rewards and every advantage unchanged. "sft": no surrogate through them; instead a separate
        token-mean NLL over them, times ``sft_coef``.
    sft_coef: coefficient of that NLL term (injected_loss="sft" only); 1.0.
    answer_source: "gold" (paper: the row's own answer and reference solution) or "placebo" (the answer
        and solution of another training problem, drawn with the per-response seed among problems whose
        answer grades wrong against this row's gold; a response with no such problem is left as sampled,
        reason "no_placebo").
    placebo_reward: the reward of a placebo-corrected response (read only with answer_source=placebo).
        "as_gold" (default): what its gold twin earns, the same branch on the same first sample with this
        row's own answer / solution, graded by the run's reward function as verl's reward loop would grade
        it (``integration.gec_agent_loop``); a placebo is applied only where its twin fits, as the gold run's
        correction is. A corrected response is then rewarded as EDGE would reward it, so only the injected
        content differs: the placebo that tests "the right answer is what helps", hence the default. Needs verl's
        ``naive`` reward manager and no reward model (checked before Ray starts). "graded": the response is
        scored like any other, against this row's gold, so 0 (its candidates are chosen to grade wrong):
        corrected responses count as wrong, so reward and content both differ from EDGE (the arm published
        as edge_placebo before this option; method ``edge_placebo_graded``). "graded" with answer_source=gold
        is an error.
    first_attempt: "keep" (paper: the regenerate and inject_answer branches append to the model's own
        wrong first response) or "drop" (the corrected response is the phrase + continuation, or the
        answer text alone), to test whether keeping the wrong first answer in a response rewarded 1 hurts.
    """

    enable: bool = False
    probabilities: tuple[float, float, float] = (0.5, 0.25, 0.25)
    force_regenerate: bool = False
    scope: str = "every_incorrect"
    continuation_tokens: int = 256
    first_sample_tokens: Optional[int] = None
    max_prompt_tokens: Optional[int] = 256
    reflection_phrase: str = REFLECTION_PHRASE
    answer_template: str = ANSWER_TEMPLATE
    missing_solution: str = "regenerate"
    correct_threshold: float = 0.5
    seed: int = 42
    group_timeout_s: float = 600.0
    injected_loss: str = "surrogate"
    sft_coef: float = 1.0
    answer_source: str = "gold"
    placebo_reward: str = "as_gold"
    first_attempt: str = "keep"

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
        _check_count("edge_gec", "continuation_tokens", self.continuation_tokens, optional=False)
        _check_count("edge_gec", "first_sample_tokens", self.first_sample_tokens, optional=True)
        _check_count("edge_gec", "max_prompt_tokens", self.max_prompt_tokens, optional=True)
        if not isinstance(self.reflection_phrase, str) or not self.reflection_phrase:
            raise ValueError("edge_gec.reflection_phrase must be a non-empty string")
        if not isinstance(self.answer_template, str) or "{answer}" not in self.answer_template:
            raise ValueError(f"edge_gec.answer_template={self.answer_template!r} must contain '{{answer}}'")
        _check_finite("edge_gec", "correct_threshold", self.correct_threshold)
        _check_finite("edge_gec", "group_timeout_s", self.group_timeout_s, low=0.001)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"edge_gec.seed={self.seed!r} must be an integer")
        _check_choice("edge_gec", "injected_loss", self.injected_loss, INJECTED_LOSSES)
        _check_finite("edge_gec", "sft_coef", self.sft_coef, low=0.0)
        if self.injected_loss != "sft" and self.sft_coef != 1.0:
            raise ValueError(f"edge_gec.sft_coef={self.sft_coef!r} is read only with edge_gec.injected_loss=sft")
        _check_choice("edge_gec", "answer_source", self.answer_source, ANSWER_SOURCES)
        _check_choice("edge_gec", "placebo_reward", self.placebo_reward, PLACEBO_REWARDS)
        if self.answer_source != "placebo" and self.placebo_reward != PLACEBO_REWARDS[0]:
            raise ValueError(
                f"edge_gec.placebo_reward={self.placebo_reward!r} is read only with edge_gec.answer_source=placebo "
                f"(here {self.answer_source!r}): the gold answer is graded as it is; set answer_source=placebo or drop placebo_reward."
            )
        _check_choice("edge_gec", "first_attempt", self.first_attempt, FIRST_ATTEMPTS)

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "GecConfig":
        return _from_mapping(cls, values)


@dataclass(frozen=True)
class MetricsConfig:
    """Extra metrics for any estimator, verl's built-ins included (options under ``algorithm.edge_metrics``).

    advantage_stats: log ``edge_verl/adv/var`` (unbiased variance of the per-response advantages) and
        ``edge_verl/adv/zero_variance_group_frac`` every step, whatever ``algorithm.adv_estimator`` is, so
        GRPO and EDGE curves are comparable (EDGE-GRPO Fig. 5). Off by default: with the plugin installed, a
        plain verl run logs nothing extra unless asked, and the plugin's estimators report the same two
        values under their own names (``edge_verl/<estimator>/adv_var_after``, ``.../zero_variance_group_frac``)
        at no extra cost; the recipes switch it on.
    per_source: log every step's training statistics split by the responses' ``data_source`` (the tasks of
        a mixture, GEPO's setting), ``edge_verl/by_source/<data_source>/<stat>``: sampled reward and
        accuracy, all-wrong / all-right / tied group fractions, response length, the sampled tokens' entropy
        estimate (mean -log pi_old) and, under GEPO, each source's mean group entropy and attenuated
        fractions (``edge_verl.algorithms.group_stats.per_source_statistics``). Off by default (one more
        read of the batch per step on verl's v1 trainer); ``edge-verl study`` switches it on for a mixture.
    """

    advantage_stats: bool = False
    per_source: bool = False

    def __post_init__(self) -> None:
        for name in ("advantage_stats", "per_source"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"edge_metrics.{name}={getattr(self, name)!r} must be true or false")

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "MetricsConfig":
        return _from_mapping(cls, values)
