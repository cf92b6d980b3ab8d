"""A training run's identity, recorded in its checkpoint folder so that no run resumes another's checkpoint.

verl's ``trainer.resume_mode=auto`` loads whatever checkpoint it finds in ``trainer.default_local_dir``.
The recipes name that folder after the run (method, model, training set, backend, seed; ``reproduce`` adds
its table row as the run's ``tag``) and, before verl starts, ``edge-verl preflight`` (or ``edge-verl
run-identity``) compares the run with the identity recorded in the folder by the run that created it:
same identity -> resume as verl does; different, and the folder holds a checkpoint -> stop and say which
setting differs and what to delete or pass; no record yet, or a record but no checkpoint (a run that
failed before saving) -> record this run's identity. A folder that holds checkpoints but no record is
refused: nobody knows what wrote it.

The training data is identified by its content (sha256), not its path, so a re-prepared copy elsewhere
still resumes while a different file under the same name does not. An identity is only ever described
from files that exist (``describe`` raises otherwise), so no record is written before its inputs are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from edge_verl.data import sha256

IDENTITY_FILE = "edge_verl_run.json"
KEYS = ("method", "model", "train_data", "backend", "seed", "tag")
CHECKPOINT_MARKER = "latest_checkpointed_iteration.txt"


class RunIdentityMismatch(RuntimeError):
    pass


def _train_entry(train_file: str) -> dict:
    """{path, sha256} of a local training file; {path} of a remote one (``scheme://``, read by verl)."""
    if "://" in str(train_file):
        return {"path": str(train_file)}
    path = Path(train_file).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"training file {train_file} not found (relative to {Path.cwd()}): no run identity is recorded for data "
            "that does not exist; write it with `python scripts/prepare_data.py --out DIR` or fix TRAIN_FILE."
        )
    return {"path": str(path.resolve()), "sha256": sha256(path)}


def describe(
    method: str, model: str, train_file: str | Sequence[str], backend: str, seed: int | str, tag: str = ""
) -> dict:
    """The identity of a run. Local paths are made absolute; every training file must exist and is
    identified by its sha256 (its path is kept for the message). ``train_file``: one path or several
    (verl's ``data.train_files`` list). ``tag``: what else tells runs apart (``reproduce``: table and row)."""
    model_path = Path(model).expanduser()
    files = [train_file] if isinstance(train_file, (str, Path)) else list(train_file)
    if not files:
        raise ValueError("a run identity needs at least one training file")
    entries = [_train_entry(str(path)) for path in files]
    return {
        "method": str(method),
        "model": str(model_path.resolve()) if model_path.exists() else str(model),
        "train_data": entries[0] if len(entries) == 1 else entries,
        "backend": str(backend),
        "seed": str(seed),
        "tag": str(tag),
    }


def _same_file(recorded: dict, current: dict) -> bool:
    if "sha256" in recorded and "sha256" in current:
        return recorded["sha256"] == current["sha256"]
    return recorded.get("path") == current.get("path")


def _same(key: str, recorded, current) -> bool:
    if key == "tag":  # records written before tags existed carry none
        return str(recorded or "") == str(current or "")
    if key == "train_data":
        recorded_files = recorded if isinstance(recorded, list) else [recorded]
        current_files = current if isinstance(current, list) else [current]
        return len(recorded_files) == len(current_files) and all(
            isinstance(a, dict) and isinstance(b, dict) and _same_file(a, b) for a, b in zip(recorded_files, current_files)
        )
    return recorded == current


def differences(recorded: dict, current: dict) -> list[str]:
    """One line per identity key whose value differs: ``key: recorded -> current``."""
    lines = []
    for key in KEYS:
        if not _same(key, recorded.get(key), current.get(key)):
            lines.append(f"{key}: {json.dumps(recorded.get(key))} (checkpoint) vs {json.dumps(current.get(key))} (this run)")
    return lines


def check_or_record(checkpoint_dir: Path, identity: dict) -> str:
    """Record ``identity`` in a new folder, or check it against the recorded one; returns what happened.

    Raises ``RunIdentityMismatch`` naming every differing setting, or when the folder holds checkpoints
    without a record.
    """
    folder = Path(checkpoint_dir)
    record = folder / IDENTITY_FILE
    has_checkpoint = (folder / CHECKPOINT_MARKER).exists()
    if record.exists():
        recorded = json.loads(record.read_text())
        lines = differences(recorded, identity)
        if not lines:
            return "resuming" if has_checkpoint else "matches"
        if has_checkpoint:
            step = (folder / CHECKPOINT_MARKER).read_text().strip()
            raise RunIdentityMismatch(
                f"{folder} holds checkpoints (latest step {step}) of another run; verl would resume from them. "
                "Differences:\n  " + "\n  ".join(lines) + "\nEither pass the recorded settings to resume that run, "
                f"or give this run its own folder (CKPT_DIR, or EXPERIMENT_NAME under CKPT_ROOT), or delete {folder} "
                "to start over."
            )
        outcome = "re-recorded (the recorded run left no checkpoint)"
    elif has_checkpoint:
        raise RunIdentityMismatch(
            f"{folder} holds verl checkpoints but no {IDENTITY_FILE}: it was not written by this run's recipe, and "
            f"verl would resume from it. Give this run its own folder (CKPT_DIR), or delete {folder} to start over."
        )
    else:
        outcome = "recorded"
    folder.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(identity, indent=2) + "\n")
    return outcome


def recorded_identity(checkpoint_dir: Path) -> Optional[dict]:
    record = Path(checkpoint_dir) / IDENTITY_FILE
    return json.loads(record.read_text()) if record.exists() else None
