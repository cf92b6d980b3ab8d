"""Validated configuration, one dataclass per feature. Defaults are the papers' values; every deviation
from the papers or their reference code is a named option whose docstring line says why it exists.

verl users set these under ``algorithm.edge_eda.*`` / ``algorithm.gepo.*`` (``+algorithm.gepo.alpha_low=0.5``
on the command line, or without ``+`` through the Hydra config shipped in ``edge_verl/conf/``).
Errors name the bad key or value and the allowed ones.

Each option is described once, in its class docstring (``name: text``, continued on indented lines), and its
bounds or allowed values are declared once, on its field (``_option``): validation checks what the field
declares (``_check_declared``, by the field's type), ``__post_init__`` adds what one field cannot say (a
list's shape, a relation between two options), and docs/options.md prints both (``option_specs``,
``edge_verl/options_page.py``).
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Mapping, NamedTuple, Optional, get_args, get_origin, get_type_hints

from edge_verl.algorithms.gec import ANSWER_TEMPLATE, INJECTED_LOSSES, REFLECTION_PHRASE
from edge_verl.algorithms.gepo import GROUP_ENTROPY_ESTIMATORS, GepoThresholds


# verl's epsilon in GRPO's std normalisation (core_algos.compute_grpo_outcome_advantage), for estimators without one.
VERL_GRPO_EPSILON = 1e-6


class EstimatorOptions:
    """What the plugin reads off any estimator's options besides the estimator itself (the integration's
    ``Estimator`` entries, ``integration/estimators.py``); the defaults are GRPO's. An estimator's config
    class derives from it and overrides what differs:

    token_inputs: the per-token inputs (B, T) the estimator reads with these options, among "entropy" (the old
        policy's) and "old_log_probs".
    std_epsilon: the epsilon of its GRPO normalisation (GEC's statistics of the responses as sampled use it).
    resume_without_state: a checkpoint without its training state is accepted (the state starts afresh)
        rather than an error.
    loss_option: the option that moves the estimator's work into the actor loss (e.g.
        "algorithm.edge_eda.entropy_gradient=True"), None when these options leave the loss to verl.
    """

    token_inputs = ()
    std_epsilon = VERL_GRPO_EPSILON
    resume_without_state = False
    loss_option = None


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


def _check_integer(owner: str, name: str, value: Any, low: int | None = None, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        wanted = "an integer" + (f" >= {low}" if low is not None else "") + (" or null" if optional else "")
        raise ValueError(f"{owner}.{name}={value!r} must be {wanted}")


def _check_choice(owner: str, name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{owner}.{name}={value!r}; allowed: {list(allowed)}")


def _option(default: Any, *, low: float | None = None, high: float | None = None, above: float | None = None,
            choices: tuple[str, ...] | None = None, reason: str = "") -> Any:
    """A dataclass field with its declared bounds (a number: ``low <= value <= high``, ``value > above``; an
    integer: ``value >= low``) or allowed values (a string: ``choices``); ``reason`` says why ``above`` holds."""
    declared = {"low": low, "high": high, "above": above, "choices": choices, "reason": reason or None}
    return field(default=default, metadata={key: value for key, value in declared.items() if value is not None})


def _field_type(hint: Any) -> tuple[Any, bool]:
    """(the type, whether null is allowed) of a field's annotation: ``Optional[int]`` -> (int, True)."""
    arguments = get_args(hint)
    if type(None) in arguments:
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        return inner, True
    return hint, False


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, tuple[Any, bool]]:
    return {name: _field_type(hint) for name, hint in get_type_hints(cls).items()}


def _check_declared(config: Any, owner: str) -> None:
    """Check every field of ``config`` against its type and what it declares (``_option``): true or false, a
    finite number within its bounds, an integer at least its ``low``, one of its ``choices``; null where the
    type is Optional. Fields of other types (lists, free text) are checked by their class's ``__post_init__``."""
    for item in fields(config):
        value, (kind, optional), declared = getattr(config, item.name), _field_types(type(config))[item.name], item.metadata
        if optional and value is None:
            continue
        if kind is bool and not isinstance(value, bool):
            raise ValueError(f"{owner}.{item.name}={value!r} must be true or false")
        if kind is float:
            _check_finite(owner, item.name, value, declared.get("low"), declared.get("high"))
            above = declared.get("above")
            if above is not None and not value > above:
                why = f"{declared['reason']}; it " if "reason" in declared else ""
                raise ValueError(f"{owner}.{item.name}={value!r} {why}must be > {above}")
        if kind is int:
            _check_integer(owner, item.name, value, declared.get("low"), optional)
        if kind is str and "choices" in declared:
            _check_choice(owner, item.name, value, declared["choices"])


@dataclass(frozen=True)
class EdaConfig(EstimatorOptions):
    """Entropy-Driven Advantage (estimator ``edge_eda``).

    std_epsilon: added to the group std in A_i; 1e-4 as in the EDGE-GRPO reference code (verl's GRPO uses 1e-6).
    entropy_epsilon: guard, not in the paper: P_hat is floored here and groups whose mean entropy is at most
        this are left unscaled, so zero entropy never divides by zero.
    ratio_clamp: optional [low, high] bound on P_hat; None (default) = the final reference code, which has no
        clamp; the paper's first code version used [0.1, 10].
    entropy_gradient: False (default) = the detached form (a constant advantage from the old policy's
        entropy, what both third-party ports do); True = the reference code's form, with gradient through the
        current policy's entropy inside the actor loss (both explained in edge_verl/algorithms/eda.py). The
        EDGE recipes set True. It needs actor_rollout_ref.actor.calculate_entropy=True (checked before the
        first rollout). Off by default because it changes the actor's loss and costs memory and an entropy
        backward in every update.
    """

    std_epsilon: float = _option(1e-4, low=0.0)
    entropy_epsilon: float = _option(1e-6, above=0.0)
    ratio_clamp: Optional[tuple[float, float]] = None
    entropy_gradient: bool = False

    def __post_init__(self) -> None:
        _check_declared(self, "edge_eda")
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

    token_inputs = ("entropy",)

    @property
    def loss_option(self) -> Optional[str]:
        return "algorithm.edge_eda.entropy_gradient=True" if self.entropy_gradient else None


GEPO_ABLATIONS = ("none", "no_high_entropy_control", "no_low_entropy_control", "symmetric")


@dataclass(frozen=True)
class GepoConfig(EstimatorOptions):
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

    alpha_low: float = _option(0.5, low=0.0, high=1.0)
    alpha_high: float = _option(0.2, low=0.0, high=1.0)
    beta_low: float = _option(0.2, low=0.0)
    beta_high: float = _option(0.3, low=0.0)
    gamma: float = _option(0.01, above=0.0, high=1.0, reason="would freeze the thresholds forever")
    group_entropy: str = _option("token_pooled", choices=GROUP_ENTROPY_ESTIMATORS)
    ema_order: str = _option("update_then_apply", choices=("update_then_apply", "apply_then_update"))
    ema_init: str = _option("first_batch", choices=GepoThresholds.INITS)
    std_epsilon: float = _option(1e-6, low=0.0)
    resume_without_state: bool = False
    ablation: str = _option("none", choices=GEPO_ABLATIONS)

    def __post_init__(self) -> None:
        _check_declared(self, "gepo")
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

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "GepoConfig":
        return _from_mapping(cls, values)

    @property
    def token_inputs(self) -> tuple[str, ...]:
        return ("entropy",) if self.group_entropy == "token_entropy" else ("old_log_probs",)


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
    seed: seeds GEC's per-response random source together with the response's identity (its sampling seed,
        ``algorithm.edge_seeding``); paper seed 42.
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
    scope: str = _option("every_incorrect", choices=("every_incorrect", "all_wrong_groups"))
    continuation_tokens: int = _option(256, low=1)
    first_sample_tokens: Optional[int] = _option(None, low=1)
    max_prompt_tokens: Optional[int] = _option(256, low=1)
    reflection_phrase: str = REFLECTION_PHRASE
    answer_template: str = ANSWER_TEMPLATE
    missing_solution: str = _option("regenerate", choices=("regenerate", "inject_answer", "skip"))
    correct_threshold: float = 0.5
    seed: int = 42
    group_timeout_s: float = _option(600.0, low=0.001)
    injected_loss: str = _option("surrogate", choices=INJECTED_LOSSES)
    sft_coef: float = _option(1.0, low=0.0)
    answer_source: str = _option("gold", choices=ANSWER_SOURCES)
    placebo_reward: str = _option("as_gold", choices=PLACEBO_REWARDS)
    first_attempt: str = _option("keep", choices=FIRST_ATTEMPTS)

    def __post_init__(self) -> None:
        _check_declared(self, "edge_gec")
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
        if not isinstance(self.reflection_phrase, str) or not self.reflection_phrase:
            raise ValueError("edge_gec.reflection_phrase must be a non-empty string")
        if not isinstance(self.answer_template, str) or "{answer}" not in self.answer_template:
            raise ValueError(f"edge_gec.answer_template={self.answer_template!r} must contain '{{answer}}'")
        if self.injected_loss != "sft" and self.sft_coef != 1.0:
            raise ValueError(f"edge_gec.sft_coef={self.sft_coef!r} is read only with edge_gec.injected_loss=sft")
        if self.answer_source != "placebo" and self.placebo_reward != PLACEBO_REWARDS[0]:
            raise ValueError(
                f"edge_gec.placebo_reward={self.placebo_reward!r} is read only with edge_gec.answer_source=placebo "
                f"(here {self.answer_source!r}): the gold answer is graded as it is; set answer_source=placebo or drop placebo_reward."
            )

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "GecConfig":
        return _from_mapping(cls, values)


class _Switches:
    """A section whose fields need only what they declare (``_check_declared``): its checks and its
    ``from_mapping`` (unknown keys refused), under the section's name."""

    section: ClassVar[str]

    def __post_init__(self) -> None:
        _check_declared(self, self.section)

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]):
        return _from_mapping(cls, values)


@dataclass(frozen=True)
class MetricsConfig(_Switches):
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

    section: ClassVar[str] = "edge_metrics"
    advantage_stats: bool = False
    per_source: bool = False


@dataclass(frozen=True)
class SeedingConfig(_Switches):
    """Reproducible runs, options under ``algorithm.edge_seeding``: the same command gives the same run.

    enable: on (default) in every run that uses the plugin; a plain verl run (GRPO) gets it with
        ``+algorithm.edge_seeding.enable=True``, so that a baseline beside EDGE or GEPO is seeded the same way
        (otherwise the pair is not paired). When on: each response is sampled with a seed of its own, a function
        of ``actor_rollout_ref.rollout.seed``, the global step, the prompt's identity (``data_source``,
        ``extra_info.index`` and the prompt itself) and the response's index in its group, carried as the request's
        ``seed`` sampling parameter (vLLM builds a generator per request from it; so does the CPU rollout), so
        the n samples of a prompt differ and none depends on timing or arrival order; GEC's choices and its
        continuation's sampling are keyed on that seed, not on verl's random uid; and verl's v1 trainer orders
        the update batch by (prompt, sample index) before it cuts mini-batches, instead of completion order.
        Off: verl's sampling as it is (vLLM: one stream per engine, or with ``rollout.full_determinism`` one seed
        per replica for every request, which gives a prompt's n samples the same tokens).
    """

    section: ClassVar[str] = "edge_seeding"
    enable: bool = True


# --- the options as docs/options.md lists them (edge_verl/options_page.py) ---


class OptionSpec(NamedTuple):
    """One option as docs/options.md lists it: its field name, type, default, the values its field declares
    (empty: any value of its type; ``__post_init__`` may say more) and its description from the class docstring."""

    name: str
    type: str
    default: Any
    allowed: str
    doc: str


# A docstring line that starts an option's description: "name: text", "a, b: text" or "a / b: text" (see _descriptions).
_DESCRIPTION = re.compile(r"([a-z_]+(?:(?:, | / )[a-z_]+)*): (.*)")


def _descriptions(cls: type) -> dict[str, str]:
    """Each field's description in ``cls``'s docstring: a line ``name: text`` at the docstring's indentation
    (or ``a, b: text`` / ``a / b: text`` for several), continued by the more indented lines below it."""
    found: dict[str, str] = {}
    names, text = None, []
    for line in [*inspect.cleandoc(cls.__doc__ or "").splitlines(), ""]:
        if names is not None and line.startswith(" ") and line.strip():
            text.append(line.strip())
            continue
        if names is not None:
            found.update(dict.fromkeys(names, " ".join(text)))
            names = None
        start = _DESCRIPTION.fullmatch(line)
        if start is not None:
            names, text = re.split(r", | / ", start.group(1)), [start.group(2)]
    return found


def _type_text(kind: Any) -> str:
    if get_origin(kind) is tuple:
        return "[" + ", ".join(_type_text(argument) for argument in get_args(kind)) + "]"
    return kind.__name__


def _allowed_text(kind: Any, optional: bool, declared: Mapping[str, Any]) -> str:
    if kind is bool:
        text = "true, false"
    elif kind is float:
        low, high, above = declared.get("low"), declared.get("high"), declared.get("above")
        if high is None:
            text = f">= {low}" if low is not None else f"> {above}" if above is not None else "any finite number"
        else:
            text = f"[{low}, {high}]" if low is not None else f"({above}, {high}]" if above is not None else f"<= {high}"
    elif kind is int:
        text = f">= {declared['low']}" if "low" in declared else "any integer"
    elif "choices" in declared:
        text = ", ".join(f"`{choice}`" for choice in declared["choices"])
    else:
        return ""
    return text + (", null" if optional else "")


def option_specs(cls: type) -> list[OptionSpec]:
    """Every field of the config class ``cls`` as docs/options.md lists it, in field order; a field its
    docstring does not describe is an error."""
    described = _descriptions(cls)
    missing = [item.name for item in fields(cls) if item.name not in described]
    if missing:
        raise ValueError(f"{cls.__name__}: no description of {missing} in its docstring ('name: text' lines)")
    specs = []
    for item in fields(cls):
        kind, optional = _field_types(cls)[item.name]
        default = item.default if item.default is not MISSING else item.default_factory()
        type_text = _type_text(kind) + (" or null" if optional else "")
        specs.append(OptionSpec(item.name, type_text, default, _allowed_text(kind, optional, item.metadata), described[item.name]))
    return specs
