"""Hand-made (response, gold, expected) pairs per answer-form category, each right case beside its negative
twin (the near miss that must stay 0). Used by test_answer_categories.py and by
``scripts/bench_reward.py --forms`` (per-category agreement, edge_verl vs math-verify direct)."""


def B(answer: str) -> str:
    return "Reasoning ... so the answer is \\boxed{" + answer + "}."


CATEGORIES = {
    "malformed_radical": [
        (B("4\\sqrt(2)"), "4", False),  # was a false positive: math-verify read 4
        (B("4\\sqrt(2)"), "4\\sqrt{2}", True),
        (B("3\\sqrt(x+1)"), "3", False),
        (B("\\sqrt[3](8)"), "2", True),
        (B("2\\sqrt(3)"), "2\\sqrt{2}", False),
    ],
    "gold_with_boxes": [
        (B("(1, 2)"), "\\boxed{1} no no no \\boxed{2}", False),  # was a false positive
        (B("(1, 2)"), "\\boxed{1} and \\boxed{2}", False),  # a point is not a set of answers
        (B("2"), "\\boxed{1} no no no \\boxed{2}", True),  # the gold's last box, as for a response
        (B("1, 2"), "\\boxed{1} and \\boxed{2}", True),
        (B("1, 3"), "\\boxed{1} and \\boxed{2}", False),
        (B("7"), "We compute ... hence \\boxed{7}.", True),
    ],
    "several_boxes": [
        ("\\boxed{1}, \\boxed{2}, \\boxed{3}", "\\{1,2,3\\}", True),
        ("\\boxed{3} and \\boxed{1} and \\boxed{2}", "\\{1, 2, 3\\}", True),
        ("The roots are \\[\\boxed{-2} \\quad \\text{and} \\quad \\boxed{1}.\\]", "1, -2", True),
        ("\\boxed{1}, \\boxed{2}", "\\{1,2,3\\}", False),  # fewer boxes than answers
        ("\\boxed{0}, \\boxed{1}, \\boxed{2}, \\boxed{3}", "\\{1,2,3\\}", False),  # not the last 3 of 4
        ("\\boxed{1}, but maybe \\boxed{2}, \\boxed{3}", "\\{1,2,3\\}", False),  # words end the list
        ("\\boxed{1} or \\boxed{2}", "1, 2", False),  # "or" hedges
        ("\\boxed{1} and \\boxed{2}", "2", True),  # one-value gold: the last box, never the join
        ("\\boxed{1} and \\boxed{2}", "1", False),
    ],
    "decimal_comma": [
        (B("1000,99"), "1000.99", True),
        (B("0,111"), "0.111", True),
        (B("1.22"), "1,22", True),
        (B("1000,98"), "1000.99", False),
        (B("1,222"), "1.222", False),  # could be 1222: refused
        (B("12,345"), "12.345", False),
        (B("1,5"), "15", False),  # no decimal gold: the comma is not read as a point
    ],
    "percentage_word": [
        (B("28 percentage"), "28\\%", True),
        (B("28\\text{ percentage}"), "28\\%", True),
        (B("29 percentage"), "28\\%", False),
        (B("28 percentage"), "0.28", False),
    ],
    "chinese_sentence": [
        (B("所以答案是\\frac{1}{2}。"), "\\frac{1}{2}", True),
        (B("所以答案是\\frac{1}{3}。"), "\\frac{1}{2}", False),
        (B("\\text{概率为}\\frac{3}{4}"), "0.75", True),
        (B("答案：12元。"), "12", True),
        (B("不是\\frac{1}{2}"), "\\frac{1}{2}", False),  # a negation is not the value
        (B("至少为3"), "3", False),  # a bound is not the value
        (B("答案是1或2"), "1", False),  # a hedge
    ],
    "radical_forms": [
        (B("\\frac{1}{\\sqrt{n}}"), "\\sqrt{\\frac{1}{n}}", True),
        (B("\\sqrt{n}"), "\\sqrt{\\frac{1}{n}}", False),
        (B("1/\\sqrt{n}"), "\\sqrt{1/n}", True),
        (B("\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{2\\sqrt{33}+15}"), "\\frac{\\sqrt{\\sqrt{194}+\\sqrt{11}}}{15+2\\sqrt{33}}", True),
        (B("\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{2\\sqrt{33}+16}"), "\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{15+2\\sqrt{33}}", False),
        (B("x"), "\\sqrt{x^2}", False),  # they differ where both are real (x < 0)
    ],
    "interval_decimals": [
        (B("(0.6, 2.6667]"), "(\\frac{3}{5}, \\frac{8}{3}]", True),
        (B("(0.6, 2.667]"), "(3/5, 8/3]", True),
        (B("(0.6, 2.7]"), "(\\frac{3}{5}, \\frac{8}{3}]", False),  # 2 significant digits
        (B("(0.6, 2.66]"), "(\\frac{3}{5}, \\frac{8}{3}]", False),  # not 8/3 rounded
        (B("[0.6, 2.6667]"), "(\\frac{3}{5}, \\frac{8}{3}]", False),  # bracket
    ],
    "chain_inequality": [
        (B("-2 \\le x \\le 7"), "x \\in [-2, 7]", True),
        (B("-2 \\\\le x \\\\le 7"), "x \\in [-2,7]", True),  # doubled backslashes
        (B("\\{x \\mid -2 \\le x \\le 7\\}"), "x \\in [-2, 7]", True),
        (B("-2 < x \\le 7"), "x \\in [-2, 7]", False),
        (B("-2 \\le y \\le 7"), "x \\in [-2, 7]", False),  # another variable
    ],
    "ellipsis_sequence": [
        # edge_verl.reward.sequences: written terms compared one by one, the ellipsis in the same position
        (B("1, 2, 3, \\cdots"), "1,2,3,\\ldots", True),  # another spelling of the ellipsis
        (B("1, 2, 4, 16, \\dots"), "1, 2, 4, 8, \\ldots", False),  # a written term differs
        (B("1, 2, 4, 8, …"), "1, 2, 4, 8, ...", True),
        (B("1, 2, 5, …"), "1, 2, 4, ...", False),
        (B("1 : 2 : \\cdots"), "1:2:\\ldots", True),  # a ratio
        (B("1:3:\\ldots"), "1:2:\\ldots", False),
        (B("1; 2; 4; \\ldots"), "1, 2, 4, \\ldots", True),  # semicolons list as commas do
        (B("1:2:4:\\ldots"), "1, 2, 4, \\ldots", False),  # a ratio is not a list
        (B("1, 2; 3, 4; \\ldots"), "1, 2, 3, 4, \\ldots", False),  # mixed separators: as written, the semicolons group
        (B("1, \\dots, 10"), "1, \\ldots, 10", True),
        (B("1, 10, \\ldots"), "1, \\ldots, 10", False),  # the ellipsis elsewhere
        (B("1, 2, 4, 8\\ldots"), "1, 2, 4, 8, \\ldots", True),  # an ellipsis attached to the last term
        (B("1, 2, 4, \\ldots"), "1, 2, 4, 8, \\ldots", False),  # fewer written terms
        (B("1, 4, 9, \\ldots, n^{2}"), "1, 4, 9, \\ldots, n^2", True),  # a general term, symbolically
        (B("1, 4, 9, \\ldots, n^3"), "1, 4, 9, \\ldots, n^2", False),  # was a false positive: math-verify read 9
        (B("\\frac{1}{2}, \\frac{1}{4}, \\ldots"), "0.5, 0.25, \\ldots", True),
        (B("\\frac{1}{2}, \\frac{1}{3}, \\ldots"), "0.5, 0.25, \\ldots", False),
        (B("(1, 2, 4, \\ldots)"), "1, 2, 4, \\ldots", True),  # parentheses around a sequence
        (B("\\{1, 2, 4, \\ldots\\}"), "1, 2, 4, \\ldots", True),  # a bare list fits a set, as without an ellipsis
        (B("(1, 2, 4, \\ldots)"), "\\{1, 2, 4, \\ldots\\}", False),  # a tuple is not a set
        (B("1, 2, 3, \\ldots"), "1, 2, 3", False),  # an ellipsis on one side only, never a merged set
        (B("1, 2, 3"), "1, 2, 3, \\ldots", False),
    ],
    "choice_letter_text": [
        (B("B。不是 A"), "B", True),
        (B("A。不是 B"), "B", False),
        (B("D. it can't be A or B"), "D", True),
        (B("A or B"), "A", False),  # a hedge between letters
        (B("(C) since the others fail"), "C", True),
        (B("A. B. C."), "A", False),
        (B("A, B"), "B", False),
    ],
}
