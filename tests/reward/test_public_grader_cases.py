"""Held-out labelled cases from other public graders' unit tests (hendrycks/math, NeMo-Skills,
lm-evaluation-harness, ...; see data/PUBLIC_GRADER_CASES.md): edge_verl's grader agrees with more of them than
math-verify called directly on the same inputs, and every case it gets wrong is a known, named one."""

import logging
from pathlib import Path

from edge_verl.reward import compute_score
from edge_verl.reward.checks import agreement, math_verify_direct, read_labelled_cases

CASES = read_labelled_cases(Path(__file__).parent / "data" / "public_grader_cases.jsonl")

# Where edge_verl (lenient) and the source disagree, and why we keep our verdict:
KNOWN_DISAGREEMENTS = {
    # hendrycks/math test_order: the list "10, 4, -2" is wrong for "4, 10, -2" there; math-verify and we read a
    # comma-separated answer as the set of solutions (OlympiadBench's multi-answer golds need that).
    ("\\boxed{10, 4, -2}", "4, 10, -2"),
    ("\\boxed{0.1, 4, 2}", "4, .1, 2"),
    # MindSpeed-RL: "\boxed{185\}" has no closing brace (the "\}" is an escaped brace): no well-formed box.
    ("\\boxed{185\\}", "185"),
    ("\\boxed{185\\}", "185\\"),
}


def _ours(policy):
    return lambda response, gold: compute_score("public", response, gold, format_policy=policy)["score"] == 1.0


def test_public_cases_ours_beats_math_verify_on_the_same_inputs():
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    ours_right, ours_wrong = agreement(CASES, _ours("lenient"))
    math_verify_right, _ = agreement(CASES, math_verify_direct)
    assert {(case.response, case.gold) for case in ours_wrong} == KNOWN_DISAGREEMENTS, [(c.response, c.gold, c.expected) for c in ours_wrong]
    assert ours_right > math_verify_right, (ours_right, math_verify_right, len(CASES))


def test_strict_policy_differs_from_lenient_only_on_responses_without_a_box():
    strict_right, strict_wrong = agreement(CASES, _ours("strict"))
    _, lenient_wrong = agreement(CASES, _ours("lenient"))
    extra = {(case.response, case.gold) for case in strict_wrong} - {(case.response, case.gold) for case in lenient_wrong}
    assert extra and all("\\boxed" not in response for response, _ in extra)
