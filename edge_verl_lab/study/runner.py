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

Resumable by the run-folder protocol of ``edge_verl_lab/experiment.py``: a finished run (``done.json``, same
identity) is skipped, and so is a finished training stage (``train.done.json``: the run is only evaluated);
an interrupted training continues from its last checkpoint, which a study run saves only at its end, so in
practice it starts again with its old metrics removed. Before anything runs, every run folder is checked (``config.plan``): a folder
holding another run (another task, scale, method, seed or override: any field of its identity) is refused,
so two rows never share a run. The same seed gives every method the same tiny model, warm start and
training-data order, so methods are compared seed by seed (paired).
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Optional, TextIO

from edge_verl_lab.demo import task as tasks
from edge_verl_lab.demo.run import build_warm_model, final_weights, model_recipe, run_demo, trained_steps
from edge_verl_lab.experiment import RESUME, RESTART, finished_record, mark_stage, now, read_record, read_stage, resumption, stage_file, write_record
from edge_verl_lab.same_run import weights_digest
from edge_verl_lab.study.config import (  # noqa: F401  (re-exported: the study's names, importable from here as before)
    BASELINE,
    CALIBRATION_FILE,
    DEFAULT_METHODS,
    DEFAULT_SEEDS,
    DEFAULT_TASK,
    DONE_FILE,
    VARIANT_ROWS,
    EVAL_FILE,
    EVALUATIONS,
    IDENTITY_FILE,
    STUDY_METHODS,
    WEIGHTS_DIGEST,
    StudyConfig,
    StudyError,
    eval_file,
    method_of,
    plan,
    run_state,
)
from edge_verl_lab.study.calibrate import calibration_config, seed_calibration
from edge_verl_lab.study.cluster import study_cluster
from edge_verl_lab.study.report import INVOCATIONS_FILE, write_report

TRAIN_STAGE = "train"


def _clear_partial(folder: Path) -> None:
    for name in ("verl_metrics.jsonl", "metrics.jsonl", "metrics.png", DONE_FILE, stage_file(folder, TRAIN_STAGE).name):
        (folder / name).unlink(missing_ok=True)
    for evaluation in folder.glob("exact_eval*.json"):
        evaluation.unlink()
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # no checkpoint to resume from: what is left is partial


def evaluation_problems(config: StudyConfig) -> dict[str, list[tuple[str, str]]]:
    """evaluation="exact": split -> the (question, answer) list every model of the study is scored on."""
    task = tasks.get_task(config.task)
    return {split: [(q, a) for q, a, _ in chosen] for split, chosen in (("seen", task.seen_problems()), ("heldout", task.heldout_problems))}


def evaluation_is_current(config: StudyConfig, out_file: Path, length: Optional[int] = None) -> bool:
    """Whether ``out_file`` holds this study's evaluation (under the cap, or at ``length``): its config and, per
    split, the same problems."""
    from edge_verl_lab.study.exact_eval import problems_digest

    recorded = read_record(out_file)
    wanted = {split: problems_digest(problems) for split, problems in evaluation_problems(config).items()}
    return recorded is not None and set(recorded) == set(wanted) and all(
        recorded[split]["config"] == config.eval_config(length).as_dict() and recorded[split].get("problems_sha256") == digest
        for split, digest in wanted.items())


def evaluate_model(config: StudyConfig, model_dir: Path, out_file: Path, length: Optional[int] = None) -> dict:
    """evaluation="exact": ``exact_eval`` of ``model_dir`` on the task's seen and held-out problems (under the
    common cap, or capped at ``length``), written to ``out_file`` as {split: result}."""
    from edge_verl_lab.study.exact_eval import evaluate_problems

    task = tasks.get_task(config.task)
    result = {split: evaluate_problems(model_dir, problems, config.eval_config(length), task.data_source)
              for split, problems in evaluation_problems(config).items()}
    out_file.write_text(json.dumps(result) + "\n")
    return result


def evaluate_lengths(config: StudyConfig, model_dir: Path, folder: Path, lengths: list[Optional[int]]) -> bool:
    """Evaluate ``model_dir`` under each of ``lengths`` (None: the common cap) whose file in ``folder`` is not
    this study's. Returns whether it evaluated any."""
    stale = [length for length in lengths if not evaluation_is_current(config, folder / eval_file(length), length)]
    for length in stale:
        evaluate_model(config, model_dir, folder / eval_file(length), length)
    return bool(stale)


def reevaluate(config: StudyConfig, method: str, seed: int) -> bool:
    """evaluation="exact", a finished run: evaluate its final weights again when its evaluation file is not this
    study's (another split or evaluation config; the training is not redone). Returns whether it did."""
    folder = config.run_folder(method, seed)
    lengths = config.eval_lengths(method)
    if all(evaluation_is_current(config, folder / eval_file(length), length) for length in lengths):
        return False
    weights = final_weights(config.demo_config(method, seed))
    if not weights.is_dir():
        raise StudyError(f"run {config.run_name(method, seed)}: its evaluation is stale and its final weights ({weights}) are gone")
    return evaluate_lengths(config, weights, folder, lengths)


def check_seed_cap(config: StudyConfig, folder: Path) -> None:
    """Refuse to evaluate a seed model again under another cap than the one its evaluation file has: rows added
    to a study folder (``--methods``) share its seeds' step-0 evaluation, whose cap is the folder's."""
    recorded = read_record(folder / EVAL_FILE)
    cap = next(iter(recorded.values()))["config"]["max_new_tokens"] if recorded else config.eval_max_new_tokens
    if cap != config.eval_max_new_tokens:
        raise StudyError(f"{folder}: this study folder's seed models were evaluated under a {cap}-token cap, this invocation's is "
                         f"{config.eval_max_new_tokens} (by default its own methods' longest response): pass "
                         f"--eval-max-new-tokens {cap}, or use another --out")


def prepare_seed(config: StudyConfig, seed: int) -> Path:
    """evaluation="exact": the seed's warm-started model, built once, and its step-0 evaluation and
    calibration (``CALIBRATION_FILE``), each done once (again when its file is another config's)."""
    probe = config.demo_config(config.methods[0], seed)
    check_seed_cap(config, config.seed_model_folder(seed))
    folder = build_warm_model(model_recipe(probe), config.seed_model_folder(seed))
    evaluate_lengths(config, folder, folder, [None, *config.own_lengths()])
    calibration = read_record(folder / CALIBRATION_FILE)
    if calibration is None or calibration["config"] != calibration_config(config.temperature, config.continuation_tokens):
        write_record(folder / CALIBRATION_FILE, seed_calibration(folder, config.task, config.temperature, config.continuation_tokens), indent=1)
    return folder


def train_run(config: StudyConfig, method: str, seed: int, stream: TextIO, ray_address: Optional[str] = None) -> dict:
    """The training stage of run (method, seed), by the experiment rule: from its last checkpoint when it saved
    one, else from the start with its partial outputs removed; returns its ``train.done.json`` record.
    ``ray_address``: the study's cluster (None: the run starts its own). Raises ``StudyError`` (with the log)
    when verl failed or did not log every step."""
    folder = config.run_folder(method, seed)
    demo = replace(config.demo_config(method, seed), ray_address=ray_address)
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


def run_one(config: StudyConfig, method: str, seed: int, stream: TextIO, ray_address: Optional[str] = None,
            seed_lock: Optional[threading.Lock] = None) -> dict:
    """Train one run (unless its training stage finished before) and evaluate it; returns its ``done.json``
    record (the training's wall time and commit). ``seed_lock``: held while the seed's model is prepared (runs
    of one seed at the same time build it once). Raises ``StudyError`` when a stage failed."""
    folder = config.run_folder(method, seed)
    folder.mkdir(parents=True, exist_ok=True)
    write_record(folder / IDENTITY_FILE, config.identity(method, seed), indent=1)
    if config.evaluation == "exact":
        with seed_lock or nullcontext():
            prepare_seed(config, seed)
    trained = read_stage(folder, TRAIN_STAGE)
    if trained is None:
        trained = train_run(config, method, seed, stream, ray_address)
    else:
        stream.write(f"  {config.run_name(method, seed)}: trained earlier ({trained['seconds']} s); evaluating it\n")
    if config.evaluation == "exact":
        weights = final_weights(config.demo_config(method, seed))
        if not weights.is_dir():
            raise StudyError(f"run {config.run_name(method, seed)} saved no final weights at {weights}")
        for length in config.eval_lengths(method):
            evaluate_model(config, weights, folder / eval_file(length), length)
    # the training's time and the commit that trained it (what the report states); finished: after the evaluation
    done = {"seconds": trained["seconds"], "finished": now(), "commit": trained.get("commit"), "modified": trained.get("modified")}
    if config.evaluation == "exact":
        done[WEIGHTS_DIGEST] = weights_digest(weights)
    return write_record(folder / DONE_FILE, done)


class _Prefixed:
    """A stream whose lines start with ``prefix`` (one run's progress among others')."""

    def __init__(self, stream: TextIO, prefix: str):
        self.stream, self.prefix, self.lock = stream, prefix, threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            lines = text.splitlines(keepends=True)
            self.stream.write("".join(self.prefix + line for line in lines))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def _preload_evaluation() -> None:
    """Import what an evaluation imports, once, in this thread: transformers' lazy modules are not safe to
    import from two threads at once."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    from edge_verl.reward import compute_score  # noqa: F401
    from edge_verl_lab.study import exact_eval  # noqa: F401


def _run_all(config: StudyConfig, todo: list[tuple[str, int]], jobs: int, ray_address: Optional[str], stream: TextIO,
             started: float) -> Optional[StudyError]:
    """Every run of ``todo``, ``jobs`` at a time in run order; after a failed run no new run starts (those
    running finish). Returns the first failure."""
    locks = {seed: threading.Lock() for seed in config.seeds}
    queue = list(enumerate(todo, 1))
    failure: Optional[StudyError] = None

    def one(number: int, method: str, seed: int) -> dict:
        name = config.run_name(method, seed)
        stream.write(f"[{number}/{len(todo)}] {name} ({time.time() - started:.0f} s so far)\n")
        stream.flush()
        return run_one(config, method, seed, _Prefixed(stream, f"  {name}: ") if jobs > 1 else stream, ray_address, locks[seed])

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        running: set = set()
        while running or (queue and failure is None):
            while queue and failure is None and len(running) < jobs:
                number, (method, seed) = queue.pop(0)
                running.add(pool.submit(one, number, method, seed))
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                error = future.exception()
                if isinstance(error, StudyError):
                    failure = failure or error
                elif error is not None:
                    queue.clear()
                    raise error
    return failure


def run_study(config: StudyConfig, stream: Optional[TextIO] = None, dry_run: bool = False, jobs: int = 1) -> Optional[dict]:
    """Every run not yet done, then the report; returns the report (None for a dry run). All runs train on one
    Ray cluster that this invocation starts (``cluster.study_cluster``), ``jobs`` at a time. Stops starting
    runs at the first failed run and, once the running ones finished, writes the report of the runs that
    finished and raises. ``stream``: progress (default stdout). Each invocation that trained or evaluated
    anything appends its wall time, ``jobs`` and commit to ``INVOCATIONS_FILE``."""
    stream = stream or sys.stdout
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be an integer >= 1")

    states = plan(config)
    todo = [(method, seed) for method, seed, state in states if state != "done"]
    stream.write(f"edge-verl study: task {config.task}, {len(config.methods)} methods x {len(config.seeds)} seeds x "
                 f"{config.steps} steps; {len(states) - len(todo)} of {len(states)} runs done, out={config.out}"
                 f"{f', {jobs} at a time' if jobs > 1 and todo else ''}\n")
    if dry_run:
        for method, seed, state in states:
            stream.write(f"  {config.run_name(method, seed):<28}{state}\n")
        return None
    started = time.time()
    evaluated_again = []
    if config.evaluation == "exact":  # finished runs whose evaluation is stale (a changed split): evaluated again
        for method, seed, state in states:
            if state == "done":
                prepare_seed(config, seed)
                if reevaluate(config, method, seed):
                    evaluated_again.append(config.run_name(method, seed))
                    stream.write(f"  {config.run_name(method, seed)}: evaluated again (its evaluation file was another split's)\n")
    failure = None
    jobs = max(1, min(jobs, len(todo)))  # no more at a time than there are runs
    if todo:
        if config.evaluation == "exact":
            _preload_evaluation()
        with study_cluster(jobs) as address:
            failure = _run_all(config, todo, jobs, address, stream, started)
    if todo or evaluated_again:
        record = finished_record(time.time() - started, jobs=jobs,
                                 trained=[config.run_name(method, seed) for method, seed in todo if run_state(config, method, seed) == "done"],
                                 evaluated_again=evaluated_again)
        with open(config.out / INVOCATIONS_FILE, "a") as handle:
            handle.write(json.dumps(record) + "\n")
    report = write_report(config)
    stream.write(f"report: {config.out / 'report.md'} ({time.time() - started:.0f} s this invocation)\n")
    if failure is not None:
        raise failure
    return report
