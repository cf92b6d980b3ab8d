"""The plugin's cross-step training state on disk: ``edge_verl_state.json`` in verl's checkpoint folders.

Only a GEPO run has such state (its EMA thresholds, owned by the run's ``TrainingRun``); the trainer
hooks write the file next to verl's own checkpoint of every ``global_step_N`` and read it on resume.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from edge_verl.integration.names import STATE_FILE
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
    """Restore GEPO's thresholds saved in ``checkpoint_dir`` into ``run`` (nothing to do for other runs).

    A checkpoint without thresholds is an error unless ``gepo.resume_without_state`` is set, in which
    case the thresholds start afresh from the next batch.
    """
    if run.thresholds is None:
        return
    saved = (read_state(checkpoint_dir) or {}).get("gepo_thresholds")
    if saved is None:
        if run.options.resume_without_state:
            return
        raise RuntimeError(
            f"Resuming GEPO from {checkpoint_dir}, which holds no GEPO thresholds ({STATE_FILE}). Set "
            "algorithm.gepo.resume_without_state=true to restart the thresholds from the next batch."
        )
    run.thresholds.load_state_dict(saved)
