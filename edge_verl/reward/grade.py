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
from decimal import Decimal, InvalidOperation
from typing import Optional, Sequence

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


def grade_by_text(pred: str, golds: Sequence[str]) -> Optional[tuple[bool, str]]:
    """(correct, reason) when text alone decides, else None (symbolic comparison needed)."""
    normalised = normalise_answer(pred)
    if not normalised:
        return False, "empty_answer"
    gold_texts = [normalise_answer(gold) for gold in golds]
    if normalised in gold_texts:
        return True, "text_match"
    gold_letters = [choice_letter(text) for text in gold_texts]
    if any(letter is not None for letter in gold_letters):
        letter = choice_letter(normalised)
        return letter is not None and letter in gold_letters, "choice_letter"
    if is_time_of_day(normalised) or any(is_time_of_day(text) for text in gold_texts):
        return False, "time_text_mismatch"
    number = _plain_number(normalised)
    gold_numbers = [_plain_number(text) for text in gold_texts]
    if number is not None and all(value is not None for value in gold_numbers):
        return number in gold_numbers, "number_mismatch"
    return None


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


def grade_with_math_verify(pred: str, golds: Sequence[str]) -> tuple[bool, str]:
    """Symbolic equivalence of ``pred`` with any gold (math-verify, guarded). Call inside a worker."""
    from math_verify import parse, verify

    parsed_pred = parse("$" + pred + "$", parsing_timeout=None)
    if not parsed_pred:
        return False, "unparsed_answer"
    if not _covers_input(parsed_pred, pred):
        return False, "partial_parse"
    for gold in golds:
        for wrapping in GOLD_WRAPPINGS:
            parsed_gold = parse(wrapping.format(gold), parsing_timeout=None)
            if not parsed_gold or not verify(parsed_gold, parsed_pred, timeout_seconds=None):
                continue
            left, right = parsed_gold[0], parsed_pred[0]
            if getattr(left, "is_number", False) and getattr(right, "is_number", False) and not _numbers_close(left, right):
                return False, "numbers_differ"
            return True, "math_verify"
    return False, "not_equivalent"
