"""The study's runs: every (method, seed) is one ``edge-verl demo`` run (verl's real ``main_ppo`` on CPU)
on the study's task, validated uncorrected on the task's seen and held-out problems; then the report.

Layout under ``OUT``: ``runs/<method>_seed<N>/`` (the demo's files: ``metrics.jsonl``, ``verl.log``,
``command.txt``, ``model/``, ``data/``) with ``study_run.json`` (what the run is: its identity, written
before it starts), ``train.done.json`` (verl exited 0 with every step logged: its wall time and commit) and,
once evaluated, ``done.json`` (the run is finished); then ``report.md``, ``report.json`` and ``curves.png``
(``report``).

``--evaluation exact`` (edge_verl_lab/study/exact_eval.py): every method of a seed trains from one warm-started
model (``models/seed<N>/``, built once, its step-0 evaluation ``exact_eval.json`` done once); verl does not
validate; each run saves its final weights and is evaluated offline (``runs/<run>/exact_eval.json``) under one
token cap, with samples seeded per problem, so two evaluations of one checkpoint are identical.

An evaluation file records its problems' digest and config: a finished run whose file is another split's
or config's is evaluated again from its final weights, without training again.

Resumable by the rule ``edge-verl reproduce`` follows (``edge_verl_lab/experiment.py``): a finished run
(``done.json``, same identity) is skipped, and so is a finished training stage (``train.done.json``: the
run is only evaluated); an interrupted training continues from its last checkpoint when it saved one, and
otherwise starts again with its old metrics removed (the study saves only the final checkpoint, so in
practice it starts again). Before anything runs, every run folder is checked (``config.plan``): a folder
holding another run (another task, scale, method, seed or override: any field of its identity) is refused,
so two rows never share a run. The same seed gives every method the same tiny model, warm start and
training-data order, so methods are compared seed by seed (paired).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional, TextIO

from edge_verl_lab.demo import task as tasks
from edge_verl_lab.demo.run import DemoConfig, build_warm_model, final_weights, model_recipe, run_demo, trained_steps
from edge_verl_lab.experiment import RESUME, RESTART, finished_record, mark_stage, now, read_record, read_stage, resumption, stage_file, write_record
from edge_verl_lab.study.config import (  # noqa: F401  (re-exported: the study's names, importable from here as before)
    BASELINE,
    CALIBRATION_FILE,
    DEFAULT_METHODS,
    DEFAULT_SEEDS,
    DEFAULT_TASK,
    DONE_FILE,
    EDA_FORM_ROWS,
    EVAL_FILE,
    EVALUATIONS,
    IDENTITY_FILE,
    STUDY_METHODS,
    StudyConfig,
    StudyError,
    method_of,
    plan,
    run_state,
)
from edge_verl_lab.study.calibrate import calibration_config, seed_calibration
from edge_verl_lab.study.report import write_report

TRAIN_STAGE = "train"


def _clear_partial(folder: Path) -> None:
    for name in ("verl_metrics.jsonl", "metrics.jsonl", "metrics.png", DONE_FILE, EVAL_FILE, stage_file(folder, TRAIN_STAGE).name):
        (folder / name).unlink(missing_ok=True)
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # no checkpoint to resume from: what is left is partial


def evaluation_problems(config: StudyConfig) -> dict[str, list[tuple[str, str]]]:
    """evaluation="exact": split -> the (question, answer) list every model of the study is scored on."""
    task = tasks.get_task(config.task)
    return {split: [(q, a) for q, a, _ in chosen] for split, chosen in (("seen", task.seen_problems()), ("heldout", task.heldout_problems))}


def evaluation_is_current(config: StudyConfig, out_file: Path) -> bool:
    """Whether ``out_file`` holds this study's evaluation: its config and, per split, the same problems."""
    from edge_verl_lab.study.exact_eval import problems_digest

    recorded = read_record(out_file)
    wanted = {split: problems_digest(problems) for split, problems in evaluation_problems(config).items()}
    return recorded is not None and set(recorded) == set(wanted) and all(
        recorded[split]["config"] == config.eval_config().as_dict() and recorded[split].get("problems_sha256") == digest
        for split, digest in wanted.items())


def evaluate_model(config: StudyConfig, model_dir: Path, out_file: Path) -> dict:
    """evaluation="exact": ``exact_eval`` of ``model_dir`` on the task's seen and held-out problems, written
    to ``out_file`` as {split: result}."""
    from edge_verl_lab.study.exact_eval import evaluate_problems

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
    """evaluation="exact": the seed's warm-started model, built once, and its step-0 evaluation and
    calibration (``CALIBRATION_FILE``), each done once (again when its file is another config's)."""
    probe = config.demo_config(config.methods[0], seed)
    folder = build_warm_model(model_recipe(probe), config.seed_model_folder(seed))
    if not evaluation_is_current(config, folder / EVAL_FILE):
        evaluate_model(config, folder, folder / EVAL_FILE)
    calibration = read_record(folder / CALIBRATION_FILE)
    if calibration is None or calibration["config"] != calibration_config(config.temperature, config.continuation_tokens):
        write_record(folder / CALIBRATION_FILE, seed_calibration(folder, config.task, config.temperature, config.continuation_tokens), indent=1)
    return folder


def train_run(config: StudyConfig, method: str, seed: int, stream: TextIO) -> dict:
    """The training stage of run (method, seed), by the experiment rule: from its last checkpoint when it saved
    one, else from the start with its partial outputs removed; returns its ``train.done.json`` record.
    Raises ``StudyError`` (with the log) when verl failed or did not log every step."""
    folder = config.run_folder(method, seed)
    demo = config.demo_config(method, seed)
    how = resumption(folder / "checkpoints")
    if how == RESTART:
        _clear_partial(folder)
    else:
        demo = replace(demo, resume=True)  # verl's resume_mode=auto; the demo keeps the rows already logged
        stream.write(f"  {config.run_name(method, seed)}: resuming from its last checkpoint\n")
    result = run_demo(demo, stream=stream)
    steps = [row["step"] for row in trained_steps(result["rows"])]
    if result["returncode"] != 0:
        raise StudyError(f"run {config.run_name(method, seed)} failed (verl exit {result['returncode']}); log: {folder / 'verl.log'}")
    if steps != list(range(1, config.steps + 1)):
        raise StudyError(f"run {config.run_name(method, seed)} logged steps {steps}, not 1..{config.steps}; log: {folder / 'verl.log'}")
    return mark_stage(folder, TRAIN_STAGE, finished_record(result["seconds"], steps=config.steps, resumed=how == RESUME))


def run_one(config: StudyConfig, method: str, seed: int, stream: TextIO) -> dict:
    """Train one run (unless its training stage finished before) and evaluate it; returns its ``done.json``
    record (the training's wall time and commit). Raises ``StudyError`` when a stage failed."""
    folder = config.run_folder(method, seed)
    folder.mkdir(parents=True, exist_ok=True)
    write_record(folder / IDENTITY_FILE, config.identity(method, seed), indent=1)
    if config.evaluation == "exact":
        prepare_seed(config, seed)
    trained = read_stage(folder, TRAIN_STAGE)
    if trained is None:
        trained = train_run(config, method, seed, stream)
    else:
        stream.write(f"  {config.run_name(method, seed)}: trained earlier ({trained['seconds']} s); evaluating it\n")
    if config.evaluation == "exact":
        weights = final_weights(config.demo_config(method, seed))
        if not weights.is_dir():
            raise StudyError(f"run {config.run_name(method, seed)} saved no final weights at {weights}")
        evaluate_model(config, weights, folder / EVAL_FILE)
    # the training's time and the commit that trained it (what the report states); finished: after the evaluation
    done = {"seconds": trained["seconds"], "finished": now(), "commit": trained.get("commit"), "modified": trained.get("modified")}
    return write_record(folder / DONE_FILE, done)


def run_study(config: StudyConfig, stream: Optional[TextIO] = None, dry_run: bool = False) -> Optional[dict]:
    """Every run not yet done, then the report; returns the report (None for a dry run). Stops at the first
    failed run, after writing the report of the runs that finished. ``stream``: progress (default stdout)."""
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
