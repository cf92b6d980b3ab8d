"""The case table: public grading conventions (MATH / Minerva / OlympiadBench style answers) and
adversarial inputs, each with an id. ``B(x)`` is a response whose last boxed answer is x."""

import os
import pathlib

import pytest

from edge_verl.reward import compute_score
from edge_verl.reward.score import GRADER_OUTCOMES


def B(answer: str) -> str:
    return "Let me think step by step. ... Therefore the answer is \\boxed{" + answer + "}."


CORRECT = [
    # integers and signs
    ("int", B("42"), "42"),
    ("int_spaces", B(" 42 "), "42"),
    ("int_plus", B("+5"), "5"),
    ("negative", B("-7"), "-7"),
    ("int_gold_number", B("12"), 12),
    ("int_gold_float", B("3"), 3.0),
    ("leading_zero_decimal", B("0.50"), "0.5"),
    ("decimal_trailing_zero", B("2.50"), "2.5"),
    ("int_vs_decimal", B("3.0"), "3"),
    # fractions and decimals
    ("frac_vs_decimal", B("\\frac{1}{2}"), "0.5"),
    ("dfrac", B("\\dfrac{3}{4}"), "\\frac{3}{4}"),
    ("tfrac", B("\\tfrac{3}{4}"), "0.75"),
    ("frac_short", B("\\frac12"), "\\frac{1}{2}"),
    ("slash_fraction", B("3/4"), "\\frac{3}{4}"),
    ("frac_reduced", B("\\frac{2}{4}"), "\\frac{1}{2}"),
    ("negative_frac", B("-\\frac{1}{3}"), "\\frac{-1}{3}"),
    ("mixed_decimal", B("1.25"), "\\frac{5}{4}"),
    ("frac_gold_decimal", B("\\frac{1}{8}"), "0.125"),
    # radicals, pi, powers
    ("sqrt_equiv", B("\\sqrt{18}"), "3\\sqrt{2}"),
    ("sqrt_frac", B("\\frac{\\sqrt{2}}{2}"), "\\frac{1}{\\sqrt{2}}"),
    ("pi", B("2\\pi"), "2\\pi"),
    ("pi_frac", B("\\frac{\\pi}{2}"), "\\frac{1}{2}\\pi"),
    ("power", B("2^{10}"), "1024"),
    ("exp_e", B("e^{2}"), "e^2"),
    ("cube_root", B("\\sqrt[3]{8}"), "2"),
    ("sqrt_sum", B("1+\\sqrt{2}"), "\\sqrt{2}+1"),
    # algebraic expressions
    ("commuted_poly", B("1+x^2"), "x^2+1"),
    ("factored", B("(x+1)^2"), "x^2+2x+1"),
    ("assignment_prefix", B("x = 5"), "5"),
    ("assignment_gold", B("5"), "x=5"),
    ("expr_frac", B("\\frac{x}{2}"), "0.5x"),
    ("y_equals_line", B("y = 2x+1"), "y=2x+1"),
    # sets, tuples, intervals, matrices
    ("set_order", B("\\{2,1\\}"), "\\{1,2\\}"),
    ("tuple", B("(1, 2)"), "(1,2)"),
    ("interval_open", B("(0, 1)"), "(0,1)"),
    ("interval_half", B("(1,2]"), "(1,2]"),
    ("interval_union", B("(-\\infty, 0) \\cup (1, \\infty)"), "(-\\infty,0)\\cup(1,\\infty)"),
    ("matrix", B("\\begin{pmatrix}1\\\\2\\end{pmatrix}"), "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("bmatrix_vs_pmatrix", B("\\begin{bmatrix}1&0\\\\0&1\\end{bmatrix}"), "\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}"),
    ("infinity", B("\\infty"), "\\infty"),
    # units, percent, currency, degrees
    ("units_text", B("10\\text{ cm}"), "10"),
    ("units_gold", B("10"), "10\\text{ cm}"),
    ("percent_pred", B("25\\%"), "25"),
    ("percent_gold", B("25"), "25\\%"),
    ("dollar_gold", B("6"), "\\$6"),
    ("dollar_pred", B("\\$6"), "6"),
    ("degrees", B("90^\\circ"), "90"),
    ("degrees_gold", B("90"), "90^{\\circ}"),
    ("units_inches", B("12 \\text{inches}"), "12"),
    ("mbox_units", B("5\\mbox{ units}"), "5"),
    # text answers and choices
    ("text_word", B("\\text{Monday}"), "Monday"),
    ("text_case_same", B("\\text{yes}"), "yes"),
    ("choice_letter", B("B"), "B"),
    ("choice_paren", B("(C)"), "C"),
    ("choice_text", B("\\text{(D)}"), "D"),
    ("choice_lower", B("e"), "E"),
    ("textbf", B("\\textbf{7}"), "7"),
    # lists of acceptable answers (Minerva / OlympiadBench)
    ("gold_list_first", B("3"), ["3", "3.0"]),
    ("gold_list_second", B("\\frac{1}{3}"), ["0.3", "\\frac{1}{3}"]),
    ("gold_tuple", B("7"), ("7",)),
    ("gold_list_numbers", B("2"), [2, 3]),
    # extraction conventions
    ("trailing_period_inside", B("12."), "12"),
    ("left_right", B("\\left(1,2\\right)"), "(1,2)"),
    ("thin_space", B("1\\,000"), "1000"),
    ("displaystyle", B("\\displaystyle\\frac{1}{2}"), "\\frac12"),
    ("big_int", B("123456789012345678901234567890"), "123456789012345678901234567890"),
    ("sci_notation", B("1.5\\times 10^{3}"), "1500"),
    ("neg_zero", B("-0"), "0"),
    ("trig_value", B("\\frac{\\sqrt{3}}{2}"), "\\sin(\\pi/3)"),
    ("log_value", B("\\log_2 8"), "3"),
    ("binomial", B("\\binom{5}{2}"), "10"),
    ("factorial", B("5!"), "120"),
    ("abs_value", B("|-3|"), "3"),
    ("complex", B("1+2i"), "1+2i"),
    ("equation_pair", B("x=1"), "1"),
    ("gold_with_spaces", B("3x+2"), "3 x + 2"),
    # extraction conventions without a plain box around the answer
    ("last_box_wins", "\\boxed{4}, but actually \\boxed{5}", "5"),
    ("fbox", "\\fbox{9}", "9"),
    ("boxed_no_braces", "so \\boxed 42", "42"),
    ("inline_math", "$\\boxed{\\frac{1}{2}}$", "0.5"),
    # answer forms (edge_verl.reward.forms): several boxes forming the answer, one per gold item
    ("boxes_form_tuples", "\\boxed{(2, 2)} and \\boxed{(6, 2)}", "(2, 2), (6, 2)"),
    ("boxes_form_tuples_any_order", "\\boxed{(6, 2)}, \\boxed{(2, 2)}", "(2, 2), (6, 2)"),
    ("boxes_one_per_unknown", "\\boxed{x=1} \\text{ and } \\boxed{y=2}", "x=1, y=2"),
    ("boxes_after_earlier_box", "first \\boxed{7}; the solutions: \\boxed{(2, 2)} and \\boxed{(6, 2)}", "(2, 2), (6, 2)"),
    # a unit or word after the value inside the box
    ("unit_textnormal", B("125\\textnormal{ miles}"), "125"),
    ("unit_pct", B("28 pct"), "28"),
    ("unit_percent", B("28 percent"), "28"),
    ("unit_percent_gold", B("28 percent"), "28\\%"),
    ("unit_any_text_word", B("28\\text{ students}"), "28"),
    ("unit_squared", B("10\\text{ cm}^2"), "10"),
    ("unit_after_fraction", B("\\frac{540}{14}"), "\\frac{270}7\\text{ degrees}"),
    ("unit_in_gold", B("5.4"), "5.4 \\text{ cents}"),
    # a multiple-choice label after the value
    ("choice_label_after_value", B("3 \\ \\textbf{(C)}"), "3"),
    ("choice_label_after_radical", B("2\\sqrt{10}~\\textbf{(A)}"), "2\\sqrt{10}"),
    # golds with a named left-hand side
    ("ratio_lhs_value", B("11:21"), "V_1:V_2=11:21"),
    ("ratio_lhs_fraction", B("\\frac{22}{42}"), "V_1:V_2=11:21"),
    ("ratio_lhs_spaced", B("V_1 : V_2 = 11 : 21"), "V_1:V_2=11:21"),
    ("lhs_values_only", B("1, -3"), "x_1=1, x_2=-3"),
    ("lhs_spaced", B("x_1 = 1,\\ x_2 = -3"), "x_1=1, x_2=-3"),
    ("function_lhs", B("x+1"), "$f(x)=x+1$"),
    ("gold_in_dollars", B("f(n)=n, g(n)=1"), "$f(n)=n$, $g(n)=1$"),
    # intervals written as inequalities or memberships
    ("inequality_vs_membership", B("-2 \\le x \\le 7"), "x \\in [-2,7]"),
    ("membership_vs_inequality", B("x \\in [-2,7]"), "-2 \\le x \\le 7"),
    ("inequality_descending", B("7 \\geq x \\geq -2"), "[-2,7]"),
    ("inequality_one_sided", B("x > 3"), "(3, \\infty)"),
    ("inequality_strict_left", B("-2 < x \\le 7"), "(-2,7]"),
]

WRONG = [
    ("wrong_int", B("41"), "42"), ("wrong_sign", B("-42"), "42"), ("wrong_frac", B("\\frac{1}{3}"), "0.5"),
    ("wrong_decimal_precision", B("0.33"), "\\frac{1}{3}"), ("wrong_expr", B("x^2-1"), "x^2+1"),
    ("wrong_set", B("\\{1,3\\}"), "\\{1,2\\}"), ("wrong_interval_bracket", B("[1,2]"), "(1,2]"),
    ("wrong_tuple_order", B("(2,1)"), "(1,2)"), ("wrong_matrix", B("\\begin{pmatrix}2\\\\1\\end{pmatrix}"), "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("wrong_choice", B("A"), "B"), ("wrong_choice_text", B("\\text{(A)}"), "C"), ("wrong_text", B("\\text{Tuesday}"), "Monday"),
    ("wrong_pi", B("\\pi"), "2\\pi"), ("wrong_sqrt", B("\\sqrt{3}"), "\\sqrt{2}"), ("wrong_percent", B("0.25"), "25\\%"),
    ("wrong_units", B("100"), "10\\text{ cm}"), ("wrong_list", B("4"), ["3", "3.0"]),
    # known math-verify false positives (docs/reward.md)
    ("fp_tiny_values", B("\\frac{1}{2006!}"), "\\frac{1}{2004!}"), ("fp_tiny_powers", B("10^{-30}"), "2\\cdot 10^{-30}"),
    ("fp_one_minus_inv_e", B("1+\\frac{1}{e}"), "1-\\frac{1}{e}"), ("fp_time_ratio", B("\\frac{4}{30}"), "4:30"),
    ("fp_time_vs_decimal", B("4.5"), "4:30"), ("fp_time_pred", B("4:30"), "\\frac{2}{15}"),
    # answers merged by math-verify when several boxes appear: we grade only the last
    ("merged_boxes", "\\boxed{4}, but actually \\boxed{5}", "4"), ("merged_set_words_between", "\\boxed{1} but maybe \\boxed{2}", "\\{1,2\\}"),
    # hedging
    ("hedge_two_answers", B("3 \\text{ or } 4"), "3"), ("hedge_pm", B("\\pm 2"), "2"),
    ("hedge_list", B("1, 2, 3, 4, 5"), "3"),
    # no answer
    ("no_box", "The answer is 42.", "42"), ("empty_box", "\\boxed{}", "42"), ("unbalanced_box", "\\boxed{42", "42"),
    ("other_command", "\\boxedfoo{42}", "42"), ("answer_outside_box", "42 \\boxed{41}", "42"),
    ("wrong_big_int", B("123456789012345678901234567891"), "123456789012345678901234567890"),
    ("wrong_complex", B("1-2i"), "1+2i"), ("wrong_factorial", B("4!"), "120"),
    # the answer forms above must not let these through
    ("boxes_names_swapped", B("x_1=-3, x_2=1"), "x_1=1, x_2=-3"), ("word_that_is_not_a_unit", B("2 xy"), "2"),
    ("inequality_wrong_bracket", B("-2 < x \\le 7"), "x \\in [-2,7]"), ("one_box_of_two", B("(2,2)"), "(2, 2), (6, 2)"),
    ("boxes_one_wrong", "\\boxed{(6,2)} and \\boxed{(7,2)}", "(2, 2), (6, 2)"), ("ratio_lhs_wrong", B("11:20"), "V_1:V_2=11:21"),
    ("unit_wrong_value", B("125\\text{ miles}"), "126"), ("inequality_open_vs_closed", B("x > 3"), "x \\ge 3"),
    ("percent_is_not_a_fraction", B("28 percent"), "0.28"), ("text_between_values", B("2\\text{ and }3"), "2"),
    ("choice_label_wrong_value", B("3 \\textbf{(C)}"), "4"),
    ("one_box_per_unknown_wrong", "\\boxed{x=1} and \\boxed{y=3}", "x=1, y=2"),
    ("nan_gold", B("1"), float("nan")), ("none_gold", B("1"), None), ("empty_gold", B("1"), ""),
    ("empty_gold_list", B("1"), []), ("bool_gold", B("1"), True),
]

ADVERSARIAL = [
    ("megabyte_text", "x" * 1_000_000 + B("1"), "1", 1.0),
    ("megabyte_box_bomb", "\\boxed{" * 200_000, "1", 0.0),
    ("megabyte_brace_bomb", "{" * 1_000_000 + "}" * 10, "1", 0.0),
    ("thousands_of_boxes", "\\boxed{3}" * 5000 + "\\boxed{4}", "4", 1.0),
    ("power_tower", B("9^{9^{9^{9^{9^{9}}}}}"), "1", 0.0),
    ("factorial_bomb", B("(10^{10})!!"), "1", 0.0),
    ("huge_exponent", B("2^{2^{2^{100}}}"), "3", 0.0),
    ("unicode", B("½"), "\\frac{1}{2}", 0.0),
    ("unicode_text", "答案是 \\boxed{42}", "42", 1.0),
    ("emoji", B("🙂"), "1", 0.0),
    ("binary_bytes", b"\xff\xfe\\boxed{1}", "1", 1.0),
    ("nul_byte_ignored", B("1\x00"), "1", 1.0),
    ("none_response", None, "1", 0.0),
    ("int_response", 12345, "1", 0.0),
    ("empty_response", "", "1", 0.0),
    ("deep_nesting", B("(" * 500 + "1" + ")" * 500), "1", 0.0),
    ("latex_macro_def", B("\\def\\x{1}\\x"), "1", 0.0),
    ("very_long_answer", B("1+" * 400 + "1"), "401", 1.0),
]


@pytest.mark.parametrize("response, gold", [(r, g) for _, r, g in CORRECT], ids=[c[0] for c in CORRECT])
def test_correct_answers_score_one(response, gold):
    result = compute_score("math", response, gold)
    assert result["score"] == 1.0 and result["acc"] is True and result["reason"] == "", result


@pytest.mark.parametrize("response, gold", [(r, g) for _, r, g in WRONG], ids=[c[0] for c in WRONG])
def test_wrong_answers_score_zero(response, gold):
    result = compute_score("math", response, gold)
    assert result["score"] == 0.0 and result["acc"] is False and result["reason"], result


@pytest.mark.parametrize("response, gold, expected", [c[1:] for c in ADVERSARIAL], ids=[c[0] for c in ADVERSARIAL])
def test_adversarial_inputs_return_a_bounded_score_and_never_raise(response, gold, expected):
    result = compute_score("math", response, gold, timeout_s=3.0)
    assert set(result) == {"score", "acc", "pred", "reason", "grader"}
    assert result["grader"] in GRADER_OUTCOMES
    assert result["score"] == expected, result
    assert isinstance(result["pred"], str) and len(result["pred"]) <= 1000


INJECTIONS = [
    "__import__('os').system('touch {marker}')",
    "exec(\"open('{marker}','w').write('x')\")",
    "eval(compile(\"open('{marker}','w')\",'','exec'))",
    "\\input{{{marker}}}",
    "$(touch {marker})",
    "`touch {marker}`",
    "lambda: open('{marker}', 'w')",
    "\\immediate\\write18{{touch {marker}}}",
]


@pytest.mark.parametrize("template", INJECTIONS, ids=[f"injection_{i}" for i in range(len(INJECTIONS))])
def test_code_in_answers_is_never_executed(tmp_path, template):
    marker = tmp_path / "pwned"
    payload = template.format(marker=marker)
    for response in (B(payload), payload, "\\boxed{" + payload):
        result = compute_score("math", response, "1", timeout_s=3.0)
        assert result["score"] == 0.0
    assert not marker.exists()
    assert not pathlib.Path("pwned").exists() and "pwned" not in os.listdir(tmp_path)


def test_extra_kwargs_from_verl_are_accepted():
    assert compute_score(data_source="x", solution_str=B("1"), ground_truth="1", extra_info={"index": 3}, foo=1)["score"] == 1.0


def test_grader_outcome_fractions():
    from edge_verl.reward.score import grader_outcome_fractions

    # 4 known outcomes (None and unknown values are not calls of this reward): caller 2/4, worker 1/4, deadline 1/4
    fractions = grader_outcome_fractions(["caller", None, "worker", "caller", "bogus", "deadline"])
    assert fractions == {"caller": 0.5, "worker": 0.25, "deadline": 0.25, "waiting": 0.0, "no_answer": 0.0, "crashed": 0.0}
    assert grader_outcome_fractions([None, ""]) == {}
