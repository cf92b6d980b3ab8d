"""verl's custom-reward entry point: ``compute_score(data_source, solution_str, ground_truth, extra_info)``."""

from __future__ import annotations

from typing import Any

from edge_verl.reward.extract import last_boxed_answer


def _normalise(answer: str) -> str:
    return "".join(str(answer).split()).strip("$").rstrip(".")


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any) -> dict:
    """Binary accuracy of the last boxed answer. Returns {"score", "acc", "pred"} (+ "reason" on failure)."""
    pred = last_boxed_answer(solution_str) if isinstance(solution_str, str) else None
    if pred is None:
        return {"score": 0.0, "acc": False, "pred": "", "reason": "no_boxed_answer"}
    golds = ground_truth if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    correct = any(_normalise(pred) == _normalise(gold) for gold in golds if gold is not None)
    return {"score": float(correct), "acc": correct, "pred": pred}
