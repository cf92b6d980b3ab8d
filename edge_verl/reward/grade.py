"""Grading an extracted answer against the gold answers.

Two stages:
- ``grade_by_text`` (pure strings, microseconds, runs in the caller): equal normalised text, multiple-choice
  letters and times of day are decided here;
- ``grade_with_math_verify`` (sympy through math-verify, runs ONLY inside an isolated grading worker
  process, see ``edge_verl.reward.pool``): symbolic equivalence, with guards for math-verify's known
  false positives.

math-verify is called with its signal-based timeouts disabled (they break off the main thread and reset
any outer alarm); the worker process is the deadline. Nothing here evaluates model text: math-verify
parses LaTeX into sympy without ``eval``/``parse_expr`` on the raw string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Optional, Sequence

from edge_verl.reward.forms import Candidates, expand, has_named_lhs
from edge_verl.reward.normalize import choice_letter, is_time_of_day, normalise_answer

# Gold wrappings tried in order; they fail on different golds (e.g. "\$6" vs "25\%"), so any may accept.
GOLD_WRAPPINGS = ("${}$", "\\boxed{{{}}}")
RELATIVE_TOLERANCE = 1e-6
_PLAIN_NUMBER = re.compile(r"^[+-]?\d{1,100}(?:\.\d{1,100})?$")


def _plain_number(text: str) -> Optional[Decimal]:
    if not _PLAIN_NUMBER.match(text):
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def grade_by_text(preds: Sequence[str], golds: Sequence[str], gold_forms: Sequence[Candidates]) -> Optional[tuple[bool, str]]:
    """(correct, reason) when text alone decides, else None (symbolic comparison needed).

    ``preds``: the candidates of the model's answer, as written first; ``golds``: the reference answers as given, and
    ``gold_forms`` their candidates (``edge_verl.reward.forms``). Guards (letters, times of day, plain
    numbers) look at the answers as written, equality at every candidate."""
    normalised = [text for text in (normalise_answer(pred) for pred in preds) if text]
    if not normalised:
        return False, "empty_answer"
    gold_texts = {normalise_answer(text) for forms in gold_forms for text in forms.texts} - {""}
    if any(text in gold_texts for text in normalised):
        return True, "text_match"
    written = [normalise_answer(gold) for gold in golds]
    gold_letters = [choice_letter(text) for text in written]
    if any(letter is not None for letter in gold_letters):
        letter = choice_letter(normalised[0])
        return letter is not None and letter in gold_letters, "choice_letter"
    ratio = any(forms.ratio for forms in gold_forms)
    if not ratio and (is_time_of_day(normalised[0]) or any(is_time_of_day(text) for text in written)):
        return False, "time_text_mismatch"
    numbers = [_plain_number(text) for text in normalised]
    gold_numbers = [_plain_number(text) for text in gold_texts]
    if all(value is not None for value in numbers + gold_numbers):
        return any(value in gold_numbers for value in numbers), "number_mismatch"
    return None


@dataclass(frozen=True)
class Comparison:
    """The candidates of a model's answer(s) and of the golds, and the text stage's verdict if it decided."""

    preds: tuple[str, ...]
    golds: tuple[str, ...]
    decided: Optional[tuple[bool, str]]


def compare_by_text(answers: Sequence[str], golds: Sequence[str]) -> Comparison:
    """Expand ``answers`` (the extracted answer first, then any joined boxes) and ``golds`` into their
    forms and run the text stage; ``decided`` is None when math-verify must compare ``preds``/``golds``."""
    pred_named = any(has_named_lhs(answer) for answer in answers)
    gold_forms = [expand(gold, strip_lhs=not pred_named) for gold in golds]
    gold_named = any(has_named_lhs(gold) for gold in golds)
    ratio = any(forms.ratio for forms in gold_forms)
    preds = tuple(dict.fromkeys(text for answer in answers for text in expand(answer, strip_lhs=not gold_named, ratio_context=ratio).texts))
    gold_texts = tuple(dict.fromkeys(text for forms in gold_forms for text in forms.texts))
    return Comparison(preds, gold_texts, grade_by_text(preds, golds, gold_forms))


def _numbers_close(left, right) -> bool:
    """Exact-or-relative comparison of two sympy numbers (math-verify rounds absolute differences, so
    1/2004! and 1/2006! compare equal there)."""
    import sympy

    difference = sympy.simplify(left - right)
    if difference == 0:
        return True
    scale = max(abs(sympy.N(left, 30)), abs(sympy.N(right, 30)))
    if scale == 0:
        return False
    return bool(abs(sympy.N(difference, 30)) <= RELATIVE_TOLERANCE * scale)


def _covers_input(parsed: list, text: str) -> bool:
    """math-verify falls back to a number inside LaTeX it cannot parse (\"1-\\frac{1}{e\" -> 1); accept a
    parse only if the text it used spans most of the answer."""
    if len(parsed) < 2 or not isinstance(parsed[1], str):
        return True
    used = normalise_answer(parsed[1])
    whole = normalise_answer(text)
    return len(used) * 2 >= len(whole)


def grade_with_math_verify(preds: Sequence[str], golds: Sequence[str]) -> tuple[bool, str]:
    """Symbolic equivalence of any pred candidate with any gold candidate (math-verify, guarded). Call
    inside a worker. The reason is that of the first candidate when none matches."""
    from math_verify import parse, verify

    parsed_golds = {}
    reasons = []
    for pred in preds:
        parsed_pred = parse("$" + pred + "$", parsing_timeout=None)
        if not parsed_pred:
            reasons.append("unparsed_answer")
            continue
        if not _covers_input(parsed_pred, pred):
            reasons.append("partial_parse")
            continue
        reasons.append("not_equivalent")
        for gold in golds:
            for wrapping in GOLD_WRAPPINGS:
                key = (gold, wrapping)
                if key not in parsed_golds:
                    parsed_golds[key] = parse(wrapping.format(gold), parsing_timeout=None)
                parsed_gold = parsed_golds[key]
                if not parsed_gold or not verify(parsed_gold, parsed_pred, timeout_seconds=None):
                    continue
                left, right = parsed_gold[0], parsed_pred[0]
                if getattr(left, "is_number", False) and getattr(right, "is_number", False) and not _numbers_close(left, right):
                    reasons[-1] = "numbers_differ"
                    continue
                return True, "math_verify"
    return False, reasons[0] if reasons else "unparsed_answer"


LENIENT_TAIL_CHARS = 4000


def math_verify_final_answer(response: str) -> Optional[str]:
    """The final answer math-verify's default extraction finds in free text ("the answer is 42", the last
    ``$...$``, the last number), as a string; None when it finds none. Call inside a worker: the
    extraction runs regular expressions and sympy on model text. Reads the last LENIENT_TAIL_CHARS."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    parsed = parse(response[-LENIENT_TAIL_CHARS:], [LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=None)
    if len(parsed) < 2 or not isinstance(parsed[1], str) or not parsed[1].strip():
        return None
    return parsed[1].strip()


def grade_request(request: dict) -> dict:
    """A grading worker's answer to one request (see ``edge_verl.reward.worker``)."""
    pred = None
    if "response" in request:  # lenient format policy, no boxed answer: extract as math-verify does
        pred = math_verify_final_answer(request["response"])
        if pred is None:
            return {"correct": False, "reason": "no_answer", "pred": ""}
        comparison = compare_by_text([pred], request["golds"])
        if comparison.decided is not None:
            return {"correct": comparison.decided[0], "reason": comparison.decided[1], "pred": pred}
        preds, golds = comparison.preds, comparison.golds
    else:
        preds, golds = request["preds"], request["golds"]
    correct, reason = grade_with_math_verify(preds, golds)
    return {"correct": correct, "reason": reason, "pred": pred}
