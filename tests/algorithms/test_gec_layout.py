"""GEC's token layout (edge_verl/algorithms/gec_layout.py), the one function verl's agent loop and OpenRLHF's
executor both lay a correction out with: hand-computed cases per branch, then properties over random inputs."""

import random

import pytest

from edge_verl.algorithms.gec import BRANCHES, INJECT_ANSWER, REGENERATE, REPLACE_SOLUTION, GecConfig
from edge_verl.algorithms.gec_layout import Layout, correction_layout, injected_text

EOS, PAD = 2, 3  # two end tokens: a first sample may end in either, even in both
END_IDS = {EOS, PAD}
SAMPLED = [5, 6, 7, EOS, PAD]  # body [5, 6, 7] once its trailing end tokens are stripped


def layout(branch, injected, limit, **options):
    return correction_layout(branch, SAMPLED, injected, config=GecConfig(**options), eos_id=EOS, end_ids=END_IDS,
                             limit=limit)


def test_a_replaced_solution_is_the_solution_and_eos_alone():
    # [10, 11] + EOS = 3 tokens, all injected; 2 tokens of room cannot hold it
    assert layout(REPLACE_SOLUTION, [10, 11], limit=8) == Layout([10, 11, EOS], 0, 3)
    assert layout(REPLACE_SOLUTION, [10, 11], limit=3) == Layout([10, 11, EOS], 0, 3)
    assert layout(REPLACE_SOLUTION, [10, 11], limit=2) is None


def test_an_injected_answer_follows_the_body_cut_from_its_end_to_fit():
    # room 8: body [5, 6, 7] + [20, 21, EOS] = 6 tokens, the answer at [3, 6)
    assert layout(INJECT_ANSWER, [20, 21], limit=8) == Layout([5, 6, 7, 20, 21, EOS], 3, 6)
    # room 4: the suffix takes 3, the body keeps its first 4 - 3 = 1 token
    assert layout(INJECT_ANSWER, [20, 21], limit=4) == Layout([5, 20, 21, EOS], 1, 4)
    assert layout(INJECT_ANSWER, [20, 21], limit=2) is None
    # first_attempt=drop: no body
    assert layout(INJECT_ANSWER, [20, 21], limit=8, first_attempt="drop") == Layout([20, 21, EOS], 0, 3)


def test_a_regeneration_leaves_the_continuation_the_room_left_up_to_its_budget():
    # room 10: body [5, 6, 7] + phrase [30] = 4 tokens; the continuation min(4, 10 - 4) = 4
    assert layout(REGENERATE, [30], limit=10, continuation_tokens=4) == Layout([5, 6, 7, 30], 3, 4, 4)
    # room 3: the body keeps 3 - 1 - 1 = 1 token (one left for the continuation), which gets min(4, 3 - 2) = 1
    assert layout(REGENERATE, [30], limit=3, continuation_tokens=4) == Layout([5, 30], 1, 2, 1)
    # the phrase and one continuation token need 2
    assert layout(REGENERATE, [30], limit=1) is None
    assert layout(REGENERATE, [30], limit=10, continuation_tokens=4, first_attempt="drop") == Layout([30], 0, 1, 4)


def test_the_injected_text_is_the_branchs_and_an_unknown_branch_is_refused():
    config = GecConfig(answer_template="So the answer is {answer}.")
    assert injected_text(REPLACE_SOLUTION, config, "4", "2 + 2 = 4") == "2 + 2 = 4"
    assert injected_text(INJECT_ANSWER, config, "4", "2 + 2 = 4") == "So the answer is 4."
    assert injected_text(REGENERATE, config, "4", "2 + 2 = 4") == config.reflection_phrase
    with pytest.raises(ValueError, match="GEC branch 'retry'"):
        injected_text("retry", config, "4", "")
    with pytest.raises(ValueError, match="GEC branch 'retry'"):
        correction_layout("retry", SAMPLED, [1], config=config, eos_id=EOS, end_ids=END_IDS, limit=8)


def test_every_layout_fits_its_limit_and_keeps_the_body_before_its_span():
    draw = random.Random(7)
    for _ in range(2000):
        sampled = [draw.randrange(4, 50) for _ in range(draw.randrange(0, 12))] + [EOS] * draw.randrange(0, 3)
        injected = [draw.randrange(4, 50) for _ in range(draw.randrange(0, 8))]
        branch, limit = draw.choice(BRANCHES), draw.randrange(0, 20)
        config = GecConfig(continuation_tokens=draw.randrange(1, 10), first_attempt=draw.choice(("keep", "drop")))
        result = correction_layout(branch, sampled, injected, config=config, eos_id=EOS, end_ids=END_IDS, limit=limit)
        suffix = injected + ([] if branch == REGENERATE else [EOS])
        if result is None:  # only when the injected part (and a regeneration's first token) cannot fit
            assert len(suffix) + (branch == REGENERATE) > limit
            continue
        assert len(result.tokens) + (result.continuation_budget or 0) <= limit
        assert result.tokens[result.injected_start : result.injected_end] == suffix
        assert result.injected_end == len(result.tokens)  # what follows the span is a regeneration's continuation
        stripped = sampled
        while stripped and stripped[-1] in END_IDS:
            stripped = stripped[:-1]
        kept = [] if config.first_attempt == "drop" or branch == REPLACE_SOLUTION else stripped
        # the body is the first sample's, cut from its end only as far as the suffix (and one continuation token) need
        assert result.tokens[: result.injected_start] == kept[: result.injected_start]
        assert result.injected_start == min(len(kept), limit - len(suffix) - (branch == REGENERATE))
        if branch == REGENERATE:
            assert 1 <= result.continuation_budget <= config.continuation_tokens
        else:
            assert result.continuation_budget is None
