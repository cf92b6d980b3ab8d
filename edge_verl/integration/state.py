"""The plugin's cross-step training state on disk: ``edge_verl_state.json`` in verl's checkpoint folders.

Only an estimator with training state has such a file (GEPO: its EMA thresholds, owned by the run's
``TrainingRun``, ``features.Estimator.state``); the trainer
hooks write the file next to verl's own checkpoint of every ``global_step_N`` and read it on resume.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from edge_verl.names import STATE_FILE
from edge_verl.integration.run import TrainingRun


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
    (``Estimator.resume_without_state``: ``gepo.resume_without_state``), in which case the state starts
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
