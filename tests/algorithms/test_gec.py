import math
import random

import pytest
import torch

from edge_verl.algorithms.gec import (
    ANSWER_TEMPLATE,
    INJECT_ANSWER,
    REFLECTION_PHRASE,
    REGENERATE,
    REPLACE_SOLUTION,
    decide_correction,
    decision_rng,
    draw_branch,
    injected_answer_text,
    injected_token_mask,
    summarize_corrections,
)
from edge_verl.config import GecConfig

PAPER = (0.5, 0.25, 0.25)


def _decide(correct=False, group=(False,), probabilities=PAPER, only_all_wrong=False, answer=True, solution=True, missing="regenerate", rng=None):
    return decide_correction(
        correct=correct,
        group_correct=list(group),
        rng=rng or random.Random(0),
        probabilities=probabilities,
        only_all_wrong_groups=only_all_wrong,
        has_answer=answer,
        has_solution=solution,
        missing_solution=missing,
    )


def test_the_papers_texts_exactly():
    assert REFLECTION_PHRASE == " Wait! Something is wrong here."
    assert injected_answer_text("\\frac{1}{2}") == (
        "\nWait! Something is wrong here. After verification, the correct answer is \\boxed{\\frac{1}{2}}."
    )
    assert "{answer}" in ANSWER_TEMPLATE


def test_branch_frequencies_match_the_papers_probabilities():
    draws = 20_000
    counts = {REGENERATE: 0, INJECT_ANSWER: 0, REPLACE_SOLUTION: 0}
    for i in range(draws):
        counts[draw_branch(decision_rng(42, f"uid-{i}", i % 8), PAPER)] += 1
    # Binomial std: sqrt(N p (1 - p)) = 70.7 (p = 0.5) and 61.2 (p = 0.25); 5 sigma -> 354 and 306 draws,
    # i.e. tolerances of 0.0177 and 0.0153 on the frequencies; a wrong mapping is off by >= 0.25.
    for branch, probability in zip((REGENERATE, INJECT_ANSWER, REPLACE_SOLUTION), PAPER):
        sigma = math.sqrt(draws * probability * (1 - probability))
        assert abs(counts[branch] - draws * probability) < 5 * sigma, counts


def test_decisions_are_reproducible_per_response_whatever_the_order():
    first = [draw_branch(decision_rng(7, "u", i), PAPER) for i in range(64)]
    again = [draw_branch(decision_rng(7, "u", i), PAPER) for i in reversed(range(64))][::-1]
    assert first == again
    assert first != [draw_branch(decision_rng(8, "u", i), PAPER) for i in range(64)]


def test_correct_responses_are_never_touched():
    for seed in range(50):
        assert _decide(correct=True, rng=random.Random(seed)).branch is None


@pytest.mark.parametrize("probabilities, branch", [((1, 0, 0), REGENERATE), ((0, 1, 0), INJECT_ANSWER), ((0, 0, 1), REPLACE_SOLUTION)])
def test_forced_branches(probabilities, branch):
    assert all(_decide(probabilities=probabilities, rng=random.Random(s)).branch == branch for s in range(20))


def test_group_only_mode_corrects_only_all_wrong_groups():
    assert _decide(group=(False, True, False), only_all_wrong=True).reason == "group_has_correct"
    assert _decide(group=(False, False, False), only_all_wrong=True, probabilities=(1, 0, 0)).branch == REGENERATE
    # every_incorrect mode ignores the group
    assert _decide(group=(False, True), probabilities=(1, 0, 0)).branch == REGENERATE


@pytest.mark.parametrize(
    "missing, branch, reason", [("regenerate", REGENERATE, "corrected"), ("inject_answer", INJECT_ANSWER, "corrected"), ("skip", None, "no_solution")]
)
def test_missing_reference_solution_falls_back_as_configured(missing, branch, reason):
    decision = _decide(probabilities=(0, 0, 1), solution=False, missing=missing)
    assert (decision.branch, decision.reason, decision.fallback) == (branch, reason, True)


def test_missing_answer_skips_the_injection():
    decision = _decide(probabilities=(0, 1, 0), answer=False)
    assert (decision.branch, decision.reason) == (None, "no_answer")


def test_injected_token_mask():
    mask = injected_token_mask([0, 2, 0], [0, 4, 3], 5)
    assert mask.int().tolist() == [[0, 0, 0, 0, 0], [0, 0, 1, 1, 0], [1, 1, 1, 0, 0]]


def test_summary_hand_computed():
    # group a: both wrong originally; row 0 regenerated and now correct, row 1 got the answer injected
    # (tokens 2-3 of 4). group b: row 2 correct (untouched), row 3 replaced (tokens 0-2 of 3).
    infos = [
        {"branch": REGENERATE, "reason": "corrected", "original_correct": False, "injected_start": 1, "injected_end": 2},
        {"branch": INJECT_ANSWER, "reason": "corrected", "original_correct": False, "injected_start": 2, "injected_end": 4},
        {"branch": None, "reason": "correct", "original_correct": True},
        {"branch": REPLACE_SOLUTION, "reason": "corrected", "original_correct": False, "fallback": True, "injected_start": 0, "injected_end": 3},
        None,  # a validation-style row not run by the GEC loop
    ]
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    log_probs = torch.full((5, 4), -1.0)
    log_probs[1, 2:] = -3.0
    metrics = summarize_corrections(infos, [1.0, 1.0, 1.0, 1.0, 0.0], ["a", "a", "b", "b", "c"], mask, log_probs)
    assert metrics["gec/responses"] == 4 and metrics["gec/corrected"] == 3
    assert (metrics["gec/corrected_regenerate"], metrics["gec/corrected_inject_answer"], metrics["gec/corrected_replace_solution"]) == (1, 1, 1)
    assert metrics["gec/regenerate_became_correct"] == 1 and metrics["gec/fallbacks"] == 1
    assert metrics["gec/all_wrong_groups"] == 1 and metrics["gec/groups_rescued"] == 1
    # injected tokens: 1 + 2 + 3 = 6 of 3 + 4 + 2 + 3 + 1 = 13 trained tokens
    assert metrics["gec/injected_token_frac"] == pytest.approx(6 / 13)
    # injected log-probs: row 0 -> -1, row 1 -> -3, -3, row 3 -> -1 x3: mean (-1 - 6 - 3) / 6 = -1.6667
    assert metrics["gec/old_logprob_injected_mean"] == pytest.approx(-10 / 6)
    assert metrics["gec/old_logprob_sampled_mean"] == pytest.approx(-1.0)


def test_summary_is_empty_without_gec_rows():
    assert summarize_corrections([None, None], [0.0, 1.0], ["a", "b"], torch.ones(2, 3)) == {}


def test_config_defaults_and_validation():
    config = GecConfig()
    assert config.probabilities == PAPER and config.continuation_tokens == 256 and config.scope == "every_incorrect"
    assert GecConfig(force_regenerate=True).probabilities == (1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="must sum to 1"):
        GecConfig(probabilities=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="scope='some'"):
        GecConfig(scope="some")
    with pytest.raises(ValueError, match="must contain '\\{answer\\}'"):
        GecConfig(answer_template="no placeholder")
    with pytest.raises(ValueError, match="unknown option"):
        GecConfig.from_mapping({"probability": 1})


def test_the_prompt_gate_leaves_incorrect_responses_of_long_prompts_alone():
    assert _decide(correct=True).reason == "correct"  # correct first: the gate only matters for wrong ones
    gated = decide_correction(
        correct=False, group_correct=[False], rng=random.Random(0), probabilities=PAPER, only_all_wrong_groups=False,
        has_answer=True, has_solution=True, missing_solution="regenerate", prompt_fits=False,
    )
    assert gated.branch is None and gated.reason == "prompt_too_long"


def test_summary_of_continuations_and_the_gate():
    # Two regenerations: continuation 256 of a 256 budget, and 40 of a budget cut to 40 (of 256 asked);
    # one response left uncorrected by the prompt gate. mean (256 + 40) / 2 = 148.
    infos = [
        {"branch": REGENERATE, "reason": "corrected", "continuation_tokens": 256, "continuation_budget": 256, "continuation_requested": 256},
        {"branch": REGENERATE, "reason": "corrected", "continuation_tokens": 40, "continuation_budget": 40, "continuation_requested": 256},
        {"branch": None, "reason": "prompt_too_long"},
    ]
    metrics = summarize_corrections(infos, [0.0, 1.0, 0.0], ["a", "a", "b"], torch.ones(3, 4))
    assert metrics["gec/prompt_too_long"] == 1 and metrics["gec/continuation_cut"] == 1
    assert (metrics["gec/continuation_tokens_min"], metrics["gec/continuation_tokens_max"]) == (40, 256)
    assert metrics["gec/continuation_tokens_mean"] == 148


def test_budget_options_are_validated():
    assert (GecConfig().first_sample_tokens, GecConfig().max_prompt_tokens) == (None, 256)
    assert GecConfig(first_sample_tokens=1024, max_prompt_tokens=None).first_sample_tokens == 1024
    for key, value in (("first_sample_tokens", 0), ("max_prompt_tokens", 1.5), ("first_sample_tokens", True)):
        with pytest.raises(ValueError, match=f"edge_gec.{key}="):
            GecConfig(**{key: value})


def test_correction_time_share_hand_computed():
    # sampling 1.0 + 3.0 s, correcting 1.0 s (one regeneration) -> 1 / (4 + 1) = 0.2
    infos = [
        {"branch": REGENERATE, "reason": "corrected", "sample_seconds": 1.0, "correction_seconds": 1.0},
        {"branch": None, "reason": "correct", "original_correct": True, "sample_seconds": 3.0, "correction_seconds": 0.0},
    ]
    metrics = summarize_corrections(infos, [0.0, 1.0], ["a", "a"], torch.ones(2, 3))
    assert metrics["gec/correction_time_share"] == pytest.approx(0.2)
