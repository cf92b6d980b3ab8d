"""Sequences and ratios written with an ellipsis (edge_verl.reward.sequences): how an answer is read, which
pairs have the same shape, and through compute_score that two sequences whose written terms differ never
score 1 (form_cases.py's "ellipsis_sequence" category holds each rule beside its negative twin)."""

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_verl.reward import compute_score
from edge_verl.reward.grade import MAX_SEQUENCE_DEPTH
from edge_verl.reward.sequences import ATTACHED, BARE, MAX_SEQUENCE_ITEMS, SET, TUPLE, EllipsisSequence, ellipsis_sequence, term_pairs


def B(answer: str) -> str:
    return "Reasoning ... so the answer is \\boxed{" + answer + "}."


L, R = "list", "ratio"


@pytest.mark.parametrize(
    "text, items, gaps, enclosure",
    [
        ("1, 2, 4, 8, \\ldots", ("1", "2", "4", "8", None), (L, L, L, L), BARE),
        ("1:2:\\cdots", ("1", "2", None), (R, R), BARE),
        ("1; 2; \\dotsc", ("1", "2", None), (L, L), BARE),  # a semicolon lists as a comma does
        ("1, 2; 3, 4; \\ldots", ("1", "2", "3", "4", None), (",", ";", ",", ";"), BARE),  # mixed: as written
        ("1, \\ldots, n^2", ("1", None, "n^2"), (L, L), BARE),
        ("1, 2, 4, 8\\ldots", ("1", "2", "4", "8", None), (L, L, L, ATTACHED), BARE),  # attached to its term
        ("1,2,\\ldots n", ("1", "2", None, "n"), (L, L, ATTACHED), BARE),
        ("1,\\ 2,\\,\\dots.", ("1", "2", None), (L, L), BARE),  # spacing commands, a final period
        ("1, 2, . . .", ("1", "2", None), (L, L), BARE),
        ("1, 2, …", ("1", "2", None), (L, L), BARE),
        ("1, 2, ⋯", ("1", "2", None), (L, L), BARE),
        ("1, 2, \\text{...}", ("1", "2", None), (L, L), BARE),
        ("1, 2, \\cdot\\cdot\\cdot", ("1", "2", None), (L, L), BARE),
        ("\\left(1, 2, \\ldots\\right)", ("1", "2", None), (L, L), TUPLE),  # parentheses: a tuple
        ("\\{1, 2, \\ldots\\}", ("1", "2", None), (L, L), SET),
        ("{1, 2, \\ldots}", ("1", "2", None), (L, L), BARE),  # plain braces group
        ("(1,2), (2,3), \\ldots", ("(1,2)", "(2,3)", None), (L, L), BARE),  # commas inside brackets stay
    ],
)
def test_an_ellipsis_sequence_is_read_as_its_written_terms(text, items, gaps, enclosure):
    assert ellipsis_sequence(text) == EllipsisSequence(items, gaps, enclosure)


@pytest.mark.parametrize(
    "text",
    [
        "1, 2, 4",  # no ellipsis
        "0.333\\ldots",  # no separator: a decimal, not a sequence
        "1 + 2 + \\cdots + n",  # operators touch the ellipsis: one term
        "x + x^2 + \\cdots, 5",
        "1 \\cdot 2 \\cdots 7",
        "(1, 2, \\ldots)(3)",  # the bracket closes before the end: no enclosure, no top-level separator
        "1, 2, \\ldotsx",  # an unknown command, not an ellipsis
        "4:30",
        "\\ldots",
    ],
)
def test_what_is_not_an_ellipsis_sequence(text):
    assert ellipsis_sequence(text) is None


def _shape(pred, gold):
    return term_pairs(ellipsis_sequence(pred), ellipsis_sequence(gold))


def test_term_pairs_need_the_same_shape():
    assert _shape("1, 2, \\ldots, n", "1, 2, \\cdots, k") == (("1", "1"), ("2", "2"), ("n", "k"))
    assert _shape("1, 2, 4\\ldots", "1, 2, 4, \\ldots") == (("1", "1"), ("2", "2"), ("4", "4"))  # attached fits a comma
    assert _shape("1, 2, \\ldots", "1, 2, 3, \\ldots") is None  # as many items
    assert _shape("1, \\ldots, 3", "1, 3, \\ldots") is None  # the ellipsis in the same position
    assert _shape("1:2:\\ldots", "1, 2, \\ldots") is None  # a ratio is not a list
    assert _shape("(1, 2, \\ldots)", "\\{1, 2, \\ldots\\}") is None  # a tuple is not a set
    assert _shape("(1, 2, \\ldots)", "1, 2, \\ldots") and _shape("\\{1, 2, \\ldots\\}", "1, 2, \\ldots")  # a bare list fits both
    assert _shape("1, 2; 3, 4; \\ldots", "1; 2; 3; 4; \\ldots") is None  # mixed separators, as written
    long = ", ".join(["1"] * MAX_SEQUENCE_ITEMS) + ", \\ldots"
    assert _shape(long, long) is None  # longer than MAX_SEQUENCE_ITEMS: refused


def test_a_general_term_is_compared_symbolically_in_a_worker():
    right = compute_score("s", B("2, 4, 8, \\ldots, 2^{n}"), "2, 4, 8, \\ldots, 2^n")
    assert (right["score"], right["grader"]) == (1.0, "worker"), right
    wrong = compute_score("s", B("2, 4, 8, \\ldots, 2n"), "2, 4, 8, \\ldots, 2^n")
    assert (wrong["score"], wrong["reason"]) == (0.0, "ellipsis_term_differs"), wrong


def test_sequences_inside_a_sequence_are_compared_term_by_term_too():
    gold = "(1, 2, \\ldots), (2, 4, \\ldots), \\ldots"
    assert compute_score("s", B("(1, 2, \\cdots), (2, 4, \\cdots), \\cdots"), gold)["score"] == 1.0
    assert compute_score("s", B("(1, 2, \\cdots), (2, 5, \\cdots), \\cdots"), gold)["score"] == 0.0


def _nested(dots: str, levels: int) -> str:
    """``1, \\ldots`` inside ``levels`` sequences: ``((1, \\ldots), \\ldots), \\ldots`` for 2."""
    text = f"1, {dots}"
    for _ in range(levels):
        text = f"({text}), {dots}"
    return text


def test_sequences_nested_past_the_depth_cap_score_zero_in_the_caller():
    # another spelling on each side, so that no level is equal as text and every level is read
    assert compute_score("s", B(_nested("\\cdots", MAX_SEQUENCE_DEPTH - 1)), _nested("\\ldots", MAX_SEQUENCE_DEPTH - 1))["score"] == 1.0
    assert compute_score("s", B(_nested("\\cdots", MAX_SEQUENCE_DEPTH)), _nested("\\ldots", MAX_SEQUENCE_DEPTH))["score"] == 0.0
    started = time.monotonic()
    result = compute_score("s", B(_nested("\\cdots", 90)), _nested("\\ldots", 90))
    assert (result["score"], result["grader"]) == (0.0, "caller") and time.monotonic() - started < 1.0, result


def test_a_gold_list_offers_the_sequence_and_a_closed_form_apart():
    golds = ["1, 2, 4, \\ldots", "2^{n-1}"]
    assert compute_score("s", B("1, 2, 4, \\cdots"), golds)["score"] == 1.0
    assert compute_score("s", B("2^{n-1}"), golds)["score"] == 1.0
    assert compute_score("s", B("1, 2, 4"), golds)["score"] == 0.0  # no ellipsis: only the closed form counts
    assert compute_score("s", B("1, 2, 5, \\cdots"), golds)["score"] == 0.0


@pytest.mark.parametrize(
    "response, gold, score",
    [
        ("The answer is 1, 2, 3, ...", "1, 2, 3, \\ldots", 1.0),
        ("The answer is 1, 2, 3, ...", "1, 2, 3", 0.0),  # the periods of the ellipsis are not a final period
        ("So we get $1, 2, 4, 16, \\dots$ in the end", "1, 2, 4, 8, \\ldots", 0.0),  # math-verify's extraction, in a worker
        ("So we get $1, 2, 4, 8, \\dots$ in the end", "1, 2, 4, 8, \\ldots", 1.0),
    ],
)
def test_lenient_policy_grades_sequences_the_same_way(response, gold, score):
    assert compute_score("s", response, gold, format_policy="lenient")["score"] == score


@pytest.mark.parametrize(
    "answer",
    [", ".join(["1"] * 300) + ", \\ldots", "1, " + "\\ldots" * 150, "1, " + ". " * 400, "1, " + "\\ldots, " * 100 + "2"],
)
def test_long_ellipsis_answers_are_decided_in_the_caller_at_once(answer):
    started = time.monotonic()
    result = compute_score("s", B(answer), "1, 2, \\ldots")
    assert result["score"] == 0.0 and result["grader"] == "caller" and time.monotonic() - started < 1.0, result


# Written forms of an integer term: exact text, a fraction and a radical (the last two only a worker decides).
TERM_FORMS = (str, lambda v: f"\\frac{{{2 * v}}}{{2}}", lambda v: f"\\sqrt{{{v * v}}}" if v >= 0 else str(v))
ELLIPSES = ("\\ldots", "\\cdots", "\\dots", "\\dotsc", "\\dotsb", "...", ". . .", "…", "\\text{...}", "\\ldots{}")
SEPARATORS = (", ", ",", " , ", ",\\ ", "; ", ":", " : ")


@st.composite
def rendered(draw, terms):
    """``terms`` written with an ellipsis after the last term or before it, each gap a drawn separator."""
    items = [draw(st.sampled_from(TERM_FORMS))(term) for term in terms]
    position = draw(st.sampled_from(["end", "before_last"])) if len(items) > 1 else "end"
    items.insert(len(items) if position == "end" else len(items) - 1, draw(st.sampled_from(ELLIPSES)))
    text = items[0]
    for item in items[1:]:
        text += draw(st.sampled_from(SEPARATORS)) + item
    return text


@st.composite
def differing_terms(draw):
    """(pred terms, gold terms): differing in at least one position, or in length."""
    gold = draw(st.lists(st.integers(-20, 60), min_size=1, max_size=5))
    change = draw(st.sampled_from(["value", "longer", "shorter"] if len(gold) > 1 else ["value", "longer"]))
    index = draw(st.integers(0, len(gold) - 1))
    if change == "value":
        value = draw(st.integers(-20, 60).filter(lambda v: v != gold[index]))
        return gold[:index] + [value] + gold[index + 1 :], gold
    if change == "longer":
        return gold[:index] + [draw(st.integers(-20, 60))] + gold[index:], gold
    return gold[:index] + gold[index + 1 :], gold


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(differing_terms(), st.data())
def test_two_ellipsis_sequences_whose_written_terms_differ_never_score_one(terms, data):
    pred_terms, gold_terms = terms
    pred, gold = data.draw(rendered(pred_terms)), data.draw(rendered(gold_terms))
    assert compute_score("p", B(pred), gold)["score"] == 0.0, (pred, gold)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(-20, 60), min_size=1, max_size=5), st.sampled_from(ELLIPSES), st.sampled_from(ELLIPSES), st.data())
def test_the_same_terms_score_one_whatever_the_spelling_and_zero_without_the_ellipsis(terms, pred_dots, gold_dots, data):
    forms = [data.draw(st.sampled_from(TERM_FORMS))(term) for term in terms]
    separator = data.draw(st.sampled_from([", ", "; ", ",\\ "]))
    pred, gold = separator.join([*forms, pred_dots]), ", ".join([*map(str, terms), gold_dots])
    assert compute_score("p", B(pred), gold)["score"] == 1.0, (pred, gold)  # the rule is active
    if len(terms) > 1:  # one side without its ellipsis: never the merged set math-verify would see
        assert compute_score("p", B(separator.join(forms)), gold)["score"] == 0.0
        assert compute_score("p", B(pred), ", ".join(map(str, terms)))["score"] == 0.0
