"""verl's custom-reward entry point: ``compute_score(data_source, solution_str, ground_truth, extra_info)``.

Binary accuracy of the LAST ``\\boxed{...}`` of the response (the papers' reward). Never raises, never
hangs longer than its deadline, never evaluates model text. Returns
``{"score": 0.0|1.0, "acc": bool, "pred": str, "reason": str}`` for every input ("reason" is "" when
correct); verl logs the non-score keys as per-sample extra info, so every call returns the same keys.
"""

from __future__ import annotations

import math
from numbers import Number
from typing import Any, Optional

from edge_verl.reward.extract import last_boxed_answer
from edge_verl.reward.grade import grade_by_text
from edge_verl.reward.pool import DEFAULT_TIMEOUT_S, get_pool

MAX_GOLDS = 32
MAX_GOLD_CHARS = 1000


def gold_answers(ground_truth: Any) -> list[str]:
    """Acceptable answers as strings: a string, a number, or a list/tuple/array of them."""
    if ground_truth is None:
        return []
    if isinstance(ground_truth, (str, bytes)) or isinstance(ground_truth, Number):
        items = [ground_truth]
    elif hasattr(ground_truth, "tolist"):
        items = ground_truth.tolist()
        items = items if isinstance(items, list) else [items]
    elif isinstance(ground_truth, (list, tuple, set, frozenset)):
        items = list(ground_truth)
    else:
        items = [ground_truth]
    golds = []
    for item in items[:MAX_GOLDS]:
        if isinstance(item, bytes):
            item = item.decode("utf-8", errors="replace")
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                continue
            item = repr(int(item)) if item.is_integer() else repr(item)
        text = str(item).strip()
        if text and len(text) <= MAX_GOLD_CHARS:
            golds.append(text)
    return golds


def _result(correct: bool, pred: str, reason: str) -> dict:
    return {"score": 1.0 if correct else 0.0, "acc": bool(correct), "pred": pred, "reason": "" if correct else reason}


def compute_score(
    data_source: Any = None,
    solution_str: Any = None,
    ground_truth: Any = None,
    extra_info: Any = None,
    timeout_s: Optional[float] = None,
    **kwargs: Any,
) -> dict:
    """Grade ``solution_str``'s last boxed answer against ``ground_truth`` (see module docstring)."""
    if isinstance(solution_str, bytes):
        solution_str = solution_str.decode("utf-8", errors="replace")
    if not isinstance(solution_str, str):
        return _result(False, "", "no_response")
    pred = last_boxed_answer(solution_str)
    if pred is None:
        return _result(False, "", "no_boxed_answer")
    golds = gold_answers(ground_truth)
    if not golds:
        return _result(False, pred, "no_gold")
    decided = grade_by_text(pred, golds)
    if decided is not None:
        return _result(decided[0], pred, decided[1])
    correct, reason = get_pool().grade(pred, golds, DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s))
    return _result(correct, pred, reason)
