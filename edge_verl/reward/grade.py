"""Grading an extracted answer against the gold answers.

Two stages:
- ``grade_by_text`` (pure strings, microseconds, runs in the caller): equal normalised text, multiple-choice
  letters and times of day are decided here; a sequence or ratio written with an ellipsis is split into its
  written terms first (``edge_verl.reward.sequences``), each term pair going through both stages;
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
from decimal import Decimal
from typing import Optional, Sequence

from edge_verl.reward.boxes import is_escaped_set
from edge_verl.reward.forms import Candidates, expand, has_named_lhs, interval_variable, is_bracketed_tuple
from edge_verl.reward.normalize import choice_letter, is_time_of_day, leading_choice_letter, normalise_answer
from edge_verl.reward.numbers import decimal_comma_value, decimal_point_value, intervals_agree, matched_decimal, single_decimal_value
from edge_verl.reward.sequences import ellipsis_sequence, term_pairs

# Gold wrappings tried in order; they fail on different golds (e.g. "\$6" vs "25\%"), so any may accept.
GOLD_WRAPPINGS = ("${}$", "\\boxed{{{}}}")
RELATIVE_TOLERANCE = 1e-6
_PLAIN_NUMBER = re.compile(r"^[+-]?\d{1,100}(?:\.\d{1,100})?$")


def _plain_number(text: str) -> Optional[Decimal]:
    return matched_decimal(_PLAIN_NUMBER, text)


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
        letter = choice_letter(normalised[0]) or leading_choice_letter(preds[0])
        return letter is not None and letter in gold_letters, "choice_letter"
    if _set_against_tuple(preds[0], golds):
        return False, "set_vs_tuple"
    decided = _decimal_comma_verdict(preds[0].strip(), [forms.texts[0].strip() for forms in gold_forms])
    if decided is not None:
        return decided
    ratio = any(forms.ratio for forms in gold_forms)
    if not ratio and (is_time_of_day(normalised[0]) or any(is_time_of_day(text) for text in written)):
        return False, "time_text_mismatch"
    numbers = [_plain_number(text) for text in normalised]
    gold_numbers = [_plain_number(text) for text in gold_texts]
    if all(value is not None for value in numbers + gold_numbers):
        return any(value in gold_numbers for value in numbers), "number_mismatch"
    if any(intervals_agree(text, gold) for text in normalised for gold in gold_texts):
        return True, "interval_rounded"  # no "False" here: math-verify may still see an exact equivalence
    return None


def _set_against_tuple(pred: str, golds: Sequence[str]) -> bool:
    """A tuple or interval ``(1, 2)`` against golds that are all sets ``\\{1, 2\\}`` (or the reverse):
    math-verify calls these equal, but a point is not a set of answers."""
    if all(is_escaped_set(gold) for gold in golds):
        return is_bracketed_tuple(pred)
    return all(is_bracketed_tuple(gold) for gold in golds) and is_escaped_set(pred)


def _decimal_comma_verdict(pred: str, golds: Sequence[str]) -> Optional[tuple[bool, str]]:
    """A decimal comma on either side, decided only when every gold is one decimal number
    (``edge_verl.reward.numbers``); None otherwise."""
    gold_values = [single_decimal_value(gold) for gold in golds]
    if not gold_values or any(value is None for value in gold_values):
        return None
    pred_value = decimal_comma_value(pred)
    if pred_value is None and any(decimal_comma_value(gold) is not None for gold in golds):
        pred_value = decimal_point_value(pred)
    if pred_value is None:
        return None
    return pred_value in gold_values, "decimal_comma"


@dataclass(frozen=True)
class Comparison:
    """The candidates of a model's answer(s) and of the golds, and the text stage's verdict if it decided.
    ``term_checks``: for answers written with an ellipsis, the alternatives (one per pair of sequences of the
    same shape) of undecided term comparisons that must all hold; math-verify then compares those, not
    ``preds``/``golds``."""

    preds: tuple[str, ...]
    golds: tuple[str, ...]
    decided: Optional[tuple[bool, str]]
    term_checks: tuple[tuple["Comparison", ...], ...] = ()

    def worker_request(self) -> dict:
        """What a grading worker needs when the text stage did not decide (``edge_verl.reward.worker``)."""
        if self.term_checks:
            return {"term_checks": [[check.worker_request() for check in checks] for checks in self.term_checks]}
        return {"preds": list(self.preds), "golds": list(self.golds)}


# Sequence pairs of the same shape compared per answer (a few candidates each side give the same sequence).
MAX_SEQUENCE_ALTERNATIVES = 8
# Sequences inside the terms of sequences read at most this deep (each level re-reads its terms' text).
MAX_SEQUENCE_DEPTH = 4


def compare_by_text(answers: Sequence[str], golds: Sequence[str], sequence_depth: int = 0) -> Comparison:
    """Expand ``answers`` (the extracted answer first, then any joined boxes) and ``golds`` into their
    forms and run the text stage; ``decided`` is None when math-verify must compare ``preds``/``golds`` (or
    the ``term_checks`` of answers written with an ellipsis). ``sequence_depth``: how many ellipsis sequences
    enclose these answers as terms; past MAX_SEQUENCE_DEPTH another one scores 0."""
    pred_named = any(has_named_lhs(answer) for answer in answers)
    gold_forms = [expand(gold, strip_lhs=not pred_named) for gold in golds]
    gold_named = any(has_named_lhs(gold) for gold in golds)
    ratio = any(forms.ratio for forms in gold_forms)
    preds = tuple(dict.fromkeys(text for answer in answers for text in expand(answer, strip_lhs=not gold_named, ratio_context=ratio).texts))
    pred_sequences = _sequences(preds)
    gold_sequences = [_sequences(forms.texts) for forms in gold_forms]
    if pred_sequences and sequence_depth >= MAX_SEQUENCE_DEPTH:
        return Comparison(preds, (), (False, "ellipsis_nested_too_deep"))
    if pred_sequences:
        gold_sequences_flat = [sequence for sequences in gold_sequences for sequence in sequences]
        return _compare_sequences(preds, pred_sequences, gold_sequences_flat, sequence_depth)
    if any(gold_sequences):  # a gold written with an ellipsis is never met by an answer without one
        golds = [gold for gold, sequences in zip(golds, gold_sequences) if not sequences]
        gold_forms = [forms for forms, sequences in zip(gold_forms, gold_sequences) if not sequences]
        if not golds:
            return Comparison(preds, (), (False, "ellipsis_only_in_gold"))
    gold_texts = tuple(dict.fromkeys(text for forms in gold_forms for text in forms.texts))
    pred_variables = {interval_variable(answer) for answer in answers} - {None}
    gold_variables = {interval_variable(gold) for gold in golds} - {None}
    if pred_variables and gold_variables and not pred_variables & gold_variables:
        return Comparison(preds, gold_texts, (False, "interval_variable_differs"))
    return Comparison(preds, gold_texts, grade_by_text(preds, golds, gold_forms))


def _sequences(texts: Sequence[str]) -> list:
    return list(dict.fromkeys(sequence for sequence in map(ellipsis_sequence, texts) if sequence is not None))


def _compare_sequences(preds: tuple[str, ...], pred_sequences: list, gold_sequences: list, depth: int) -> Comparison:
    """An answer written with an ellipsis against the golds written with one (``edge_verl.reward.sequences``):
    right when, for a gold of the same shape, every pair of written terms compares equal -- by text here,
    else (``term_checks``) by math-verify in a worker."""
    if not gold_sequences:
        return Comparison(preds, (), (False, "ellipsis_only_in_answer"))
    alternatives = dict.fromkeys(pairs for pred in pred_sequences for gold in gold_sequences if (pairs := term_pairs(pred, gold)) is not None)
    if not alternatives:
        return Comparison(preds, (), (False, "ellipsis_shape_differs"))
    checked: dict[tuple[str, str], Comparison] = {}
    undecided = []
    for pairs in list(alternatives)[:MAX_SEQUENCE_ALTERNATIVES]:
        pending: list[Comparison] = []
        for pair in dict.fromkeys(pairs):
            if pair not in checked:
                checked[pair] = _compare_terms(*pair, depth + 1)
            if checked[pair].decided is None:
                pending.append(checked[pair])
            elif not checked[pair].decided[0]:
                break  # a written term differs: not this gold
        else:
            if not pending:
                return Comparison(preds, (), (True, "ellipsis_terms"))
            undecided.append(tuple(pending))
    if not undecided:
        return Comparison(preds, (), (False, "ellipsis_term_differs"))
    return Comparison(preds, (), None, tuple(undecided))


def _compare_terms(pred: str, gold: str, depth: int) -> Comparison:
    """One written term against the gold's term in the same position: equal text (an empty term included),
    else the whole text stage (which may find a nested sequence: ``(1, 2, \\ldots), \\ldots``)."""
    if normalise_answer(pred) == normalise_answer(gold):
        return Comparison((pred,), (gold,), (True, "text_match"))
    return compare_by_text([pred], [gold], depth)


def _numbers_close(left, right) -> bool:
    """Relative comparison of two sympy numbers at 30 digits (math-verify rounds absolute differences, so
    1/2004! and 1/2006! compare equal there). Numeric, not ``simplify``: simplifying a difference of nested
    radicals (``\\sqrt{\\sqrt{11}+\\sqrt{194}}/(15+2\\sqrt{33})`` with the sum reordered) ran past the deadline."""
    import sympy

    left_value, right_value = sympy.N(left, 30), sympy.N(right, 30)
    scale = max(abs(left_value), abs(right_value))
    difference = abs(left_value - right_value)
    if scale == 0:
        return difference == 0
    return bool(difference <= RELATIVE_TOLERANCE * scale)


# Values substituted for the answer's variables (rationals, so that evaluation is exact until evalf).
SAMPLE_VALUES = ("37/100", "171/100", "293/100", "614/1000", "427/100", "-83/100", "-19/10", "-271/100")
MIN_COMMON_REAL_POINTS = 3
MAX_SAMPLED_SYMBOLS = 3


def _sampled_value(expression, values) -> Optional[complex]:
    import sympy

    try:
        value = complex(sympy.N(expression.subs(values), 30))
    except (TypeError, ValueError):  # zoo, nan or a non-number left after substitution
        return None
    return value if all(map(lambda part: abs(part) < float("inf"), (value.real, value.imag))) else None


def _agree_where_both_real(left, right) -> bool:
    """Whether two expressions with radicals and at most MAX_SAMPLED_SYMBOLS variables agree at every sample
    point where both are real, with at least MIN_COMMON_REAL_POINTS such points.

    math-verify compares on sympy's complex branches, where ``1/\\sqrt{n}`` and ``\\sqrt{1/n}`` differ (for
    n < 0 only); graders take them as equal on the answer's real domain. Sampling negative values too keeps
    ``\\sqrt{x^2}`` different from ``x`` and ``\\sqrt{x}`` from ``|x|`` (they differ where both are real).
    Only tried after math-verify said "not equivalent", inside the worker (under its deadline)."""
    import sympy

    if not (isinstance(left, sympy.Expr) and isinstance(right, sympy.Expr)):
        return False
    symbols = sorted(left.free_symbols | right.free_symbols, key=str)
    if not 1 <= len(symbols) <= MAX_SAMPLED_SYMBOLS:
        return False
    if not any(power.exp.is_integer is not True for side in (left, right) for power in side.atoms(sympy.Pow)):
        return False
    common = 0
    for offset in range(len(SAMPLE_VALUES)):
        values = {symbol: sympy.Rational(SAMPLE_VALUES[(offset + 3 * index) % len(SAMPLE_VALUES)]) for index, symbol in enumerate(symbols)}
        left_value, right_value = _sampled_value(left, values), _sampled_value(right, values)
        if left_value is None or right_value is None:
            continue
        if abs(left_value.imag) > 1e-12 * max(1.0, abs(left_value)) or abs(right_value.imag) > 1e-12 * max(1.0, abs(right_value)):
            continue
        if abs(left_value.real - right_value.real) > 1e-9 * max(1.0, abs(left_value.real), abs(right_value.real)):
            return False
        common += 1
    return common >= MIN_COMMON_REAL_POINTS


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
                if not parsed_gold:
                    continue
                if not verify(parsed_gold, parsed_pred, timeout_seconds=None):
                    if _agree_where_both_real(parsed_gold[0], parsed_pred[0]):
                        return True, "real_domain"
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
        request = comparison.worker_request()
    correct, reason = grade_worker_request(request)
    return {"correct": correct, "reason": reason, "pred": pred}


def grade_worker_request(request: dict) -> tuple[bool, str]:
    """(correct, reason) of a ``Comparison.worker_request``: math-verify on the candidates, or on every
    undecided term pair of an alternative of ``term_checks`` (right when all of one alternative hold)."""
    if "term_checks" not in request:
        return grade_with_math_verify(request["preds"], request["golds"])
    for checks in request["term_checks"]:
        if all(grade_worker_request(check)[0] for check in checks):
            return True, "ellipsis_terms"
    return False, "ellipsis_term_differs"
