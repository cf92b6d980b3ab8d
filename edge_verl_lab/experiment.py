"""The run folders of an experiment pipeline: one protocol for ``edge-verl reproduce`` (a paper table's rows x
seeds through the recipes) and ``edge-verl study`` (methods x seeds of the demo on a CPU task).

- **Identity.** Each pipeline describes a run by one dict of everything that makes it what it is (its keys
  are the pipeline's: table, row, model, recipe... or task, method, scale...). It is recorded with the run
  and compared before anything runs (``changed_keys``): a folder that records another identity is refused,
  naming every key that differs, so two rows never share a run and a changed setting never reuses a result.
- **Stages.** A stage that finished (training, evaluation) wrote its record (``finished_record``: its wall
  seconds, when it finished and the source commit that ran it, so a report says which code made its
  numbers) and is skipped next time.
- **Resumption** (``resumption``): an unfinished training stage continues from its last verl checkpoint
  when it saved one (verl's ``trainer.resume_mode=auto``; the checkpoint folder's own identity,
  ``edge_verl/run_identity.py``, guarantees it is the same run) and otherwise starts over, its partial
  outputs removed first. A study run saves only its final checkpoint, so it either starts over or, when
  it was interrupted after training, is only evaluated.

Pure: files and git, no verl.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Mapping, Optional

from edge_verl.run_identity import CHECKPOINT_MARKER  # verl's file of the latest checkpoint's step

RESUME, RESTART = "resume", "restart"
DONE_SUFFIX = ".done.json"


def source_commit() -> dict:
    """{commit, modified} of the source tree this package runs from (commit None outside a git checkout)."""
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> Optional[str]:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "modified": bool(status) if status is not None else None}


def changed_keys(recorded: Mapping, wanted: Mapping) -> list[str]:
    """The identity keys whose values differ (a key present on one side only counts), in the order the
    current identity names them, then the recorded one's."""
    keys = dict.fromkeys([*wanted, *recorded])
    return [key for key in keys if recorded.get(key) != wanted.get(key)]


def read_record(path: Path) -> Optional[dict]:
    """A JSON record, None when the file does not exist."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def write_record(path: Path, record: Mapping, indent: Optional[int] = None) -> dict:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(record), indent=indent) + "\n")
    return dict(record)


def stage_file(folder: Path, stage: str) -> Path:
    """Where stage ``stage`` ("train", "eval", "report") of the run in ``folder`` records that it finished."""
    return Path(folder) / f"{stage}{DONE_SUFFIX}"


def read_stage(folder: Path, stage: str) -> Optional[dict]:
    """The finished stage's record, None when it has not finished."""
    return read_record(stage_file(folder, stage))


def mark_stage(folder: Path, stage: str, record: Mapping) -> dict:
    """Record that ``stage`` finished (written last: a stage interrupted before this line runs again)."""
    return write_record(stage_file(folder, stage), record, indent=2)


def now() -> str:
    """The local time as records write it (ISO 8601 with the UTC offset)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def finished_record(seconds: float, **fields) -> dict:
    """The record of a finished stage: ``fields``, its wall seconds, when it finished, and the source commit."""
    return {**fields, "seconds": round(float(seconds), 1), "finished": now(), **source_commit()}


def last_checkpoint(checkpoint_dir: Path) -> Optional[int]:
    """The step of the last checkpoint verl saved in ``checkpoint_dir`` (None: none)."""
    marker = Path(checkpoint_dir) / CHECKPOINT_MARKER
    if not marker.is_file():
        return None
    text = marker.read_text().strip()
    return int(text) if text.isdigit() else None


def resumption(checkpoint_dir: Path) -> str:
    """How an unfinished training stage continues: ``RESUME`` from its last checkpoint, or ``RESTART``."""
    return RESUME if last_checkpoint(checkpoint_dir) is not None else RESTART
