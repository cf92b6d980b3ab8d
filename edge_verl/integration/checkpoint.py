"""A run's training state with verl's checkpoints: ``edge_verl_state.json`` in each of verl's ``global_step_N``
checkpoint folders, written after verl's own checkpoint (``_save_checkpoint``) and read back on resume
(``_load_checkpoint``, which also creates the run: ``run.start_run``), each estimator's state under its
``state_key`` (an estimator without state has no file).
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Optional

from edge_verl.integration.run import TrainingRun, run_of

STATE_FILE = "edge_verl_state.json"


def _resumed_folder(trainer: Any) -> Optional[str]:
    if trainer.global_steps <= 0:
        return None
    config = trainer.config.trainer
    if config.resume_mode == "resume_path":
        folder = config.resume_from_path
    else:
        folder = os.path.join(config.default_local_dir, f"global_step_{trainer.global_steps}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)

def wrap_load_checkpoint(original: Callable) -> Callable:
    def _load_checkpoint(self, *args, **kwargs):
        run = run_of(self)
        result = original(self, *args, **kwargs)
        folder = _resumed_folder(self)
        if run is not None and folder is not None:
            restore_run_state(run, folder)
        return result

    return _load_checkpoint

def wrap_save_checkpoint(original: Callable) -> Callable:
    def _save_checkpoint(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        run = run_of(self)
        if run is not None and run.state is not None:
            save_state(os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"), run.state_dict())
        return result

    return _save_checkpoint

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

def restore_run_state(run: TrainingRun, checkpoint_dir: str) -> None:
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
