import time

import pytest

from edge_verl.reward.extract import MAX_ANSWER_CHARS, last_boxed_answer

CASES = [
    ("plain", r"The answer is \boxed{42}.", "42"),
    ("last_of_two", r"\boxed{4}, but actually \boxed{5}", "5"),
    ("nested", r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    ("fbox", r"\fbox{7}", "7"),
    ("fbox_then_boxed", r"\fbox{1} then \boxed{2}", "2"),
    ("boxed_then_fbox", r"\boxed{1} then \fbox{2}", "2"),
    ("space_before_brace", r"\boxed {12}", "12"),
    ("no_braces", r"\boxed 42", "42"),
    ("no_braces_period", r"so \boxed 42.", "42"),
    ("no_braces_negative", r"\boxed -3", "-3"),
    ("text_inside", r"\boxed{\text{Monday}}", r"\text{Monday}"),
    ("escaped_brace", r"\boxed{\{1,2\}}", r"\{1,2\}"),
    ("matrix", r"\boxed{\begin{pmatrix}1\\2\end{pmatrix}}", r"\begin{pmatrix}1\\2\end{pmatrix}"),
    ("unbalanced_last_falls_back", r"\boxed{3} and \boxed{4", "3"),
    ("empty_box_skipped", r"\boxed{5} \boxed{}", "5"),
    ("other_command", r"\boxedfoo{3}", None),
    ("none", "no box here", None),
    ("empty", "", None),
    ("dollar_inside", r"$\boxed{x^2}$", "x^2"),
    ("whitespace_stripped", r"\boxed{  7 }", "7"),
]


@pytest.mark.parametrize("text, expected", [(t, e) for _, t, e in CASES], ids=[c[0] for c in CASES])
def test_last_boxed_answer(text, expected):
    assert last_boxed_answer(text) == expected


@pytest.mark.parametrize("value", [None, 42, b"\\boxed{1}", ["\\boxed{1}"]])
def test_non_strings_give_none(value):
    assert last_boxed_answer(value) is None


def test_answer_longer_than_the_cap_is_rejected():
    assert last_boxed_answer("\\boxed{" + "1" * (MAX_ANSWER_CHARS + 10) + "}") is None


def test_nesting_deeper_than_the_cap_is_rejected():
    assert last_boxed_answer("\\boxed{" + "{" * 100 + "}" * 101) is None


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{" * 200_000,
        "{" * 1_000_000,
        "\\boxed{1}" * 100_000,
        "\\boxed{" + "x" * 1_000_000,
        "\\fbox" * 200_000 + "\\boxed{9}",
    ],
    ids=["box_bomb", "brace_bomb", "many_boxes", "unclosed_megabyte", "fbox_bomb"],
)
def test_hostile_megabyte_inputs_finish_fast(text):
    started = time.perf_counter()
    last_boxed_answer(text)
    # generous bound: measured ~5 ms; a quadratic scan would take minutes
    assert time.perf_counter() - started < 2.0


def test_many_boxes_take_the_last():
    assert last_boxed_answer("\\boxed{1}" * 100_000 + "\\boxed{2}") == "2"
