"""The study's runs: every (method, seed) is one ``edge-verl demo`` run (verl's real ``main_ppo`` on CPU)
on the study's task, validated uncorrected on the task's seen and held-out problems.

Layout under ``OUT``: ``runs/<method>_seed<N>/`` (the demo's files: ``metrics.jsonl``, ``verl.log``,
``command.txt``, ``model/``, ``data/``) with ``study_run.json`` (what the run is: its identity) and, once
verl exited 0 with every step logged, ``done.json`` (its wall time); then ``report.md``, ``report.json`` and
``curves.png`` (``report``).

``--evaluation exact`` (edge_verl/study/exact_eval.py): every method of a seed trains from one warm-started
model (``models/seed<N>/``, built once, its step-0 evaluation ``exact_eval.json`` done once); verl does not
validate; each run saves its final weights and is evaluated offline (``runs/<run>/exact_eval.json``) under one
token cap, with samples seeded per problem, so two evaluations of one checkpoint are identical.

An evaluation file records its problems' digest and config: a finished run whose file is another split's
or config's is evaluated again from its final weights, without training again.

Resumable like ``edge-verl reproduce``: a finished run (``done.json``, same identity) is skipped; an
interrupted one is run again from the start (the runs save no checkpoints; its old metrics are removed
first). Before anything runs, every run folder is checked: a folder holding another run (another task,
scale, method, seed or override: any field of its identity) is refused, so two rows never share a run.
The same seed gives every method the same tiny model, warm start and training-data order, so methods are
compared seed by seed (paired).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, TextIO

from edge_verl.demo import task as tasks
from edge_verl.demo.run import DEMO_METHODS, TRAINERS, DemoConfig, build_warm_model, final_weights, model_recipe, run_demo, trained_steps
from edge_verl.methods import get_method
from edge_verl.study.exact_eval import EvalConfig

# The default study: the methods of the primary contrasts (edge_verl/study/verdict.py): the baseline, EDA
# alone, GEPO, EDGE (EDA + GEC) and GEC's placebo control. The other RL methods run by --methods (e.g. gec,
# edge_masked, edge_sft_injected; README's study section gives each one's measured time per run).
DEFAULT_METHODS = ("grpo", "eda", "gepo", "edge", "edge_placebo")
# Study rows that are a method of edge_verl/methods.py in EDA's other form: the detached one (no entropy
# gradient) tells whether a divergence of EDA's gradient form (the reference's, the default) comes from the
# entropy gradient. Row name -> (method, eda_form).
EDA_FORM_ROWS = {"eda_detached": ("eda", "detached"), "edge_detached": ("edge", "detached")}
BASELINE = "grpo"
DEFAULT_TASK = "pair"
DEFAULT_SEEDS = (1, 2, 3, 4)
IDENTITY_FILE = "study_run.json"
DONE_FILE = "done.json"
EVAL_FILE = "exact_eval.json"
# How a study measures accuracy: "verl" (verl's validation during the run, val-core/*: unseeded, each
# method under its own response cap) or "exact" (edge_verl/study/exact_eval.py on the seed's warm-started
# model once and on each run's final weights: deterministic, one token cap for every method).
EVALUATIONS = ("verl", "exact")
FORMAT = 1  # of the identity: a new format refuses old folders instead of mixing them


STUDY_METHODS = (*DEMO_METHODS, *EDA_FORM_ROWS)


def method_of(row: str) -> str:
    """The edge_verl/methods.py method a study row runs (``eda_detached`` -> ``eda``)."""
    return EDA_FORM_ROWS.get(row, (row, None))[0]


class StudyError(RuntimeError):
    """A study that cannot start (bad options, a folder holding another run) or a run that failed."""


@dataclass
class StudyConfig:
    """Options of ``edge-verl study`` (validated in ``__post_init__``; the scale fields are the demo's).

    The default scale (5 methods x 4 seeds x 12 steps on pair, the exact evaluation) was chosen to finish in
    under an hour on 2 idle cores with GRPO past the baseline gate in every seed; README's study section
    states the measured time. ``test_freq`` None (evaluation="verl"): validate only before training and at
    the end.
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
    # evaluation="exact": the step-0 model (shared by a seed's methods) and every final model are scored
    # offline on every seen and held-out problem: greedy, gold-answer probability and ``eval_samples``
    # samples at T=1 seeded per problem by ``eval_seed``, all capped at ``eval_max_new_tokens``.
    evaluation: str = "exact"
    eval_samples: int = 4
    eval_seed: int = 0
    eval_max_new_tokens: int = 16
    # Filled in: the scale fields of DemoConfig that the study does not change (lr, warm start), recorded
    # in every identity so that a changed default is a changed run.
    demo_defaults: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        tasks.get_task(self.task)
        self.methods, self.seeds = tuple(self.methods), tuple(self.seeds)
        if not self.methods:
            raise ValueError("methods: name at least one method")
        for method in self.methods:
            if method not in EDA_FORM_ROWS and (get_method(method).estimator is None or method not in DEMO_METHODS):
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
        self.eval_config()  # validates the evaluation's options
        self.out = Path(self.out)
        self.extra_overrides = tuple(self.extra_overrides)
        probe = self.demo_config(self.methods[0], self.seeds[0])  # validates the scale the demo's way
        for method in self.methods[1:]:  # and every method as the demo will take it, before any run starts
            self.demo_config(method, self.seeds[0])
        self.demo_defaults = {"lr": probe.lr, "lr_warmup_steps": probe.lr_warmup_steps, "warm_start_steps": probe.warm_start_steps,
                              "warm_start_correct_fraction": probe.warm_start_correct_fraction}

    @classmethod
    def from_dict(cls, data: dict, out: Optional[Path] = None) -> "StudyConfig":
        """The config ``as_dict`` recorded (a report's ``study``), optionally moved to another folder."""
        fields = {key: value for key, value in data.items() if key != "demo_defaults"}
        fields.update(methods=tuple(fields["methods"]), seeds=tuple(fields["seeds"]), extra_overrides=tuple(fields["extra_overrides"]))
        config = cls(**{**fields, "out": Path(out if out is not None else fields["out"])})
        if data.get("demo_defaults", config.demo_defaults) != config.demo_defaults:
            raise StudyError(f"the study ran with {data['demo_defaults']}, this package's demo defaults are {config.demo_defaults}")
        return config

    def run_name(self, method: str, seed: int) -> str:
        return f"{method}_seed{seed}"

    def run_folder(self, method: str, seed: int) -> Path:
        return self.out / "runs" / self.run_name(method, seed)

    def eval_config(self) -> EvalConfig:
        return EvalConfig(max_new_tokens=self.eval_max_new_tokens, samples=self.eval_samples, temperature=1.0, seed=self.eval_seed)

    def seed_model_folder(self, seed: int) -> Path:
        """evaluation="exact": the warm-started model every method of ``seed`` trains from."""
        return self.out / "models" / f"seed{seed}"

    def demo_config(self, method: str, seed: int) -> DemoConfig:
        exact = self.evaluation == "exact"
        algorithm, eda_form = EDA_FORM_ROWS.get(method, (method, "gradient"))
        return DemoConfig(
            algorithm=algorithm,
            eda_form=eda_form,
            task=self.task,
            steps=self.steps,
            trainer=self.trainer,
            seed=seed,
            out=self.run_folder(method, seed),
            prompts_per_step=self.prompts_per_step,
            responses_per_prompt=self.responses_per_prompt,
            advantage_stats=True,
            validate=not exact,
            model_dir=self.seed_model_folder(seed) if exact else None,
            save_final_weights=exact,
            test_freq=self.steps if self.test_freq is None else self.test_freq,
            val_samples=self.val_samples,
            val_temperature=self.val_temperature,
            extra_overrides=list(self.extra_overrides),
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


def source_commit() -> dict:
    """{commit, modified} of the source tree this package runs from (commit None outside a git checkout):
    recorded with every finished run, so a report says which code trained its numbers."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> Optional[str]:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "modified": bool(status) if status is not None else None}


def _read_json(path: Path) -> Optional[dict]:
    return json.loads(path.read_text()) if path.exists() else None


def run_state(config: StudyConfig, method: str, seed: int) -> str:
    """``done`` (finished, this identity), ``partial`` (this identity, not finished) or ``new`` (empty);
    raises ``StudyError`` when the folder holds another run."""
    folder = config.run_folder(method, seed)
    recorded = _read_json(folder / IDENTITY_FILE)
    if recorded is None:
        if folder.exists() and any(folder.iterdir()):
            raise StudyError(f"{folder} holds files but no {IDENTITY_FILE}: not a study run; move it or pick another --out")
        return "new"
    wanted = config.identity(method, seed)
    if recorded != wanted:
        changed = sorted(key for key in set(recorded) | set(wanted) if recorded.get(key) != wanted.get(key))
        detail = ", ".join(f"{key}: {recorded.get(key)!r} there, {wanted.get(key)!r} now" for key in changed)
        raise StudyError(
            f"{folder} holds another run ({detail}); a study's runs share one scale: use another --out, or delete the folder to redo it"
        )
    return "done" if (folder / DONE_FILE).exists() else "partial"


def plan(config: StudyConfig) -> list[tuple[str, int, str]]:
    """(method, seed, state) of every run, every folder checked before anything runs."""
    return [(method, seed, run_state(config, method, seed)) for method, seed in config.runs()]


def _clear_partial(folder: Path) -> None:
    for name in ("verl_metrics.jsonl", "metrics.jsonl", "metrics.png", DONE_FILE, EVAL_FILE):
        (folder / name).unlink(missing_ok=True)
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # an interrupted run restarts: never resume its step


def evaluation_problems(config: StudyConfig) -> dict[str, list[tuple[str, str]]]:
    """evaluation="exact": split -> the (question, answer) list every model of the study is scored on."""
    task = tasks.get_task(config.task)
    return {split: [(q, a) for q, a, _ in chosen] for split, chosen in (("seen", task.seen_problems()), ("heldout", task.heldout_problems))}


def evaluation_is_current(config: StudyConfig, out_file: Path) -> bool:
    """Whether ``out_file`` holds this study's evaluation: its config and, per split, the same problems."""
    from edge_verl.study.exact_eval import problems_digest

    recorded = _read_json(out_file)
    wanted = {split: problems_digest(problems) for split, problems in evaluation_problems(config).items()}
    return recorded is not None and set(recorded) == set(wanted) and all(
        recorded[split]["config"] == config.eval_config().as_dict() and recorded[split].get("problems_sha256") == digest
        for split, digest in wanted.items())


def evaluate_model(config: StudyConfig, model_dir: Path, out_file: Path) -> dict:
    """evaluation="exact": ``exact_eval`` of ``model_dir`` on the task's seen and held-out problems, written
    to ``out_file`` as {split: result}."""
    from edge_verl.study.exact_eval import evaluate_problems

    task = tasks.get_task(config.task)
    result = {split: evaluate_problems(model_dir, problems, config.eval_config(), task.data_source)
              for split, problems in evaluation_problems(config).items()}
    out_file.write_text(json.dumps(result) + "\n")
    return result


def reevaluate(config: StudyConfig, method: str, seed: int) -> bool:
    """evaluation="exact", a finished run: evaluate its final weights again when its evaluation file is not this
    study's (another split or evaluation config; the training is not redone). Returns whether it did."""
    folder = config.run_folder(method, seed)
    if evaluation_is_current(config, folder / EVAL_FILE):
        return False
    weights = final_weights(config.demo_config(method, seed))
    if not weights.is_dir():
        raise StudyError(f"run {config.run_name(method, seed)}: its evaluation is stale and its final weights ({weights}) are gone")
    evaluate_model(config, weights, folder / EVAL_FILE)
    return True


def prepare_seed(config: StudyConfig, seed: int) -> Path:
    """evaluation="exact": the seed's warm-started model, built once, and its step-0 evaluation, done once."""
    probe = config.demo_config(config.methods[0], seed)
    folder = build_warm_model(model_recipe(probe), config.seed_model_folder(seed))
    if not evaluation_is_current(config, folder / EVAL_FILE):
        evaluate_model(config, folder, folder / EVAL_FILE)
    return folder


def run_one(config: StudyConfig, method: str, seed: int, stream: TextIO) -> dict:
    """Train one run; returns its ``done.json`` record. Raises ``StudyError`` (with the log) when verl failed
    or did not log every step."""
    folder = config.run_folder(method, seed)
    folder.mkdir(parents=True, exist_ok=True)
    _clear_partial(folder)
    (folder / IDENTITY_FILE).write_text(json.dumps(config.identity(method, seed), indent=1) + "\n")
    if config.evaluation == "exact":
        prepare_seed(config, seed)
    demo = config.demo_config(method, seed)
    result = run_demo(demo, stream=stream)
    steps = [row["step"] for row in trained_steps(result["rows"])]
    if result["returncode"] != 0:
        raise StudyError(f"run {config.run_name(method, seed)} failed (verl exit {result['returncode']}); log: {folder / 'verl.log'}")
    if steps != list(range(1, config.steps + 1)):
        raise StudyError(f"run {config.run_name(method, seed)} logged steps {steps}, not 1..{config.steps}; log: {folder / 'verl.log'}")
    if config.evaluation == "exact":
        if not final_weights(demo).is_dir():
            raise StudyError(f"run {config.run_name(method, seed)} saved no final weights at {final_weights(demo)}")
        evaluate_model(config, final_weights(demo), folder / EVAL_FILE)
    done = {"seconds": round(result["seconds"], 1), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **source_commit()}
    (folder / DONE_FILE).write_text(json.dumps(done) + "\n")
    return done


def run_study(config: StudyConfig, stream: Optional[TextIO] = None, dry_run: bool = False) -> Optional[dict]:
    """Every run not yet done, then the report; returns the report (None for a dry run). Stops at the first
    failed run, after writing the report of the runs that finished. ``stream``: progress (default stdout)."""
    from edge_verl.study.report import write_report

    stream = stream or sys.stdout

    states = plan(config)
    todo = [(method, seed) for method, seed, state in states if state != "done"]
    stream.write(f"edge-verl study: task {config.task}, {len(config.methods)} methods x {len(config.seeds)} seeds x "
                 f"{config.steps} steps; {len(states) - len(todo)} of {len(states)} runs done, out={config.out}\n")
    if dry_run:
        for method, seed, state in states:
            stream.write(f"  {config.run_name(method, seed):<28}{state}\n")
        return None
    started = time.time()
    if config.evaluation == "exact":  # finished runs whose evaluation is stale (a changed split): evaluated again
        for method, seed, state in states:
            if state == "done":
                prepare_seed(config, seed)
                if reevaluate(config, method, seed):
                    stream.write(f"  {config.run_name(method, seed)}: evaluated again (its evaluation file was another split's)\n")
    failure = None
    for number, (method, seed) in enumerate(todo, 1):
        stream.write(f"[{number}/{len(todo)}] {config.run_name(method, seed)} ({time.time() - started:.0f} s so far)\n")
        stream.flush()
        try:
            run_one(config, method, seed, stream)
        except StudyError as error:
            failure = error
            break
    report = write_report(config)
    stream.write(f"report: {config.out / 'report.md'} ({time.time() - started:.0f} s this invocation)\n")
    if failure is not None:
        raise failure
    return report
