"""One paper table, end to end: data -> every row's recipe per seed -> evaluation of the final checkpoint ->
table (markdown + JSON: every seed, mean ± std over seeds next to the paper's number, the paired difference
to the row's baseline with a 95% interval; ``report``) and training curves (PNG); for a sensitivity sweep,
one plot per coefficient.

Stages and where they write (``OUT`` = ``--out``):
- ``data``: the training sets the table needs and the evaluation sets, in ``DATA_DIR`` (skipped when every
  file is there);
- ``train <row> seed <N>``: the row's recipe, unchanged, as a user runs it (``bash recipes/<recipe>``, then
  the row's Hydra overrides, a sensitivity grid point's) with
  SEED, the row's MODEL_PATH (the table's model for the backend, or ``--model``), TRAIN_FILE, its own
  CKPT_DIR=OUT/checkpoints/<row>_seed<N>, RUN_TAG=<table>/<row> (part of the run identity the recipe
  records), PYTHON=this interpreter and verl's file logger pointed at
  ``OUT/runs/<row>_seed<N>/metrics/attempt_<k>.jsonl`` (one file per attempt: a resumed run restarts verl's
  logger); output in ``train.log``; done when verl exits 0 and the final checkpoint has HF weights;
- ``eval <row> [seed <N>]``: ``python -m edge_verl_lab.evaluation`` on that checkpoint (a base-model row: on the
  model itself) into ``OUT/runs/<run>/eval/``;
- ``report``: ``OUT/table.md``, ``OUT/table.json``, ``OUT/curves.png`` (``OUT/sensitivity_<coefficient>.png``).

Before anything runs, a sweep's grid is validated (GepoConfig), and ``check_runs`` refuses two runs in one
folder and a folder whose finished stage belongs to another run (table, row, backend, model, recipe,
training file, overrides: ``run_identity``). By default a row without a recipe for the backend (SFT on
Megatron) is left out, and says so; named with ``--rows``, it is an error.
Resumable by the run-folder protocol of ``edge_verl_lab/experiment.py``: a finished stage (``<stage>.done.json``)
is skipped, the report when its inputs are unchanged, and an interrupted training stage resumes from its last
checkpoint. A failed stage stops the pipeline with the path of its log.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from edge_verl.data import EVAL_SETS, MANIFEST, PAPER_EVAL, RandomSource, prepare
from edge_verl_lab.experiment import changed_keys, finished_record, last_checkpoint, mark_stage, read_stage
from edge_verl_lab.reporting import curves_by_step, load_eval_table, load_metrics, metric_series, plot, validation_series
from edge_verl_lab.reproduce.report import summarize, table_markdown, write_sensitivity_plots
from edge_verl_lab.reproduce.tables import BACKENDS, CURVES, Row, Table

# Part of the report's skip test: a new report format redoes the report even when no evaluation changed.
REPORT_FORMAT = 2


class StageFailed(RuntimeError):
    def __init__(self, stage: str, log: Path, reason: str):
        super().__init__(f"stage '{stage}' failed: {reason}; log: {log}")
        self.stage, self.log = stage, log


@dataclass(frozen=True)
class EvalSettings:
    """The papers' protocol by default: one sample per problem at T = 0.1, up to 3000 new tokens, the five
    benchmarks (Avg) and AIME25. ``limit`` (first N problems per benchmark) and ``extra`` are for slices."""

    benchmarks: tuple[str, ...] = (*PAPER_EVAL, "aime25")
    limit: Optional[int] = None
    temperature: float = 0.1
    max_new_tokens: int = 3000
    samples: int = 1
    seed: int = 0
    extra: tuple[Path, ...] = ()

    def arguments(self) -> list[str]:
        args = ["--benchmarks", *self.benchmarks, "--temperature", str(self.temperature)]
        args += ["--max-new-tokens", str(self.max_new_tokens), "--samples", str(self.samples), "--seed", str(self.seed)]
        if self.limit is not None:
            args += ["--limit", str(self.limit)]
        if self.extra:
            args += ["--extra", *map(str, self.extra)]
        return args


# Recipe variables the pipeline sets per run: a --set for one of them would give every run the same value
# (every seed one SEED, every row one folder), so it is refused with the option that does it right.
PIPELINE_VARIABLES = {
    "SEED": "--seeds",
    "TRAIN_FILE": "--train-file SET=PATH",
    "DATA_DIR": "--data-dir",
    "CKPT_DIR": "--out (each run trains in OUT/checkpoints/<row>_seed<N>)",
    "CKPT_ROOT": "--out (each run trains in OUT/checkpoints/<row>_seed<N>)",
    "EXPERIMENT_NAME": "--out (each run is named <table>_<row>_seed<N>)",
    "RUN_TAG": "nothing (the pipeline tags each run with its table and row)",
    "DRY_RUN": "--dry-run",
    "VERL_FILE_LOGGER_PATH": "nothing (the pipeline logs each run to OUT/runs/<run>/metrics)",
}


class RunCollision(ValueError):
    """Two runs would share a folder, or a folder holds another run's finished stage."""


@dataclass
class Settings:
    """Everything one ``edge-verl reproduce`` invocation needs (see edge_verl_lab.reproduce.cli for the flags).

    env: variables set for every recipe run (the recipes' knobs: TRAIN_BATCH_SIZE, EDGE_VERL_CPU, ...),
    applied after the pipeline's own (``PIPELINE_VARIABLES`` are refused); models: ``--model KEY=PATH``
    where KEY is a row key, a model size (``7b``) or the model a row runs (``Qwen/Qwen2.5-Math-7B``), the
    most specific winning; MODEL_PATH in env is accepted only when every selected row runs the same model;
    train_files: a training set replaced by a user's file (``<set> -> path``; a row whose method runs GEC
    uses ``<stem>_gec.parquet`` next to it).
    """

    table: Table
    seeds: Sequence[int]
    out: Path
    recipes_dir: Path
    backend: str = "fsdp"
    data_dir: Optional[Path] = None
    rows: Optional[Sequence[str]] = None
    env: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    train_files: dict[str, Path] = field(default_factory=dict)
    evaluation: EvalSettings = EvalSettings()
    random_source: RandomSource = RandomSource()
    dry_run: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}; allowed: {list(BACKENDS)}")
        if self.table.sweep is not None:
            self.table.sweep.check()
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {list(self.seeds)}: give at least one, each once")
        if self.rows is not None and len(set(self.rows)) != len(self.rows):
            raise RunCollision(f"rows {list(self.rows)}: each row once (a repeated row would train into the same folders)")
        self.out = Path(self.out).resolve()
        self.data_dir = Path(self.data_dir).resolve() if self.data_dir is not None else self.out / "data"
        for row in self.selected_rows():
            if row.trains and self.backend not in row.recipes:
                raise ValueError(f"row {row.key} has no {self.backend} recipe (has {sorted(row.recipes)})")
            if row.trains and not (self.recipes_dir / row.recipes[self.backend]).exists():
                raise FileNotFoundError(f"recipe {self.recipes_dir / row.recipes[self.backend]} not found (--recipes)")
        unknown = set(self.train_files) - set(self.table.train_sets)
        if unknown:
            raise ValueError(f"--train-file for {sorted(unknown)}: the table trains on {list(self.table.train_sets)}")
        for row in self.selected_rows():
            if row.supervised and row.train_set in self.train_files:
                raise ValueError(
                    f"--train-file {row.train_set}=...: row {row.key} (SFT) trains on the reference solutions, "
                    f"sft_{row.train_set}.parquet, not on an RL file; leave it out (--rows) or drop --train-file"
                )
        for key, option in PIPELINE_VARIABLES.items():
            if key in self.env:
                raise RunCollision(f"--set {key}: the pipeline sets it per run; use {option}")
        self._check_models()

    def _check_models(self) -> None:
        rows = self.selected_rows()
        keys = {row.key for row in rows} | {row.size for row in rows if row.size} | {row.model(self.backend) for row in rows}
        unknown = sorted(set(self.models) - keys)
        if unknown:
            raise ValueError(f"--model {', '.join(unknown)}: not a selected row, size or model; choose from {sorted(keys)}")
        if "MODEL_PATH" in self.env:
            defaults = sorted({row.model(self.backend) for row in rows})
            if len(defaults) > 1:
                raise RunCollision(
                    f"--set MODEL_PATH would put every row on one model, but the rows run {', '.join(defaults)} on "
                    f"{self.backend}: use --model ROW_OR_SIZE=PATH (e.g. --model 7b=/models/Qwen2.5-Math-7B)"
                )

    def selected_rows(self) -> list[Row]:
        """The rows named by --rows, or every row that can run on this backend."""
        if self.rows is None:
            return [row for row in self.table.rows if row.key not in self.rows_left_out()]
        return [self.table.row(key) for key in self.rows]

    def rows_left_out(self) -> dict[str, str]:
        """Row key -> why the default selection leaves it out (no recipe for this backend); {} with --rows."""
        if self.rows is not None:
            return {}
        return {
            row.key: f"no {self.backend} recipe; has {', '.join(sorted(row.recipes))}"
            for row in self.table.rows
            if row.trains and self.backend not in row.recipes
        }

    def model_of(self, row: Row) -> str:
        """The model ``row`` runs on this backend: --model by row, by model, by size, MODEL_PATH, the table's."""
        default = row.model(self.backend)
        for key in (row.key, default, row.size):
            if key is not None and key in self.models:
                return self.models[key]
        return self.env.get("MODEL_PATH") or default

    def train_file(self, row: Row) -> Path:
        given = self.train_files.get(row.train_set)
        if given is None:
            return row.train_file(self.data_dir)
        return row.definition.train_file(Path(given).resolve())


@dataclass(frozen=True)
class Run:
    """One trained run (row x seed) or one base-model evaluation (seed None)."""

    row: Row
    seed: Optional[int]

    @property
    def name(self) -> str:
        return self.row.key if self.seed is None else f"{self.row.key}_seed{self.seed}"


def planned_runs(settings: Settings) -> list[Run]:
    runs = []
    for row in settings.selected_rows():
        runs += [Run(row, seed) for seed in settings.seeds] if row.trains else [Run(row, None)]
    return runs


def run_folder(settings: Settings, run: Run) -> Path:
    return settings.out / "runs" / run.name


def checkpoint_folder(settings: Settings, run: Run) -> Path:
    """Where a run trains (verl's trainer.default_local_dir): one folder per row and seed."""
    return settings.out / "checkpoints" / run.name


def run_identity(settings: Settings, run: Run) -> dict:
    """What a run is: recorded with its finished stages and compared before any of them is skipped."""
    row = run.row
    identity = {"table": settings.table.key, "row": row.key, "backend": settings.backend, "model": settings.model_of(row)}
    if row.trains:
        identity.update(seed=run.seed, recipe=row.recipes[settings.backend], train_file=str(settings.train_file(row)))
    if row.overrides:  # only when there are some: the identities recorded before overrides existed still match
        identity["overrides"] = list(row.overrides)
    return identity


def check_runs(settings: Settings, runs: Sequence[Run]) -> None:
    """Before anything runs: no two runs share a folder, and no folder holds a finished stage of another
    run (another table, row, backend, model, recipe, training file or overrides in the same --out)."""
    folders = [checkpoint_folder(settings, run) for run in runs if run.row.trains]
    if len(set(folders)) != len(folders):
        raise RunCollision(f"two runs would train in the same folder: {sorted(map(str, folders))}")
    for run in runs:
        for stage in ("train", "eval"):
            done = read_stage(run_folder(settings, run), stage)
            recorded = (done or {}).get("identity")
            current = run_identity(settings, run)
            if recorded is not None and recorded != current:
                changed = ", ".join(f"{key}: {recorded.get(key)!r} -> {current.get(key)!r}" for key in changed_keys(recorded, current))
                raise RunCollision(
                    f"{run_folder(settings, run)} holds a finished {stage} stage of another run ({changed}); use another "
                    f"--out for this one, or delete {run_folder(settings, run)} and {checkpoint_folder(settings, run)} to redo it"
                )


def _logger_with_file(value: Optional[str]) -> str:
    """verl's trainer.logger list with "file" added (the pipeline reads the per-step metrics from it)."""
    items = [item.strip() for item in (value or "[console]").strip("[]").split(",") if item.strip()]
    return "[" + ",".join(items + ([] if "file" in items else ["file"])) + "]"


def recipe_environment(settings: Settings, run: Run, metrics_file: Path) -> dict[str, str]:
    """The environment a row's recipe runs with: the pipeline's variables, then the user's (--set)."""
    row = run.row
    env = {**settings.env}
    env.update(
        SEED=str(run.seed),
        DATA_DIR=str(settings.data_dir),
        TRAIN_FILE=str(settings.train_file(row)),
        MODEL_PATH=settings.model_of(row),
        CKPT_DIR=str(checkpoint_folder(settings, run)),
        EXPERIMENT_NAME=f"{settings.table.key}_{run.name}",
        RUN_TAG=f"{settings.table.key}/{row.key}",
        # The recipes run verl with $PYTHON: this interpreter, whose environment has edge_verl.
        PYTHON=env.get("PYTHON", sys.executable),
    )
    env["LOGGER"] = _logger_with_file(env.get("LOGGER"))
    env["VERL_FILE_LOGGER_PATH"] = str(metrics_file)
    return env


def _stream_to(log: Path, command: list[str], env: dict[str, str], cwd: Path) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        handle.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n".encode())
        handle.flush()
        return subprocess.run(command, env={**os.environ, **env}, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd).returncode


def final_checkpoint(checkpoint_dir: Path) -> tuple[int, Path]:
    """(step, HF weights folder) of a run's latest checkpoint."""
    from edge_verl_lab.evaluation import resolve_model_dir

    step = last_checkpoint(checkpoint_dir)
    if step is None:
        raise FileNotFoundError(f"no checkpoint in {checkpoint_dir} (the recipe must save: SAVE_FREQ > 0 saves the last step)")
    return step, Path(resolve_model_dir(checkpoint_dir))


class Pipeline:
    """Runs (or, with ``dry_run``, lists) every stage of one table; ``log`` receives one line per stage."""

    def __init__(self, settings: Settings, log: Callable[[str], None] = print, cwd: Optional[Path] = None):
        self.settings = settings
        self.log = log
        self.cwd = Path(cwd or Path.cwd())

    # -- stages ------------------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        settings = self.settings
        needed_sets = [s for s in settings.table.train_sets if s not in settings.train_files]
        # each row's file in the variant its method trains on (prepare writes every variant of a set)
        names = list(dict.fromkeys(row.train_file(settings.data_dir).name for row in settings.table.rows if row.train_set in needed_sets))
        names += [f"eval_{name}.parquet" for name in EVAL_SETS]
        missing = [name for name in names if not (settings.data_dir / name).exists()]
        if not missing:
            self.log(f"skip  data: {len(names)} files in {settings.data_dir}")
            return
        if settings.dry_run:
            self.log(f"would prepare data: {missing} in {settings.data_dir}")
            return
        self.log(f"run   data: {len(missing)} files -> {settings.data_dir}")
        prepared = prepare(settings.data_dir, train_sets=needed_sets, random_source=settings.random_source)
        if prepared.failed:
            raise StageFailed("data", settings.data_dir / MANIFEST, "; ".join(prepared.failed.values()))
        for row in settings.selected_rows():
            if row.trains and not settings.train_file(row).exists():
                raise StageFailed("data", settings.data_dir / MANIFEST, f"{settings.train_file(row)} does not exist")

    def train(self, run: Run) -> Optional[dict]:
        settings, folder = self.settings, run_folder(self.settings, run)
        stage = f"train {run.name}"
        done = read_stage(folder, "train")
        if done is not None:
            self.log(f"skip  {stage}: step {done['step']} in {done['checkpoint_dir']}")
            return done
        recipe = settings.recipes_dir / run.row.recipes[settings.backend]
        attempt = len(list((folder / "metrics").glob("attempt_*.jsonl"))) + 1
        env = recipe_environment(settings, run, folder / "metrics" / f"attempt_{attempt}.jsonl")
        checkpoint_dir = checkpoint_folder(settings, run)
        command = ["bash", str(recipe), *run.row.overrides]
        if settings.dry_run:
            shown = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
            self.log(f"would run {stage}: {shown} {' '.join(command)}  -> {checkpoint_dir}")
            return None
        resumed_from = last_checkpoint(checkpoint_dir)  # the experiment rule: from there (verl's resume_mode=auto) or afresh
        resumed = f", resuming from step {resumed_from}" if resumed_from is not None else ""
        self.log(f"run   {stage}: {recipe.name} on {env['MODEL_PATH']} -> {checkpoint_dir}{resumed} (log {folder / 'train.log'})")
        (folder / "metrics").mkdir(parents=True, exist_ok=True)
        (folder / "command.json").write_text(json.dumps({"command": command, "env": env}, indent=2) + "\n")
        started = time.time()
        returncode = _stream_to(folder / "train.log", command, env, self.cwd)
        if returncode != 0:
            raise StageFailed(stage, folder / "train.log", f"{recipe.name} exited with {returncode}")
        try:
            step, weights = final_checkpoint(checkpoint_dir)
        except FileNotFoundError as error:
            raise StageFailed(stage, folder / "train.log", str(error)) from error
        record = finished_record(
            time.time() - started,
            identity=run_identity(settings, run),
            recipe=recipe.name,
            experiment_name=env["EXPERIMENT_NAME"],
            checkpoint_dir=str(checkpoint_dir),
            step=step,
            hf_weights=str(weights),
            resumed=resumed_from is not None,
        )
        return mark_stage(folder, "train", record)

    def evaluate(self, run: Run, trained: Optional[dict]) -> None:
        settings, folder = self.settings, run_folder(self.settings, run)
        stage = f"eval {run.name}"
        if read_stage(folder, "eval") is not None:
            self.log(f"skip  {stage}")
            return
        if run.row.trains:
            model = trained["hf_weights"] if trained else "<final checkpoint of the training stage>"
        else:
            model = settings.model_of(run.row)
        command = [sys.executable, "-m", "edge_verl_lab.evaluation", "--model", str(model), "--out", str(folder / "eval")]
        command += settings.evaluation.arguments()
        if settings.dry_run:
            self.log(f"would run {stage}: {' '.join(command)}")
            return
        self.log(f"run   {stage}: {model}")
        started = time.time()
        returncode = _stream_to(folder / "eval.log", command, {}, self.cwd)
        if returncode != 0 or load_eval_table(folder / "eval") is None:
            raise StageFailed(stage, folder / "eval.log", f"evaluation exited with {returncode}")
        mark_stage(folder, "eval", finished_record(
            time.time() - started, identity=run_identity(settings, run), model=str(model), settings=settings.evaluation.arguments()))

    def report(self, runs: list[Run]) -> Optional[dict]:
        settings = self.settings
        # the evaluations, the training metrics (validation, curves) and what is reported: a change redoes it
        inputs = [run_folder(settings, run) / "eval" / "eval.json" for run in runs]
        inputs += [path for run in runs if run.row.trains for path in sorted((run_folder(settings, run) / "metrics").glob("*.jsonl"))]
        digest = hashlib.sha256(
            json.dumps([REPORT_FORMAT, settings.table.key, [run.name for run in runs]]).encode()
            + b"".join(path.read_bytes() for path in inputs if path.exists())
        ).hexdigest()
        previous = read_stage(settings.out, "report")
        if previous is not None and previous.get("inputs") == digest and (settings.out / "table.json").exists():
            self.log(f"skip  report: {settings.out / 'table.md'}")
            return json.loads((settings.out / "table.json").read_text())
        plots = ["curves.png"] + [f"sensitivity_{name}.png" for name in (settings.table.sweep.points if settings.table.sweep else ())]
        if settings.dry_run:
            self.log(f"would write report: {settings.out / 'table.md'}, table.json, {', '.join(plots)}")
            return None
        loaded = {run.name: load_metrics(run_folder(settings, run)) for run in runs if run.row.trains}
        table = build_table(settings, runs, loaded)
        (settings.out / "table.json").write_text(json.dumps(table, indent=2) + "\n")
        (settings.out / "table.md").write_text(table_markdown(table) + "\n")
        curves = {metric: {} for metric in CURVES}
        for row in settings.selected_rows():
            if row.trains:
                records = [loaded[run.name] for run in runs if run.row == row]
                for metric in CURVES:  # a run that did not log the metric adds nothing to its curve
                    by_step = curves_by_step(metric_series(run_records, metric) for run_records in records)
                    if by_step:
                        curves[metric][row.label] = by_step
        plot(curves, settings.out / "curves.png", CURVES)
        written = [path.name for path in write_sensitivity_plots(table, settings.out)]
        self.log(f"wrote report: {settings.out / 'table.md'}, table.json, {', '.join(['curves.png', *written])}")
        mark_stage(settings.out, "report", {"inputs": digest})
        return table

    def run(self) -> Optional[dict]:
        runs = planned_runs(self.settings)
        check_runs(self.settings, runs)
        for key, reason in self.settings.rows_left_out().items():
            self.log(f"leave out row {key}: {reason}")
        self.prepare_data()
        for run in runs:
            trained = self.train(run) if run.row.trains else None
            self.evaluate(run, trained)
        return self.report(runs)


# --- the table (edge_verl_lab.reproduce.report) ----------------------------------------------------------------


def _percentages(eval_table: dict) -> dict[str, float]:
    """pass@1 in % by benchmark (and Avg) of one evaluation."""
    return {name: 100 * entry["pass@1"] for name, entry in eval_table.items() if "pass@1" in entry}


def _seed_label(run: Run) -> str:
    return str(run.seed) if run.seed is not None else "-"


def build_table(settings: Settings, runs: list[Run], metrics: Optional[dict[str, list[dict]]] = None) -> dict:
    """The table's JSON (``report.summarize``) from each run's ``eval/eval.json`` and, for the optimistic
    best-step section, its training metrics (``metrics``: run name -> ``load_metrics`` records; read from
    the run folders when not given)."""
    evaluated: dict[str, dict[str, dict[str, float]]] = {}
    validation: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for run in runs:
        scores = _percentages(load_eval_table(run_folder(settings, run) / "eval"))
        evaluated.setdefault(run.row.key, {})[_seed_label(run)] = scores
        if run.row.trains:
            records = metrics[run.name] if metrics is not None else load_metrics(run_folder(settings, run))
            validation.setdefault(run.row.key, {})[_seed_label(run)] = validation_series(records)
    rows = settings.selected_rows()
    header = {"backend": settings.backend, "seeds": list(settings.seeds), "evaluation": settings.evaluation.arguments()}
    models = {row.key: settings.model_of(row) for row in rows}
    return summarize(settings.table, rows, models, evaluated, validation, header, settings.rows_left_out())
