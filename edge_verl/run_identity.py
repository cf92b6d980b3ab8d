"""A training run's identity, recorded in its checkpoint folder so that no run resumes another's checkpoint.

verl's ``trainer.resume_mode=auto`` loads whatever checkpoint it finds in ``trainer.default_local_dir``.
The recipes name that folder after the run (method, model, training set, backend, seed) and, before verl
starts, ``edge-verl run-identity`` compares the run with the identity recorded in the folder by the run
that created it: same identity -> resume as verl does; different -> stop and say which setting differs;
no record yet -> record it (a folder that already holds checkpoints but no record is refused: nobody
knows what wrote it).

The training data is identified by its content (sha256), not its path, so a re-prepared copy elsewhere
still resumes while a different file under the same name does not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from edge_verl.data import sha256

IDENTITY_FILE = "edge_verl_run.json"
KEYS = ("method", "model", "train_data", "backend", "seed")


class RunIdentityMismatch(RuntimeError):
    pass


def describe(method: str, model: str, train_file: str, backend: str, seed: int | str) -> dict:
    """The identity of a run. Local paths are made absolute; a training file that exists is identified by
    its sha256 (its path is kept for the message)."""
    model_path = Path(model).expanduser()
    train_path = Path(train_file).expanduser()
    train = {"path": str(train_path.resolve()) if train_path.exists() else str(train_file)}
    if train_path.is_file():
        train["sha256"] = sha256(train_path)
    return {
        "method": str(method),
        "model": str(model_path.resolve()) if model_path.exists() else str(model),
        "train_data": train,
        "backend": str(backend),
        "seed": str(seed),
    }


def _same(key: str, recorded, current) -> bool:
    if key == "train_data" and isinstance(recorded, dict) and isinstance(current, dict):
        if "sha256" in recorded and "sha256" in current:
            return recorded["sha256"] == current["sha256"]
        return recorded.get("path") == current.get("path")
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
    if record.exists():
        recorded = json.loads(record.read_text())
        lines = differences(recorded, identity)
        if lines:
            raise RunIdentityMismatch(
                f"{folder} holds checkpoints of another run; verl would resume from them. Differences:\n  "
                + "\n  ".join(lines)
                + "\nUse another CKPT_DIR (or EXPERIMENT_NAME), or delete that folder to start over."
            )
        return "resuming" if (folder / "latest_checkpointed_iteration.txt").exists() else "matches"
    if (folder / "latest_checkpointed_iteration.txt").exists():
        raise RunIdentityMismatch(
            f"{folder} holds verl checkpoints but no {IDENTITY_FILE}: it was not written by this run's recipe, and "
            "verl would resume from it. Use another CKPT_DIR, or delete the folder to start over."
        )
    folder.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(identity, indent=2) + "\n")
    return "recorded"


def recorded_identity(checkpoint_dir: Path) -> Optional[dict]:
    record = Path(checkpoint_dir) / IDENTITY_FILE
    return json.loads(record.read_text()) if record.exists() else None
