"""Cross-step training state of the plugin (GEPO's thresholds), owned here, saved with verl's checkpoints.

compute_advantage runs in verl's TaskRunner actor, so the state lives in that process. It is written as
``edge_verl_state.json`` inside each ``global_step_N`` checkpoint folder and read back on resume.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from edge_verl.algorithms.gepo import GepoThresholds
from edge_verl.config import GepoConfig

STATE_FILE = "edge_verl_state.json"
_GEPO_THRESHOLDS: Optional[GepoThresholds] = None


def gepo_thresholds(config: GepoConfig) -> GepoThresholds:
    """The process's GEPO thresholds, created on first use with ``config``'s gamma and init."""
    global _GEPO_THRESHOLDS
    if _GEPO_THRESHOLDS is None:
        _GEPO_THRESHOLDS = GepoThresholds(gamma=config.gamma, init=config.ema_init)
    return _GEPO_THRESHOLDS


def reset_state() -> None:
    """Forget all state (a fresh trainer in the same process starts from scratch)."""
    global _GEPO_THRESHOLDS
    _GEPO_THRESHOLDS = None


def state_dict() -> dict:
    return {"gepo_thresholds": _GEPO_THRESHOLDS.state_dict() if _GEPO_THRESHOLDS is not None else None}


def save_state(checkpoint_dir: str) -> str:
    os.makedirs(checkpoint_dir, exist_ok=True)
    path = os.path.join(checkpoint_dir, STATE_FILE)
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(state_dict(), handle, indent=2)
    os.replace(temporary, path)
    return path


def load_state(checkpoint_dir: str, gepo_config: Optional[GepoConfig]) -> Optional[dict]:
    """Restore the state saved in ``checkpoint_dir``.

    With ``gepo_config`` given (the run uses GEPO), a checkpoint without thresholds is an error unless
    ``gepo.resume_without_state`` is set, in which case the thresholds start afresh.
    """
    reset_state()
    path = os.path.join(checkpoint_dir, STATE_FILE)
    saved = None
    if os.path.exists(path):
        with open(path) as handle:
            saved = json.load(handle)
    if gepo_config is None:
        return saved
    thresholds_state = (saved or {}).get("gepo_thresholds")
    if thresholds_state is None:
        if gepo_config.resume_without_state:
            return saved
        raise RuntimeError(
            f"Resuming GEPO from {checkpoint_dir}, which holds no GEPO thresholds ({STATE_FILE}). Set "
            "algorithm.gepo.resume_without_state=true to restart the thresholds from the next batch."
        )
    gepo_thresholds(gepo_config).load_state_dict(thresholds_state)
    return saved
