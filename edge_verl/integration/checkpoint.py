"""A run's training state with verl's checkpoints: ``edge_verl_state.json`` in each of verl's ``global_step_N``
checkpoint folders, written after verl's own checkpoint (``_save_checkpoint``) and read back on resume
(``_load_checkpoint``, which also creates the run: ``trainer_run.start_run``), each estimator's state under its
``state_key`` (an estimator without state has no file). The trainers' wrappers that call these are in
``trainer_run.py`` (``wrap_load_checkpoint``, ``wrap_save_checkpoint``); ``run`` is its ``TrainingRun``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

STATE_FILE = "edge_verl_state.json"


def resumed_folder(trainer: Any) -> Optional[str]:
    """The checkpoint folder verl's trainer resumed from (None: it started afresh)."""
    if trainer.global_steps <= 0:
        return None
    config = trainer.config.trainer
    if config.resume_mode == "resume_path":
        folder = config.resume_from_path
    else:
        folder = os.path.join(config.default_local_dir, f"global_step_{trainer.global_steps}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)

def save_state(checkpoint_dir: str, state: dict) -> str:
    """Write ``state`` atomically into ``checkpoint_dir``; returns the file's path."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    path = os.path.join(checkpoint_dir, STATE_FILE)
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(state, handle, indent=2)
    os.replace(temporary, path)
    return path

def read_state(checkpoint_dir: str) -> Optional[dict]:
    path = os.path.join(checkpoint_dir, STATE_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)

def restore_run_state(run: Any, checkpoint_dir: str) -> None:
    """Restore the estimator's training state saved in ``checkpoint_dir`` into ``run`` (nothing to do for an
    estimator without state).

    A checkpoint without the state is an error unless the estimator's options accept it
    (``resume_without_state``, ``Estimator.resume_without_state``: ``gepo.resume_without_state``), in which case the state starts
    afresh from the next batch.
    """
    if run.state is None:
        return
    entry = run.entry
    saved = (read_state(checkpoint_dir) or {}).get(entry.state_key)
    if saved is None:
        if entry.resume_without_state(run.options):
            return
        raise RuntimeError(
            f"Resuming {entry.name} from {checkpoint_dir}, which holds no {entry.state_key} ({STATE_FILE}). Set "
            f"algorithm.{entry.name}.resume_without_state=true to restart them from the next batch."
        )
    run.state.load_state_dict(saved)
