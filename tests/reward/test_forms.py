"""Answer forms, one rewriting at a time (pure strings), and the format policy through compute_score."""

import pytest

from edge_verl.reward import compute_score
from edge_verl.reward.extract import last_boxed_answers, phrased_final_answer
from edge_verl.reward.boxes import boxes_to_read, joined_boxes
from edge_verl.reward.forms import as_interval, strip_choice_label, expand, strip_named_lhs, strip_trailing_unit, top_level_items


# Each rewriting on one text at a time: (text, what it returns).
REWRITES = {
    top_level_items: [
        ("(2, 2), (6, 2)", ["(2, 2)", "(6, 2)"]),
        ("\\{1,2\\}", ["\\{1,2\\}"]),  # a set is one answer
        ("(1,2]", ["(1,2]"]),  # mixed brackets still nest
        ("1,000", ["1,000"]),  # thousands separator
        ("x=1, y=2", ["x=1", "y=2"]),
        ("42", ["42"]),
    ],
    strip_trailing_unit: [
        ("125\\textnormal{ miles}", "125"),
        ("28 pct", "28"),
        ("28 percent", "28"),
        ("10\\text{ cm}^2", "10"),
        ("5.4 \\text{ cents}", "5.4"),
        ("\\frac{270}7\\text{ degrees}", "\\frac{270}7"),
        ("3\\,\\text{ways}.", "3"),
        ("2 xy", "2 xy"),  # not a known unit: the product 2xy
        ("2\\text{ and }3", "2\\text{ and }3"),  # the words are not at the end of a value
        ("\\text{Monday}", "\\text{Monday}"),  # no value before the words
        ("2\\mathrm{i}", "2\\mathrm{i}"),  # one letter is a symbol, not a unit
    ],
    strip_choice_label: [
        ("3 \\ \\textbf{(C)}", "3"),
        ("2\\sqrt{10}~\\textbf{(A)}", "2\\sqrt{10}"),
        ("30^\\circ, \\textbf{B}", "30^\\circ"),
        ("12 (E)", "12"),
        ("\\textbf{(C)}", "\\textbf{(C)}"),  # a letter alone: the choice-letter rule decides
        ("x (A)", "x (A)"),  # not after a value
        ("2x+(B)", "2x+(B)"),
    ],
    strip_named_lhs: [
        ("V_1:V_2=11:21", ("11:21", True)),
        ("x_1=1, x_2=-3", ("1, -3", False)),
        ("f(x)=x+1", ("x+1", False)),
        ("m_{\\max }=n^{2}-n-1", ("n^{2}-n-1", False)),
        ("x+y=3", None),  # the left side is an expression, not a name
        ("2=2", None),
        ("y \\le 3", None),
        ("x=1, 5", None),  # every item must be an equation
    ],
    as_interval: [
        ("-2 \\le x \\le 7", "[-2,7]"),
        ("-2 < x \\leq 7", "(-2,7]"),
        ("7 \\geq x > -2", "(-2,7]"),  # 7 >= x > -2  ->  -2 < x <= 7
        ("x > 3", "(3,\\infty)"),
        ("x \\le 3", "(-\\infty,3]"),
        ("3 < x", "(3,\\infty)"),  # b < x: bounded below
        ("x \\in [-2,7]", "[-2,7]"),
        ("-2 \\le x < 7 \\le y", None),
        ("1 < 2", None),  # no variable
        ("\\left(1,2\\right)", None),
    ],
    phrased_final_answer: [
        ("so the answer is 42.", "42"),
        ("The Final Answer is: $\\frac{1}{2}$.\nThanks", "\\frac{1}{2}"),
        ("Answer: \\(x+1\\)", "x+1"),
        ("the answer is 3. No wait, the answer is 4", "4"),  # the last phrase wins
        ("The answer is 1, 2, 4, ...", "1, 2, 4, ..."),  # an ellipsis of periods is not a final period
        ("The answer is $1, 2, \\ldots$.", "1, 2, \\ldots"),
        ("no phrase here", None),
        ("The answer is .", None),
    ],
}


@pytest.mark.parametrize(
    "rewrite, text, expected", [(rewrite, *case) for rewrite, cases in REWRITES.items() for case in cases],
    ids=lambda value: value.__name__ if callable(value) else None,
)
def test_rewriting_one_text(rewrite, text, expected):
    assert rewrite(text) == expected


def test_expand_lists_the_literal_answer_first_and_marks_ratios():
    forms = expand("V_1:V_2=11:21")
    assert forms.texts == ("V_1:V_2=11:21", "11:21", "\\frac{11}{21}") and forms.ratio
    assert expand("x_1=1, x_2=-3", strip_lhs=False).texts == ("x_1=1, x_2=-3",)
    assert expand("$f(n)=n$, $g(n)=1$").texts[0] == "f(n)=n, g(n)=1"  # math delimiters are not value
    assert expand("\\$6").texts == ("\\$6",)  # an escaped dollar is


def test_joined_boxes_only_for_golds_of_as_many_items():
    boxes = ["(2, 2)", "(6, 2)"]
    assert joined_boxes(boxes, ["(2, 2), (6, 2)"]) == ["(2, 2), (6, 2)"]
    assert joined_boxes(boxes, ["\\{1,2\\}"]) == ["\\{(2, 2), (6, 2)\\}"]  # a set gold: compared as a set
    assert joined_boxes(boxes, ["\\{1,2,3\\}", "a, b, c"]) == []  # more items than boxes
    assert joined_boxes(["7", *boxes], ["(2, 2), (6, 2)"]) == []  # a longer list is not the last 2 of it
    assert joined_boxes(boxes, ["7"]) == []  # never against one value
    assert boxes_to_read(["(2, 2), (6, 2)", "3"]) == 3 and boxes_to_read([]) == 2


def test_last_boxed_answers_in_reading_order():
    text = "\\boxed{1} then \\boxed{} and \\boxed{2} and \\fbox{3}"
    assert last_boxed_answers(text, 2) == ["2", "3"]
    assert last_boxed_answers(text, 5) == ["1", "2", "3"]  # the empty box is skipped
    assert last_boxed_answers("no box", 3) == []


LENIENT = [
    # (response, gold, score, grader): no box asked for; the text after the last answer phrase is graded,
    # else the final answer math-verify's extraction finds (in a worker)
    ("The answer is 42", "42", 1.0, "caller"),
    ("Answer: 2x + 3", "2x + 3", 1.0, "caller"),  # math-verify's extraction reads "2" here
    ("Therefore the answer is +7", "+7", 1.0, "caller"),  # math-verify's extraction finds nothing
    ("The final answer is $\\frac{2}{4}$.", "0.5", 1.0, "worker"),
    ("So we get $\\frac{1}{2}$ in the end", "0.5", 1.0, "worker"),
    ("The answer is 41", "42", 0.0, "caller"),
    ("I do not know.", "42", 0.0, "no_answer"),
    ("Therefore \\boxed{7}, so the answer is 8", "7", 1.0, "caller"),  # a box still wins, as in strict
]


@pytest.mark.parametrize("response, gold, score, grader", LENIENT, ids=[f"lenient_{i}" for i in range(len(LENIENT))])
def test_lenient_format_policy_grades_the_final_answer_of_free_text(response, gold, score, grader):
    result = compute_score("m", response, gold, format_policy="lenient")
    assert (result["score"], result["grader"]) == (score, grader), result
    if score == 1.0:
        assert result["pred"] and result["reason"] == ""


def test_strict_format_policy_is_the_default_and_needs_a_box():
    assert compute_score("m", "The answer is 42", "42") == {
        "score": 0.0, "acc": False, "pred": "", "reason": "no_boxed_answer", "grader": "no_answer"
    }  # fmt: skip
    assert compute_score("m", "The answer is 42", "42", format_policy="strict")["score"] == 0.0


@pytest.mark.parametrize(
    "options, message",
    [
        ({"format_policy": "loose"}, "format_policy='loose'; expected one of"),
        ({"timeout_s": 0}, "timeout_s=0 must be a positive number"),
        ({"wait_s": float("nan")}, "wait_s=nan must be a positive number"),
        ({"timeout_s": "5"}, "timeout_s='5' must be a positive number"),
    ],
)
def test_options_are_validated(options, message):
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace("[", "\\[")):
        compute_score("m", "\\boxed{1}", "1", **options)
