"""The answer forms public grading suites use (form_cases.py: each right case beside its negative twin),
the pure helpers behind them, and the property that no rewrite makes a wrong answer right."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_verl.reward import compute_score
from edge_verl.reward.boxes import gold_from_boxes, is_list_separator
from edge_verl.reward.forms import braced_radicals, strip_cjk_sentence
from edge_verl.reward.normalize import leading_choice_letter
from edge_verl.reward.numbers import decimal_comma_value, intervals_agree
from tests.reward.form_cases import CATEGORIES

CASES = [(category, *case) for category, cases in CATEGORIES.items() for case in cases]


@pytest.mark.parametrize("category, response, gold, expected", CASES, ids=[f"{c[0]}_{i}" for i, c in enumerate(CASES)])
def test_each_answer_form_grades_as_labelled_and_its_twin_stays_wrong(category, response, gold, expected):
    result = compute_score("forms", response, gold)
    assert result["score"] == (1.0 if expected else 0.0), result


def test_every_category_has_a_negative_twin():
    assert all({expected for _, _, expected in cases} == {True, False} for cases in CATEGORIES.values())


@pytest.mark.parametrize(
    "gap, joins",
    [(", ", True), (" and ", True), (" \\quad \\text{and} \\quad ", True), ("$, $", True), (" ++++++ \\", True),
     ("、", True), (" or ", False), (" no no no ", False), (", but actually ", False), (". Then ", False)],
)  # fmt: skip
def test_list_separators_between_boxes(gap, joins):
    assert is_list_separator(gap) is joins


@pytest.mark.parametrize(
    "gold, answer",
    [("\\boxed{1} and \\boxed{2}", "\\{1, 2\\}"), ("\\boxed{1} no no \\boxed{2}", "2"), ("so \\boxed{7}.", "7"), ("\\boxed{", "\\boxed{"), ("3", "3")],
)
def test_gold_from_boxes(gold, answer):
    assert gold_from_boxes(gold) == answer


@pytest.mark.parametrize(
    "text, value", [("1000,99", "1000.99"), ("0,111", "0.111"), ("1,2345", "1.2345"), ("1,222", None), ("999,000", None), ("1, 22", None)]
)
def test_decimal_comma_is_read_only_where_it_cannot_group_thousands(text, value):
    result = decimal_comma_value(text)
    assert (None if result is None else str(result)) == value


def test_interval_endpoints_as_rounded_decimals():
    # 8/3 = 2.6666...: 2.6667 (5 significant digits) and 2.667 (4) are it rounded; 2.67 has 3, 2.66 is not rounded
    gold = "(\\frac{3}{5},\\frac{8}{3}]"
    assert intervals_agree("(0.6,2.6667]", gold) and intervals_agree("(0.6,2.667]", gold)
    assert not intervals_agree("(0.6,2.67]", gold) and not intervals_agree("(0.6,2.66]", gold)
    assert intervals_agree("(0.6,\\infty)", "(3/5,\\infty)") and not intervals_agree("(0.6,\\infty)", "(3/5,-\\infty)")


@pytest.mark.parametrize(
    "text, fixed", [("4\\sqrt(2)", "4\\sqrt{2}"), ("\\sqrt[3](x+1)", "\\sqrt[3]{x+1}"), ("\\sqrt(\\sqrt(2)+1)", "\\sqrt{\\sqrt{2}+1}"), ("\\sqrt(2", "\\sqrt(2")]
)
def test_braced_radicals(text, fixed):
    assert braced_radicals(text) == fixed


@pytest.mark.parametrize(
    "text, value",
    [("所以答案是\\frac{1}{2}。", "\\frac{1}{2}"), ("答案：3元。", "3"), ("\\frac{1}{2}。", "\\frac{1}{2}"),
     ("不是\\frac{1}{2}", "不是\\frac{1}{2}"), ("大于3", "大于3"), ("约为0.5", "约为0.5"), ("1或2", "1或2")],
)  # fmt: skip
def test_strip_cjk_sentence(text, value):
    assert strip_cjk_sentence(text) == value


@pytest.mark.parametrize(
    "text, letter", [("B。不是 A", "B"), ("D. it can't be A or B", "D"), ("(C) since", "C"), ("A or B", None), ("A. B. C.", None), ("A, B", None), ("B", None)]
)
def test_leading_choice_letter(text, letter):
    assert leading_choice_letter(text) == letter


# Each rewrite's surface form around a value: (wrap a model's answer, wrap the gold).
SURFACES = {
    "unit_word": (lambda v: f"{v} percentage", lambda v: f"{v}\\%"),
    "cjk_sentence": (lambda v: f"所以答案是{v}。", str),
    "cjk_unit": (lambda v: f"答案：{v}元。", str),
    "decimal_comma": (lambda v: f"{v},25", lambda v: f"{v}.25"),
    "decimal_comma_gold": (lambda v: f"{v}.25", lambda v: f"{v},25"),
    "braced_radical": (lambda v: f"{v}\\sqrt(2)", lambda v: f"{v}\\sqrt{{2}}"),
    "set_builder": (lambda v: f"\\{{x \\mid -2 \\le x \\le {v}\\}}", lambda v: f"x \\in [-2, {v}]"),
    "interval_decimals": (lambda v: f"(0.6, {v}.6667]", lambda v: f"(\\frac{{3}}{{5}}, \\frac{{{3 * v + 2}}}{{3}}]"),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(SURFACES)), st.integers(1, 999), st.integers(1, 999))
def test_no_rewrite_makes_a_wrong_answer_right(surface, value, other):
    wrap_answer, wrap_gold = SURFACES[surface]
    assert compute_score("p", f"\\boxed{{{wrap_answer(value)}}}", wrap_gold(value))["score"] == 1.0  # the rewrite is active
    if other != value:
        assert compute_score("p", f"\\boxed{{{wrap_answer(other)}}}", wrap_gold(value))["score"] == 0.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=2, max_size=5, unique=True), st.integers(-50, 50), st.sampled_from([", ", " and ", " \\quad\\text{and}\\quad "]))
def test_several_boxes_never_make_a_wrong_set_right(values, intruder, separator):
    response = separator.join(f"\\boxed{{{value}}}" for value in values)
    gold = "\\{" + ", ".join(map(str, sorted(values))) + "\\}"
    assert compute_score("p", response, gold)["score"] == 1.0
    wrong = [intruder if i == 0 else value for i, value in enumerate(values)]
    if intruder not in values:
        assert compute_score("p", separator.join(f"\\boxed{{{value}}}" for value in wrong), gold)["score"] == 0.0
    assert compute_score("p", response, str(values[-1] + 1000))["score"] == 0.0  # never the join against one value


@settings(max_examples=40, deadline=None)
@given(st.sampled_from("ABCDE"), st.sampled_from("ABCDE"), st.sampled_from(["。不是 {o}", ". it can't be {o}", ") since {o} fails"]))
def test_a_choice_letter_with_text_is_the_letter_it_opens_with(letter, other, tail):
    response = f"\\boxed{{{letter}{tail.format(o=other)}}}"
    assert compute_score("p", response, letter)["score"] == 1.0
    if other != letter:
        assert compute_score("p", response, other)["score"] == 0.0
