"""What a study is: its options (``StudyConfig``), each run's identity and folder, and the check of every run
folder before anything runs (``plan``), by the run-folder protocol of ``edge_verl_lab/experiment.py`` shared with
``edge-verl reproduce``. Read by the runner (``runner.py``) and the report (``report.py``), which do not
import each other's internals.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from edge_verl_lab.demo import task as tasks
from edge_verl_lab.demo.run import DEMO_METHODS, TRAINERS, DemoConfig, response_length
from edge_verl_lab.experiment import changed_keys, read_record
from edge_verl.methods import get_method
from edge_verl_lab.study.exact_eval import EvalConfig

# The default study: the methods of the primary contrasts (edge_verl_lab/study/verdict.py): the baseline, EDA
# alone, GEPO, EDGE (EDA + GEC) and GEC's placebo control. The other RL methods run by --methods (e.g. gec,
# edge_masked, edge_sft_injected; docs/study.md gives each one's measured time per run).
DEFAULT_METHODS = ("grpo", "eda", "gepo", "edge", "edge_placebo")
# Study rows that run a method of edge_verl/methods.py in another form: row -> (method, EDA's form, extra Hydra
# overrides). The detached form (no entropy gradient) tells whether a divergence of EDA's gradient form (the
# reference's, the default) comes from the entropy gradient; the clamped form bounds P_hat to [0.1, 10] (the
# reference's first version) with the gradient form kept, so that eda - eda_clamped tells whether EDA's loss is
# its unbounded advantages (|A| reached 2.5e6 with the 1e-6 entropy floor alone) or the entropy gradient itself.
VARIANT_ROWS = {
    "eda_detached": ("eda", "detached", ()),
    "edge_detached": ("edge", "detached", ()),
    "eda_clamped": ("eda", "gradient", ("+algorithm.edge_eda.ratio_clamp=[0.1,10.0]",)),
}
BASELINE = "grpo"
# reflect: pair's problems, with a warm start whose weak reflection habit gives GEC something to correct
# (edge_verl_lab/demo/task.py); 8 seeds: GEPO's effect on pair had a paired SD that needs about 8 to be seen.
DEFAULT_TASK = "reflect"
DEFAULT_SEEDS = (1, 2, 3, 4, 5, 6, 7, 8)
IDENTITY_FILE = "study_run.json"
DONE_FILE = "done.json"
EVAL_FILE = "exact_eval.json"
# Weights' digest (sha256 of the final weights' tensor files), in done.json: two trainings of one definition
# compare number for number (the page's trained-twice check).
WEIGHTS_DIGEST = "weights_sha256"
# evaluation="exact": each seed's warm start measured as GRPO's first step samples it (study/calibrate.py): p0,
# all-wrong groups, the reflection share and GEC's regenerate success, at the study's temperature and continuation.
CALIBRATION_FILE = "calibration.json"
# How a study measures accuracy: "verl" (verl's validation during the run, val-core/*: unseeded, each
# method under its own response cap) or "exact" (edge_verl_lab/study/exact_eval.py on the seed's warm-started
# model once and on each run's final weights: deterministic, one token cap for every method).
EVALUATIONS = ("verl", "exact")
FORMAT = 1  # of the identity: a new format refuses old folders instead of mixing them
# StudyConfig's protocol options (study/protocol.py) and the values a study recorded before they were options
# ran with (the demo's: verl's token-mean loss, T = 1, two updates per step, a 3-step warm-up, verl's weight
# decay 0.01, samples evaluated at T = 1): a published study of then reads back as what it ran.
PROTOCOL_FIELDS = ("loss_agg_mode", "temperature", "updates_per_step", "lr", "lr_warmup_steps", "weight_decay", "continuation_tokens")
LEGACY_PROTOCOL = {"loss_agg_mode": "token-mean", "temperature": 1.0, "updates_per_step": 2, "lr": 1e-3, "lr_warmup_steps": 3,
                   "weight_decay": 0.01, "continuation_tokens": 64, "eval_temperature": 1.0}


STUDY_METHODS = (*DEMO_METHODS, *VARIANT_ROWS)


def method_of(row: str) -> str:
    """The edge_verl/methods.py method a study row runs (``eda_detached`` -> ``eda``)."""
    return VARIANT_ROWS.get(row, (row,))[0]


def eda_form_of(row: str) -> str:
    """EDA's form in study row ``row`` (a method's own row runs the gradient form, the reference's)."""
    return VARIANT_ROWS.get(row, (row, "gradient"))[1]


def row_overrides(row: str) -> tuple[str, ...]:
    """The Hydra overrides study row ``row`` adds to its method's."""
    return VARIANT_ROWS.get(row, (row, "gradient", ()))[2]


class StudyError(RuntimeError):
    """A study that cannot start (bad options, a folder holding another run) or a run that failed."""


@dataclass
class StudyConfig:
    """Options of ``edge-verl study`` (validated in ``__post_init__``; the scale fields are the demo's).

    The default scale (5 methods x 8 seeds x 12 steps on reflect, the exact evaluation, the reference's
    protocol) is what 2 cores finish in under 80 minutes, two runs at a time (measured: 72.1 min for the
    invocation at d4ed055, each non-GEC run evaluated at two lengths) with GRPO past the baseline gate in every
    seed; docs/study.md states the measured time. ``test_freq`` None
    (evaluation="verl"): validate only before training and at the end.
    """

    task: str = DEFAULT_TASK
    methods: tuple[str, ...] = DEFAULT_METHODS
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    steps: int = 12
    test_freq: Optional[int] = None
    val_samples: int = 8
    val_temperature: float = 1.0
    prompts_per_step: int = 8
    responses_per_prompt: int = 8
    trainer: str = "v1"
    out: Path = Path("runs/study")
    extra_overrides: tuple[str, ...] = ()
    # The training protocol (edge_verl_lab/study/protocol.py prints it against EDGE-GRPO's reference): the
    # reference's values where the scale allows (loss aggregation, temperature, one update per step, no
    # warm-up, no weight decay), the tiny model's learning rate and the task's GEC continuation budget.
    loss_agg_mode: str = "seq-mean-token-mean"
    temperature: float = 0.6
    updates_per_step: int = 1
    lr: float = 1e-3
    lr_warmup_steps: int = 0
    weight_decay: float = 0.0
    continuation_tokens: int = 64
    # evaluation="exact": the step-0 model (shared by a seed's methods) and every final model are scored
    # offline on every seen and held-out problem: greedy, gold-answer probability and ``eval_samples``
    # samples at ``eval_temperature`` (None: the training temperature) seeded per problem by ``eval_seed``,
    # all capped at ``eval_max_new_tokens`` (None: the longest response any of the study's methods trains on,
    # so that what a method learned to write, a reflection included, is what it is graded on).
    evaluation: str = "exact"
    eval_samples: int = 4
    eval_seed: int = 0
    eval_max_new_tokens: Optional[int] = None
    eval_temperature: Optional[float] = None
    # Filled in: the scale fields of DemoConfig that the study does not change (lr, warm start), recorded
    # in every identity so that a changed default is a changed run.
    demo_defaults: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        tasks.get_task(self.task)
        self.methods, self.seeds = tuple(self.methods), tuple(self.seeds)
        if not self.methods:
            raise ValueError("methods: name at least one method")
        for method in self.methods:
            if method not in VARIANT_ROWS and (get_method(method).estimator is None or method not in DEMO_METHODS):
                raise ValueError(f"method {method!r} is not an RL method the study can run; allowed: {', '.join(STUDY_METHODS)}")
        for values, name in ((self.methods, "methods"), (self.seeds, "seeds")):
            if len(set(values)) != len(values):
                raise ValueError(f"{name}={list(values)!r} names one twice")
        if not self.seeds or any(isinstance(seed, bool) or not isinstance(seed, int) or seed < 0 for seed in self.seeds):
            raise ValueError(f"seeds={list(self.seeds)!r}: one or more integers >= 0")
        if self.trainer not in TRAINERS:
            raise ValueError(f"trainer={self.trainer!r}; allowed: {', '.join(TRAINERS)}")
        if self.evaluation not in EVALUATIONS:
            raise ValueError(f"evaluation={self.evaluation!r}; allowed: {', '.join(EVALUATIONS)}")
        if self.is_mixture and self.evaluation != "exact":
            raise ValueError(f"task {self.task} is a mixture: its report splits the exact evaluation by task; use evaluation='exact'")
        self.out = Path(self.out)
        self.extra_overrides = tuple(self.extra_overrides)
        probe = self.demo_config(self.methods[0], self.seeds[0])  # validates the scale the demo's way
        for method in self.methods[1:]:  # and every method as the demo will take it, before any run starts
            self.demo_config(method, self.seeds[0])
        if self.eval_max_new_tokens is None:
            self.eval_max_new_tokens = self.longest_response()
        if self.eval_temperature is None:
            self.eval_temperature = self.temperature
        self.eval_config()  # validates the evaluation's options
        self.demo_defaults = {"lr": probe.lr, "lr_warmup_steps": probe.lr_warmup_steps, "warm_start_steps": probe.warm_start_steps,
                              "warm_start_correct_fraction": probe.warm_start_correct_fraction}

    @classmethod
    def from_dict(cls, data: dict, out: Optional[Path] = None) -> "StudyConfig":
        """The config ``as_dict`` recorded (a report's ``study``), optionally moved to another folder. A study
        recorded before the protocol was an option ran the demo's protocol (``LEGACY_PROTOCOL``)."""
        fields = {**LEGACY_PROTOCOL, **{key: value for key, value in data.items() if key != "demo_defaults"}}
        fields.update(methods=tuple(fields["methods"]), seeds=tuple(fields["seeds"]), extra_overrides=tuple(fields["extra_overrides"]))
        config = cls(**{**fields, "out": Path(out if out is not None else fields["out"])})
        if data.get("demo_defaults", config.demo_defaults) != config.demo_defaults:
            raise StudyError(f"the study ran with {data['demo_defaults']}, this package's demo defaults are {config.demo_defaults}")
        return config

    @property
    def is_mixture(self) -> bool:
        return isinstance(tasks.get_task(self.task), tasks.Mixture)

    def run_name(self, method: str, seed: int) -> str:
        return f"{method}_seed{seed}"

    def run_folder(self, method: str, seed: int) -> Path:
        return self.out / "runs" / self.run_name(method, seed)

    def eval_config(self, max_new_tokens: Optional[int] = None) -> EvalConfig:
        """The evaluation's config, under the common cap or under ``max_new_tokens`` (a method's trained length)."""
        return EvalConfig(max_new_tokens=max_new_tokens or self.eval_max_new_tokens, samples=self.eval_samples,
                          temperature=self.eval_temperature, seed=self.eval_seed)

    def trained_length(self, method: str) -> int:
        """The response cap study row ``method`` trains with (``data.max_response_length``)."""
        return response_length(self.demo_config(method, self.seeds[0]))

    def own_length(self, method: str) -> Optional[int]:
        """evaluation="exact": the trained length at which row ``method`` is evaluated besides the common cap
        (None when they are equal): what it learned to write within its own budget, and what the cap adds."""
        length = self.trained_length(method)
        return None if length == self.eval_max_new_tokens else length

    def eval_lengths(self, method: str) -> list[Optional[int]]:
        """The caps row ``method``'s final model is evaluated under: the common one (None), then its own length if it differs."""
        own = self.own_length(method)
        return [None] if own is None else [None, own]

    def own_lengths(self) -> list[int]:
        """Every trained length of the study's rows other than the cap (each seed's step-0 model is evaluated at each)."""
        return sorted({length for method in self.methods if (length := self.own_length(method)) is not None})

    def longest_response(self) -> int:
        """The longest ``data.max_response_length`` among the study's methods (a GEC method's corrections)."""
        return max(response_length(self.demo_config(method, self.seeds[0])) for method in self.methods)

    def seed_model_folder(self, seed: int) -> Path:
        """evaluation="exact": the warm-started model every method of ``seed`` trains from."""
        return self.out / "models" / f"seed{seed}"

    def demo_config(self, method: str, seed: int) -> DemoConfig:
        exact = self.evaluation == "exact"
        return DemoConfig(
            algorithm=method_of(method),
            eda_form=eda_form_of(method),
            task=self.task,
            steps=self.steps,
            trainer=self.trainer,
            seed=seed,
            out=self.run_folder(method, seed),
            prompts_per_step=self.prompts_per_step,
            responses_per_prompt=self.responses_per_prompt,
            advantage_stats=True,
            per_source_stats=self.is_mixture,
            validate=not exact,
            model_dir=self.seed_model_folder(seed) if exact else None,
            save_final_weights=exact,
            test_freq=self.steps if self.test_freq is None else self.test_freq,
            val_samples=self.val_samples,
            val_temperature=self.val_temperature,
            extra_overrides=[*row_overrides(method), *self.extra_overrides],
            **{name: getattr(self, name) for name in PROTOCOL_FIELDS},  # DemoConfig's fields of the same names
        )

    def identity(self, method: str, seed: int) -> dict:
        """Everything that makes run (method, seed) what it is."""
        return {
            "format": FORMAT,
            "task": self.task,
            "method": method,
            "seed": seed,
            "steps": self.steps,
            "trainer": self.trainer,
            "test_freq": self.test_freq,
            "val_samples": self.val_samples,
            "val_temperature": self.val_temperature,
            "prompts_per_step": self.prompts_per_step,
            "responses_per_prompt": self.responses_per_prompt,
            "extra_overrides": list(self.extra_overrides),
            **{name: getattr(self, name) for name in PROTOCOL_FIELDS},
            **self.demo_defaults,
            **({"evaluation": self.eval_config().as_dict()} if self.evaluation == "exact" else {}),
        }

    def runs(self) -> list[tuple[str, int]]:
        """(method, seed) in run order: seed by seed, so an interrupted study has whole seeds to compare."""
        return [(method, seed) for seed in self.seeds for method in self.methods]

    def as_dict(self) -> dict:
        data = asdict(self)
        data.update(out=str(self.out), methods=list(self.methods), seeds=list(self.seeds), extra_overrides=list(self.extra_overrides))
        return data


def eval_file(length: Optional[int] = None) -> str:
    """The evaluation file under the common cap (``length`` None) or at a trained length."""
    return EVAL_FILE if length is None else f"exact_eval_len{length}.json"


def run_state(config: StudyConfig, method: str, seed: int) -> str:
    """``done`` (finished, this identity), ``partial`` (this identity, not finished) or ``new`` (empty);
    raises ``StudyError`` when the folder holds another run."""
    folder = config.run_folder(method, seed)
    recorded = read_record(folder / IDENTITY_FILE)
    if recorded is None:
        if folder.exists() and any(folder.iterdir()):
            raise StudyError(f"{folder} holds files but no {IDENTITY_FILE}: not a study run; move it or pick another --out")
        return "new"
    wanted = config.identity(method, seed)
    if recorded != wanted:
        detail = ", ".join(f"{key}: {recorded.get(key)!r} there, {wanted.get(key)!r} now" for key in changed_keys(recorded, wanted))
        raise StudyError(
            f"{folder} holds another run ({detail}); a study's runs share one scale: use another --out, or delete the folder to redo it"
        )
    return "done" if (folder / DONE_FILE).exists() else "partial"


def plan(config: StudyConfig) -> list[tuple[str, int, str]]:
    """(method, seed, state) of every run, every folder checked before anything runs."""
    return [(method, seed, run_state(config, method, seed)) for method, seed in config.runs()]
