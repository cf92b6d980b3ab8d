"""What each training method IS, as data: the verl overrides that make a run EDGE-GRPO, GEPO, one of their
ablations or a baseline, written once here and read by every launcher. No verl import.

Readers: the recipe writer (``edge_verl/recipes.py`` writes each method's overrides into its recipes,
literally, with ``method_override_parts``), the demo (``edge-verl demo --algorithm NAME``), ``edge-verl
reproduce`` (a table row names its method, which says which training file it reads) and ``edge-verl
method-overrides`` (one run's overrides, for a command of your own).

A method fixes its advantage estimator, whether it runs EDA (the ``edge_eda`` estimator) and GEC (and so
trains on the ``*_gec.parquet`` rows marked ``agent_name=edge_gec``), Force-R, any further fixed Hydra
options, and the training setups (the recipes' KNOBS) it is run with. What varies per run (the seed, EDA's
form, GEC's token budgets, GEPO's symmetric factor) is an argument of ``method_overrides``. What a method
does NOT fix: model, data set, backend and batch sizes (the recipe's, edge_verl/recipes.py).
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from edge_verl.estimators import names as estimator_names
from edge_verl.algorithms import GEC_AGENT_LOOP

GRPO = "grpo"  # verl's built-in estimator, the baseline of both papers
EDA_ESTIMATOR, GEPO_ESTIMATOR = "edge_eda", "gepo"  # the estimators the papers' methods use (edge_verl/estimators/)
KNOBS = ("edge", "gepo")  # whose training setup (edge_verl/recipes.py's TRAINING_SETUPS): EDGE-GRPO's or GEPO's
EDA_FORMS = ("gradient", "detached")  # algorithm.edge_eda.entropy_gradient true / false
GEC_FILE_SUFFIX = "_gec"  # scripts/prepare_data.py writes train_<set>_gec.parquet next to train_<set>.parquet
SYMMETRIC_ALPHA = 0.5  # gepo_symmetric: one factor for both sides (GEPO's positive one)

# EDA in the run's form: the gradient form rescales the advantage inside the actor loss with the current
# entropy, which the update must compute (calculate_entropy); the detached form needs neither.
EDA_OPTIONS = (
    "+algorithm.edge_eda.entropy_gradient={entropy_gradient}",
    "actor_rollout_ref.actor.calculate_entropy={entropy_gradient}",
)
# GEC: one switch (edge_gec.enable); injected tokens have no rollout log-probs, so those are off; the first
# sample is capped so that a correction can grow past it (the recipes size the response to fit).
GEC_OPTIONS = (
    "actor_rollout_ref.rollout.calculate_log_probs=False",
    "+algorithm.edge_gec.enable=True",
    "+algorithm.edge_gec.seed={seed}",
    "+algorithm.edge_gec.first_sample_tokens={first_sample_tokens}",
    "+algorithm.edge_gec.continuation_tokens={continuation_tokens}",
)
FORCE_REGENERATE_OPTIONS = ("+algorithm.edge_gec.force_regenerate=True",)
# Every RL method, verl's GRPO included, samples each response with a seed of its own keyed on the run's seed
# (algorithm.edge_seeding): the same command gives the same run, and a baseline is paired with its method.
SEEDING_OPTIONS = ("+algorithm.edge_seeding.enable=True", "actor_rollout_ref.rollout.seed={seed}")
# The run parameters an option may name as {field} (method_overrides fills them in).
RUN_PARAMETERS = ("seed", "entropy_gradient", "first_sample_tokens", "continuation_tokens", "gepo_symmetric_alpha")


def estimators() -> tuple[str, ...]:
    """The estimators a method may use: verl's GRPO and every estimator of the registry (``edge_verl.estimators``)."""
    return (GRPO, *estimator_names())


@dataclass(frozen=True)
class Method:
    """One method. ``estimator``: ``algorithm.adv_estimator`` (None: not an RL method, verl's SFT trainer);
    ``gec``: runs Guided Error Correction; ``force_regenerate``: GEC's Force-R (every wrong response
    regenerated); ``options``: further Hydra overrides, fixed or naming a ``RUN_PARAMETERS`` field;
    ``knobs``: the training setups its recipes use."""

    name: str
    description: str
    estimator: Optional[str]
    gec: bool = False
    force_regenerate: bool = False
    options: tuple[str, ...] = ()
    knobs: tuple[str, ...] = KNOBS

    def __post_init__(self) -> None:
        allowed = estimators()
        if self.estimator is not None and self.estimator not in allowed:
            raise ValueError(f"method {self.name}: estimator={self.estimator!r}; allowed: {', '.join(allowed)} or None (SFT)")
        if self.force_regenerate and not self.gec:
            raise ValueError(f"method {self.name}: force_regenerate is a GEC option; set gec=True too")
        if (self.estimator is None) and (self.gec or self.options):
            raise ValueError(f"method {self.name}: an SFT method (estimator=None) takes no GEC and no options")
        unknown_knobs = set(self.knobs) - set(KNOBS)
        if not self.knobs or unknown_knobs:
            raise ValueError(f"method {self.name}: knobs={self.knobs!r}; allowed: one or more of {', '.join(KNOBS)}")
        for option in self.options:
            named = {field for _, field, _, _ in string.Formatter().parse(option) if field is not None}
            if named - set(RUN_PARAMETERS):
                raise ValueError(f"method {self.name}: option {option!r} names {sorted(named)}; allowed: {', '.join(RUN_PARAMETERS)}")

    @property
    def eda(self) -> bool:
        """Runs EDA (EDGE-GRPO's entropy-driven advantage), in the form the run chooses."""
        return self.estimator == EDA_ESTIMATOR

    @property
    def agent_name(self) -> Optional[str]:
        """The ``agent_name`` its training rows carry (GEC's agent loop), None for verl's default loop."""
        return GEC_AGENT_LOOP if self.gec else None

    def train_file(self, plain: Path) -> Path:
        """The variant of the prepared training file ``plain`` (``train_<set>.parquet``) this method trains
        on: the same rows marked for GEC (``train_<set>_gec.parquet``) for a GEC method, else ``plain``."""
        plain = Path(plain)
        return plain.with_name(f"{plain.stem}{GEC_FILE_SUFFIX}{plain.suffix}") if self.gec else plain


_EDGE, _BOTH = ("edge",), KNOBS
METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method("edge", "EDGE-GRPO: EDA + GEC", EDA_ESTIMATOR, gec=True, knobs=_EDGE),
        # EDGE-GRPO's ablations: each remedy alone, and Force-R (the regenerate branch for every wrong response)
        Method("eda", "EDGE-GRPO ablation: EDA only (no GEC)", EDA_ESTIMATOR, knobs=_EDGE),
        Method("gec", "EDGE-GRPO ablation: GEC only, GRPO advantages", "grpo", gec=True, knobs=_EDGE),
        Method("forcer", "EDGE-GRPO baseline Force-R: GRPO, every wrong response regenerated", "grpo", gec=True,
               force_regenerate=True, knobs=_EDGE),
        Method("forcer_eda", "EDGE-GRPO ablation: Force-R and EDA", EDA_ESTIMATOR, gec=True, force_regenerate=True, knobs=_EDGE),
        # The reviewers' controls of EDGE-GRPO (algorithm.edge_gec.*, GecConfig in edge_verl/algorithms/gec.py): EDGE with one switch
        Method("edge_masked", "EDGE-GRPO control: no policy gradient through GEC's injected tokens", EDA_ESTIMATOR,
               gec=True, options=("+algorithm.edge_gec.injected_loss=masked",), knobs=_EDGE),
        Method("edge_sft_injected", "EDGE-GRPO control: GEC's injected tokens trained by NLL, not the surrogate",
               EDA_ESTIMATOR, gec=True, options=("+algorithm.edge_gec.injected_loss=sft",), knobs=_EDGE),
        # GEC's placebo (edge_gec.placebo_reward, edge_verl/algorithms/gec.py), and its graded form: the arm published as
        # edge_placebo before that option existed (docs/results)
        Method("edge_placebo", "EDGE-GRPO control: GEC injects another problem's (wrong) answer and solution, "
               "rewarded as the row's own would be: only the injected content differs from EDGE", EDA_ESTIMATOR, gec=True,
               options=("+algorithm.edge_gec.answer_source=placebo", "+algorithm.edge_gec.placebo_reward=as_gold"), knobs=_EDGE),
        Method("edge_placebo_graded", "EDGE-GRPO control: GEC injects another problem's (wrong) answer and solution, "
               "graded against the row's gold (reward 0): corrected responses train as wrong ones, so content and reward both "
               "differ from EDGE", EDA_ESTIMATOR,
               gec=True, options=("+algorithm.edge_gec.answer_source=placebo", "+algorithm.edge_gec.placebo_reward=graded"),
               knobs=_EDGE),
        Method("edge_drop_first", "EDGE-GRPO control: corrections drop the wrong first attempt", EDA_ESTIMATOR,
               gec=True, options=("+algorithm.edge_gec.first_attempt=drop",), knobs=_EDGE),
        Method("grpo", "GRPO (verl's built-in estimator): the baseline of both papers", "grpo", knobs=_BOTH),
        Method("gepo", "GEPO: group-entropy-conditioned asymmetric advantage scaling", GEPO_ESTIMATOR, knobs=("gepo",)),
        # GEPO's ablations (gepo.ablation lifts the alpha_high < alpha_low guard for exactly that one)
        Method("gepo_no_high", "GEPO ablation: no high-entropy control (alpha_high = 1)", GEPO_ESTIMATOR,
               options=("+algorithm.gepo.ablation=no_high_entropy_control", "+algorithm.gepo.alpha_high=1.0"), knobs=("gepo",)),
        Method("gepo_no_low", "GEPO ablation: no low-entropy control (alpha_low = 1)", GEPO_ESTIMATOR,
               options=("+algorithm.gepo.ablation=no_low_entropy_control", "+algorithm.gepo.alpha_low=1.0"), knobs=("gepo",)),
        Method("gepo_symmetric", "GEPO ablation: one factor for both sides (alpha_low = alpha_high)", GEPO_ESTIMATOR,
               options=(
                   "+algorithm.gepo.ablation=symmetric",
                   "+algorithm.gepo.alpha_low={gepo_symmetric_alpha}",
                   "+algorithm.gepo.alpha_high={gepo_symmetric_alpha}",
               ), knobs=("gepo",)),
        Method("clipcov", "Clip-Cov (verl's built-in policy loss, the entropy-mechanism paper's values)", "grpo",
               options=(
                   "actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov",
                   "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.0002",
                   "actor_rollout_ref.actor.policy_loss.clip_cov_lb=1.0",
                   "actor_rollout_ref.actor.policy_loss.clip_cov_ub=5.0",
               ), knobs=_BOTH),
        Method("klcov", "KL-Cov (verl's built-in policy loss)", "grpo",
               options=(
                   "actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov",
                   "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.002",
                   "actor_rollout_ref.actor.policy_loss.ppo_kl_coef=1",
               ), knobs=_BOTH),
        Method("cliphigher", "Clip-Higher (DAPO-style: clip_ratio_high = 0.28)", "grpo",
               options=("actor_rollout_ref.actor.clip_ratio_high=0.28",), knobs=_BOTH),
        Method("sft", "EDGE-GRPO baseline: SFT on the reference solutions (verl's SFT trainer)", None, knobs=_EDGE),
    )
}
# Other names of a defined method: the demo's --algorithm edge_eda is EDA alone under its estimator's name.
METHOD_ALIASES = {"edge_eda": "eda"}
METHOD_NAMES = (*METHODS, *METHOD_ALIASES)


def estimator_methods() -> dict[str, Method]:
    """A method for each estimator of the registry that no definition above names as a method or alias: the
    estimator alone, with its options' defaults (an estimator registered from outside the package gets one, so
    the demo and a recipe can run it)."""
    from edge_verl.estimators.base import ESTIMATORS

    return {
        name: Method(name, f"{entry.description}, alone", name)
        for name, entry in ESTIMATORS.items() if name not in METHODS and name not in METHOD_ALIASES
    }


def method_names() -> tuple[str, ...]:
    """Every method's name: the definitions above, their aliases, then each estimator's own (``estimator_methods``)."""
    derived = tuple(name for name in estimator_names() if name not in METHODS and name not in METHOD_ALIASES)
    return (*METHOD_NAMES, *derived)


def get_method(name: str) -> Method:
    """The definition of method ``name`` (a name in ``method_names()``)."""
    method = METHODS.get(METHOD_ALIASES.get(name, name))
    if method is None and name in estimator_names():
        method = estimator_methods().get(name)
    if method is None:
        raise ValueError(f"method {name!r} is not defined; defined: {', '.join(method_names())} (edge_verl/methods.py)")
    return method


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be an integer >= 1")


def method_overrides(
    name: str,
    *,
    seed: int,
    eda_form: str,
    first_sample_tokens: int,
    continuation_tokens: int,
    gepo_symmetric_alpha: float = SYMMETRIC_ALPHA,
) -> list[str]:
    """The Hydra overrides that make a verl run method ``name``: the estimator, the seeding (``seed`` is the
    rollout's, so that every response is seeded from it), then EDA's (in ``eda_form``),
    GEC's (``seed`` seeds its decisions; the first sample capped at ``first_sample_tokens``, a correction
    continuing for up to ``continuation_tokens``), Force-R's, and the method's own options. A parameter the
    method does not use is still validated, so a typo fails for every method alike."""
    get_method(name)  # an unknown method fails first, before its parameters are checked
    if eda_form not in EDA_FORMS:
        raise ValueError(f"eda_form={eda_form!r}; allowed: {', '.join(EDA_FORMS)}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r} must be an integer")
    _check_count("first_sample_tokens", first_sample_tokens)
    _check_count("continuation_tokens", continuation_tokens)
    alpha = gepo_symmetric_alpha
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise ValueError(f"gepo_symmetric_alpha={gepo_symmetric_alpha!r} must be a finite number")
    values = {
        "seed": seed,
        "entropy_gradient": eda_form == "gradient",
        "first_sample_tokens": first_sample_tokens,
        "continuation_tokens": continuation_tokens,
        "gepo_symmetric_alpha": float(alpha),
    }
    return [option.format(**values) for _, options in method_override_parts(name) for option in options]


# The parts of a method's overrides, in the order they are given (method_override_parts).
OVERRIDE_PARTS = ("estimator", "seeding", "eda", "gec", "force_regenerate", "options")


def method_override_parts(name: str) -> list[tuple[str, tuple[str, ...]]]:
    """The overrides of method ``name`` before a run's parameters fill them in, by part: (part, templates)
    for each of ``OVERRIDE_PARTS`` the method has (none for SFT). A template may name a ``RUN_PARAMETERS``
    field as ``{field}``; ``method_overrides`` fills them with one run's values, the recipe writer with the
    recipe's variables."""
    method = get_method(name)
    if method.estimator is None:
        return []
    parts = [
        ("estimator", (f"algorithm.adv_estimator={method.estimator}",)),
        ("seeding", SEEDING_OPTIONS),
        ("eda", EDA_OPTIONS if method.eda else ()),
        ("gec", GEC_OPTIONS if method.gec else ()),
        ("force_regenerate", FORCE_REGENERATE_OPTIONS if method.force_regenerate else ()),
        ("options", method.options),
    ]
    return [(part, templates) for part, templates in parts if templates]
