"""verl's custom-reward entry point: ``compute_score(data_source, solution_str, ground_truth, extra_info)``.

Binary accuracy of the model's final answer (the papers' reward). Never raises on any model text or gold,
never takes longer than its two bounds (``edge_verl.reward.pool``), never evaluates model text. Returns
``{"score": 0.0|1.0, "acc": bool, "pred": str, "reason": str, "grader": str}`` for every input ("reason"
is "" when correct); verl logs the non-score keys as per-sample extra info, so every call returns the same
keys. ``grader`` says who decided (``GRADER_OUTCOMES``): ``caller`` (text alone, in this process),
``worker`` (math-verify in a grading worker), ``deadline`` (the worker ran out of time on this answer),
``waiting`` (no worker became free in time), ``no_answer`` (nothing to grade), ``crashed`` (the worker
died); the plugin turns these into the step metrics ``edge_verl/grader/<outcome>``.

Options, as keyword arguments (from verl: ``+reward.custom_reward_function.reward_kwargs.<name>=...``):
- ``format_policy``: ``strict`` (default; both papers): the answer is the last ``\\boxed{...}``, a response
  without one scores 0; ``lenient``: for prompts that do not ask for a box, a response without one is
  graded on the text after its last "the answer is" / "Answer:" phrase, else on the final answer
  math-verify's default extraction finds in its text (in a worker: it runs regexes and sympy on it).
- ``timeout_s``, ``wait_s``: the grading deadline per answer and the bound on waiting for a worker.
Raises ``GraderUnavailable`` only when grading workers cannot start at all (the cause is in the message),
and ``ValueError`` for an unknown option value.
"""

from __future__ import annotations

import math
from numbers import Number
from typing import Any, Optional

from edge_verl.reward.boxes import boxes_to_read, gold_from_boxes, joined_boxes, trailing_box_list
from edge_verl.reward.extract import last_boxed_spans, phrased_final_answer
from edge_verl.reward.grade import LENIENT_TAIL_CHARS, compare_by_text
from edge_verl.reward.pool import DEFAULT_TIMEOUT_S, DEFAULT_WAIT_S, get_pool

MAX_GOLDS = 32
MAX_GOLD_CHARS = 1000
FORMAT_POLICIES = ("strict", "lenient")
GRADER_OUTCOMES = ("caller", "worker", "deadline", "waiting", "no_answer", "crashed")
# Reasons of the calls no worker finished, per outcome.
_UNFINISHED_REASONS = {"deadline": "deadline", "waiting": "waiting_for_grader", "crashed": "grader_crashed"}


def gold_answers(ground_truth: Any) -> list[str]:
    """Acceptable answers as strings: a string, a number, or a list/tuple/array of them. A string that
    contains boxes (a reference solution) stands for its boxed answer (``boxes.gold_from_boxes``)."""
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
        text = gold_from_boxes(str(item)).strip()  # a reference solution as gold: its boxed answer
        if text and len(text) <= MAX_GOLD_CHARS:
            golds.append(text)
    return golds


def _result(correct: bool, pred: str, reason: str, grader: str) -> dict:
    return {"score": 1.0 if correct else 0.0, "acc": bool(correct), "pred": pred, "reason": "" if correct else reason, "grader": grader}


def _positive(name: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, Number) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"compute_score: {name}={value!r} must be a positive number of seconds")
    return float(value)


def compute_score(
    data_source: Any = None,
    solution_str: Any = None,
    ground_truth: Any = None,
    extra_info: Any = None,
    timeout_s: Optional[float] = None,
    wait_s: Optional[float] = None,
    format_policy: str = "strict",
    **kwargs: Any,
) -> dict:
    """Grade ``solution_str``'s final answer against ``ground_truth`` (see module docstring)."""
    if format_policy not in FORMAT_POLICIES:
        raise ValueError(f"compute_score: format_policy={format_policy!r}; expected one of {FORMAT_POLICIES}")
    timeout = _positive("timeout_s", timeout_s, DEFAULT_TIMEOUT_S)
    wait = _positive("wait_s", wait_s, DEFAULT_WAIT_S)
    if isinstance(solution_str, bytes):
        solution_str = solution_str.decode("utf-8", errors="replace")
    if not isinstance(solution_str, str):
        return _result(False, "", "no_response", "no_answer")
    golds = gold_answers(ground_truth)
    spans = last_boxed_spans(solution_str, boxes_to_read(golds))  # the last boxes, in reading order
    answers = [answer for _, _, answer in spans]
    if not answers and format_policy == "lenient":
        phrased = phrased_final_answer(solution_str, LENIENT_TAIL_CHARS)
        answers = [phrased] if phrased else []
    if not answers and format_policy == "strict":
        return _result(False, "", "no_boxed_answer", "no_answer")
    if not golds:
        return _result(False, answers[-1] if answers else "", "no_gold", "caller")
    if answers:
        box_list = trailing_box_list(solution_str, spans)
        comparison = compare_by_text([answers[-1], *joined_boxes(box_list, golds)], golds)
        if comparison.decided is not None:
            return _result(comparison.decided[0], answers[-1], comparison.decided[1], "caller")
        request = comparison.worker_request()
    else:  # lenient, no box and no answer phrase: math-verify's extraction, in a worker
        request = {"response": solution_str[-LENIENT_TAIL_CHARS:], "golds": golds}
    reply, outcome = get_pool().grade(request, timeout, wait)
    pred = answers[-1] if answers else str(reply.get("pred") or "")
    if outcome != "worker":
        return _result(False, pred, _UNFINISHED_REASONS[outcome], outcome)
    grader = "no_answer" if reply["reason"] == "no_answer" else "worker"
    return _result(bool(reply["correct"]), pred, str(reply["reason"]), grader)


# A correct answer that only symbolic equivalence accepts: the text stage cannot decide it.
SELF_CHECK = ("so the answer is \\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt{2}}{2}")


def self_check(timeout_s: float = 60.0) -> dict:
    """Grade SELF_CHECK through a grading worker: ``{"score", "grader"}``, or ``{"error"}`` when no worker
    could start. Healthy: score 1.0 decided by ``worker``."""
    from edge_verl.reward.pool import GraderUnavailable

    try:
        result = compute_score("self_check", *SELF_CHECK, timeout_s=timeout_s, wait_s=timeout_s)
    except GraderUnavailable as error:
        return {"error": str(error)}
    return {"score": result["score"], "grader": result["grader"], "reason": result["reason"]}


def grader_outcome_fractions(outcomes) -> dict[str, float]:
    """The fraction of calls per ``GRADER_OUTCOMES`` entry (every outcome, zeros included) among the
    non-empty entries of ``outcomes`` (the ``grader`` values of a batch); {} when there are none."""
    known = [outcome for outcome in outcomes if outcome in GRADER_OUTCOMES]
    if not known:
        return {}
    return {outcome: known.count(outcome) / len(known) for outcome in GRADER_OUTCOMES}
