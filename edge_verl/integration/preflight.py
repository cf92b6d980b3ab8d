"""Before Ray: the preflight. Every check of the plugin's options that needs only verl's composed config and the
data files, in the driver (seconds instead of minutes after worker spawn and model load). A plain
``python -m verl.trainer.main_ppo ...`` runs it right after verl's own ``validate_config`` (``plugin.py`` wraps
it), where a failure ends the process with the message as its last lines (``PreflightFailed`` -> exit code 2);
``edge-verl preflight`` runs the same checks on the config composed from the recipes' overrides without importing
verl. Checked: the run's options and their relations (``run.check_run_config``: the estimator's options, EDA's
gradient form and its prerequisite (``actor.calculate_entropy``), GEC's switch, rollout settings, token budgets
and, for a placebo rewarded as gold, verl's reward settings); the data files (exist; a GEC run's training rows
carry ``agent_name`` and the ground truth GEC grades with; no validation row is marked for GEC); a placebo run's
pool of answers (``read_placebo_pool``, also read by the agent loop). The reflection phrase's token count, which
needs the tokenizer, is checked when the agent loop starts. pyarrow is imported only here, inside the functions.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from edge_verl.algorithms.gec import PlaceboProblem
from edge_verl.integration.run import TrainingRun
from edge_verl.integration.run_checks import check_gec_rows, check_run_config

EXIT_CODE = 2
PREFIX = "edge-verl preflight"


class PreflightFailed(SystemExit):
    """A preflight error. A ``SystemExit`` so that Hydra's error reporting does not bury the message under
    a traceback: the process ends with ``EXIT_CODE`` and the message is the last thing printed."""

    def __init__(self, message: str):
        super().__init__(EXIT_CODE)
        self.message = message

    def __str__(self) -> str:
        return self.message


# --- the data files ------------------------------------------------------------------------------------------


def data_paths(value: Any) -> list[str]:
    """``data.train_files`` / ``data.val_files`` (one path, or a list) as a list of strings."""
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return [str(value)]
    return [str(item) for item in value]

def _is_local(path: str) -> bool:
    return "://" not in path  # hdfs://, s3://, ...: verl copies those itself; nothing to check here

def check_files_exist(key: str, paths: Sequence[str]) -> list[Path]:
    """The local files of ``data.<key>``; a missing one is an error naming the key and how to make it."""
    local = [Path(path).expanduser() for path in paths if _is_local(path)]
    missing = [str(path) for path in local if not path.is_file()]
    if missing:
        raise FileNotFoundError(
            f"data.{key}: {', '.join(missing)} not found (relative paths are relative to {Path.cwd()}); write the "
            "papers' sets with `python scripts/prepare_data.py --out DIR` and point DATA_DIR / TRAIN_FILE there."
        )
    return local

def parquet_column(path: Path, column: str) -> Optional[list]:
    """One column of a parquet file ([] when it has no such column; None when the file is not parquet)."""
    if path.suffix != ".parquet":
        return None
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    if column not in schema.names:
        return []
    return pq.read_table(path, columns=[column]).column(column).to_pylist()

def _column_of(paths: Sequence[Path], column: str) -> Optional[list]:
    values: list = []
    for path in paths:
        found = parquet_column(path, column)
        if found is None:
            return None
        values += found
    return values

def check_gec_ground_truth(paths: Sequence[Path]) -> None:
    """GEC grades each response and injects the answer: its training rows need ``reward_model.ground_truth``."""
    import pyarrow.parquet as pq

    for path in paths:
        if path.suffix != ".parquet":
            continue
        schema = pq.read_schema(path)
        field = schema.field("reward_model") if "reward_model" in schema.names else None
        subfields = {field.type.field(i).name for i in range(field.type.num_fields)} if field is not None and hasattr(field.type, "num_fields") else set()
        if "ground_truth" not in subfields:
            raise ValueError(
                f"{path}: GEC grades responses against reward_model.ground_truth, which this file lacks; "
                "write the training set with scripts/prepare_data.py (train_*_gec.parquet)."
            )

def read_placebo_pool(train_files: Any) -> tuple[PlaceboProblem, ...]:
    """Every training problem with an answer, for answer_source=placebo (see the module docstring).

    ``train_files`` is verl's ``data.train_files``: one parquet path or a list of them (hdfs paths are
    copied as verl's RLHFDataset copies them), read in order, their rows numbered across the files as
    verl concatenates them. Columns as scripts/prepare_data.py writes them: the answer is
    ``extra_info.answer``, else the first of ``reward_model.ground_truth``; the solution
    ``extra_info.solution`` ("" when absent: such a problem lends no solution). A row with no answer lends
    nothing. Every row of the files counts: ``data.max_samples`` and verl's prompt-length filter do not
    apply here. A file that cannot be read as parquet or has neither column, or fewer than 2 problems
    with an answer in all, is an error.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from edge_verl.reward.normalize import normalise_answer
    from edge_verl.reward.score import gold_answers

    paths = [train_files] if isinstance(train_files, str) else list(train_files or ())
    pool: list[PlaceboProblem] = []
    row = 0
    for path in paths:
        try:
            local = str(path)
            if not _is_local(local):  # hdfs: copied as verl's RLHFDataset copies it (verl imported only then)
                from verl.utils.fs import copy_to_local

                local = copy_to_local(local)
            present = [name for name in ("extra_info", "reward_model") if name in pq.read_schema(local).names]
            table = pq.read_table(local, columns=present)
        except (OSError, pa.ArrowException) as error:
            raise ValueError(
                f"edge_gec.answer_source=placebo reads its answers from data.train_files, but {path!r} cannot be "
                f"read as parquet ({error}); list parquet files this worker can open, or use answer_source=gold."
            ) from error
        if not present:
            raise ValueError(
                f"edge_gec.answer_source=placebo: the training file {path!r} has neither an extra_info nor a "
                "reward_model column, so it holds no answers (write it with scripts/prepare_data.py)."
            )
        empty = [None] * table.num_rows
        extras = table.column("extra_info").to_pylist() if "extra_info" in present else empty
        rewards = table.column("reward_model").to_pylist() if "reward_model" in present else empty
        for extra_info, reward_model in zip(extras, rewards):
            extra_info = extra_info or {}
            answer = str(extra_info.get("answer") or "").strip()
            answer = answer or next(iter(gold_answers((reward_model or {}).get("ground_truth"))), "")
            if answer:
                solution = str(extra_info.get("solution") or "")
                pool.append(PlaceboProblem(row, answer, solution, normalise_answer(answer)))
            row += 1
    if len(pool) < 2:
        raise ValueError(
            f"edge_gec.answer_source=placebo lends one training problem's answer to another, but "
            f"data.train_files={paths} hold {len(pool)} problem(s) with an answer (extra_info.answer or "
            "reward_model.ground_truth); at least 2 are needed."
        )
    return tuple(pool)

def check_data(config: Any, run: TrainingRun) -> None:
    """The data files exist, GEC's switch agrees with their ``agent_name`` column, and a placebo run's
    training files lend answers (``read_placebo_pool``)."""
    data = config.get("data", None) or {}
    train = check_files_exist("train_files", data_paths(data.get("train_files", None)))
    val = check_files_exist("val_files", data_paths(data.get("val_files", None)))
    agent = config.actor_rollout_ref.rollout.get("agent", None) or {}
    check_gec_rows(
        run.gec_enabled, agent.get("default_agent_loop", None), _column_of(train, "agent_name"), _column_of(val, "agent_name")
    )
    if run.gec_enabled:
        check_gec_ground_truth(train)
        if run.gec.answer_source == "placebo":
            read_placebo_pool(data_paths(data.get("train_files", None)))

def preflight(config: Any) -> TrainingRun:
    """All of the above on verl's composed config; raises ``ValueError`` / ``FileNotFoundError`` with the
    message a user acts on. Returns the validated ``TrainingRun``."""
    run = check_run_config(config)
    check_data(config, run)
    return run

def preflight_or_exit(config: Any) -> TrainingRun:
    """``preflight`` for a command line: an error becomes ``PreflightFailed`` (message printed last)."""
    try:
        return preflight(config)
    except (ValueError, FileNotFoundError) as error:
        message = f"{PREFIX}: {error}"
        print(message, file=sys.stderr, flush=True)
        raise PreflightFailed(message) from None
