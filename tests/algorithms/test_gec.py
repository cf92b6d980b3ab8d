import json
import math
import pickle
import random
from collections import Counter

import pytest
import torch

from edge_verl.config import keyed_seed
from edge_verl.algorithms.gec import (
    ANSWER, ANSWER_TEMPLATE, CONTINUATION, INJECT_ANSWER, PHRASE, PLACEBO_CANDIDATES, REFLECTION_PHRASE, REGENERATE,
    REPLACE_SOLUTION, SAMPLED, SOLUTION, CorrectionRecord, PlaceboProblem, decide_correction, decision_rng,
    draw_branch, injected_answer_text, injected_token_mask, placebo_candidates, placebo_rng, shuffled_indices,
    strip_end_tokens, summarize_corrections,
)
from edge_verl.algorithms.gec_loss import token_origins
from edge_verl.algorithms.gec import GecConfig

PAPER = (0.5, 0.25, 0.25)

# A response left as sampled because it was correct; tests override what they need.
UNTOUCHED = dict(
    branch=None, reason="correct", fallback=False, original_correct=True, original_score=1.0, original_length=4, injected_start=0,
    injected_end=0, all_wrong_group=False, prompt_length=8, sample_seconds=0.0, correction_seconds=0.0,
)


def _record(**fields):
    """A record as it travels through verl: ``CorrectionRecord(...).to_dict()``."""
    return CorrectionRecord(**{**UNTOUCHED, **fields}).to_dict()


def _corrected(branch, start, end, **fields):
    return _record(branch=branch, reason="corrected", original_correct=False, original_score=0.0, injected_start=start, injected_end=end, **fields)


def _regenerated(start, end, tokens, budget, requested, **fields):
    continuation = dict(continuation_tokens=tokens, continuation_budget=budget, continuation_requested=requested)
    return _corrected(REGENERATE, start, end, **continuation, **fields)


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
        _regenerated(1, 2, tokens=1, budget=1, requested=1),
        _corrected(INJECT_ANSWER, 2, 4),
        _record(),
        _corrected(REPLACE_SOLUTION, 0, 3, fallback=True),
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


def test_every_metric_of_a_step_of_hand_built_records():
    # uid a: r0 regenerated (continuation 3 of a budget cut to 3 of 5 asked) and now correct, r1 answer
    #        injected after a replace_solution draw without solution (fallback): all wrong, rescued.
    # uid b: r2 correct as sampled, r3's drawn correction did not fit: not all wrong.
    # uid c: r4 regenerated (5 of 5) and still wrong, r5 left alone by the prompt gate: all wrong, not rescued.
    # r6: not a GEC row (None): only its trained tokens count, in the injected fraction's denominator.
    infos = [
        _regenerated(2, 4, tokens=3, budget=3, requested=5, sample_seconds=1.0, correction_seconds=2.0),
        _corrected(INJECT_ANSWER, 1, 3, fallback=True, sample_seconds=1.0, correction_seconds=0.5),
        _record(sample_seconds=2.0),
        _record(reason="does_not_fit", original_correct=False, original_score=0.0, sample_seconds=1.0),
        _regenerated(0, 1, tokens=5, budget=5, requested=5, sample_seconds=1.0, correction_seconds=1.5),
        _record(reason="prompt_too_long", original_correct=False, original_score=0.0, all_wrong_group=True, sample_seconds=1.0),
        None,
    ]
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]])
    injected = injected_token_mask([2, 1, 0, 0, 0, 0, 0], [4, 3, 0, 0, 1, 0, 0], 5)
    log_probs = torch.where(injected, torch.tensor(-2.0), torch.tensor(-1.0))
    scores = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    metrics = summarize_corrections(infos, scores, ["a", "a", "b", "b", "c", "c", "d"], mask, log_probs)
    assert metrics == pytest.approx(
        {
            "gec/responses": 6,  # r0-r5
            "gec/corrected": 3,  # r0, r1, r4
            "gec/corrected_regenerate": 2,
            "gec/corrected_inject_answer": 1,
            "gec/corrected_replace_solution": 0,
            "gec/fallbacks": 1,  # r1
            "gec/not_fitting": 1,  # r3
            "gec/prompt_too_long": 1,  # r5
            "gec/no_placebo": 0,
            "gec/rewarded_as_gold_frac": 0.0,  # answer_source=gold: verl's reward loop scored every response
            "gec/regenerate_became_correct": 1,  # r0 (r4 still wrong)
            "gec/continuation_tokens_mean": 4.0,  # (3 + 5) / 2
            "gec/continuation_tokens_min": 3,
            "gec/continuation_tokens_max": 5,
            "gec/continuation_cut": 1,  # r0: budget 3 < 5 asked
            "gec/all_wrong_groups": 2,  # a, c
            "gec/groups_rescued": 1,  # a
            # corrections 2 + 0.5 + 1.5 = 4 s, first samples 1 + 1 + 2 + 1 + 1 + 1 = 7 s: 4 / 11
            "gec/correction_time_share": 4 / 11,
            # injected 2 (r0) + 2 (r1) + 1 (r4) = 5 of 5 + 3 + 2 + 4 + 2 + 1 + 3 = 20 trained tokens
            "gec/injected_token_frac": 5 / 20,
            "gec/old_logprob_injected_mean": -2.0,
            "gec/old_prob_injected_mean": math.exp(-2.0),
            "gec/old_logprob_sampled_mean": -1.0,
            "gec/old_prob_sampled_mean": math.exp(-1.0),
        }
    )


def test_a_renamed_key_fails_the_summary_instead_of_logging_zeros():
    info = _regenerated(0, 1, tokens=1, budget=1, requested=1)
    info["continuation_length"] = info.pop("continuation_tokens")
    with pytest.raises(ValueError, match=r"missing key\(s\) \['continuation_tokens'\] and unknown key\(s\) \['continuation_length'\]"):
        summarize_corrections([info], [0.0], ["a"], torch.ones(1, 2))


def test_the_record_round_trips_through_plain_builtins():
    for info in (
        _record(),
        _regenerated(3, 5, tokens=2, budget=4, requested=8, sample_seconds=0.25),
        _corrected(REPLACE_SOLUTION, 0, 7),
        _corrected(INJECT_ANSWER, 0, 4, placebo_index=0),
        _corrected(INJECT_ANSWER, 0, 4, placebo_index=0, twin_score=1.0),
    ):
        # what crosses Ray (pickle) and what a JSON dump keeps are the same plain dict
        assert json.loads(json.dumps(info)) == info == pickle.loads(pickle.dumps(info))
        record = CorrectionRecord.from_dict(info)
        assert record.to_dict() == info and CorrectionRecord.from_dict(record.to_dict()) == record
    assert set(_record()) == set(CorrectionRecord.model_fields)
    assert _record()["continuation_tokens"] is None  # written even when not a regeneration
    assert _record()["placebo_index"] is None  # written even with answer_source=gold
    assert _record()["twin_score"] is None  # written even when verl's reward loop scores the response


def test_from_dict_names_a_missing_and_an_unknown_key():
    info = _record()
    del info["fallback"]
    with pytest.raises(ValueError, match=r"missing key\(s\) \['fallback'\] and unknown key\(s\) \[\]"):
        CorrectionRecord.from_dict(info)
    with pytest.raises(ValueError, match=r"missing key\(s\) \[\] and unknown key\(s\) \['branches'\]"):
        CorrectionRecord.from_dict({**_record(), "branches": None})
    optional = _record()
    del optional["continuation_budget"]  # an Optional field is still a required key
    with pytest.raises(ValueError, match="continuation_budget"):
        CorrectionRecord.from_dict(optional)


@pytest.mark.parametrize(
    "fields, message",
    [
        # each field alone (pydantic: the allowed values, bounds, finite numbers, no unknown field)
        (dict(branch="regen", reason="corrected"), r"branch\n  Input should be 'regenerate', 'inject_answer' or 'replace_solution'"),
        (dict(reason="corect"), r"reason\n  Input should be 'correct', "),
        # what one record cannot hold together (its validator), then more single fields
        (dict(reason="corrected"), "a branch is set exactly when the reason is 'corrected'"),
        (dict(branch=INJECT_ANSWER, reason="correct"), "a branch is set exactly when"),
        (dict(branch=INJECT_ANSWER, reason="corrected", injected_start=3, injected_end=2), r"\[3, 2\) needs 0 <= start <= end"),
        (dict(branch=INJECT_ANSWER, reason="corrected", injected_start=-1, injected_end=2), r"injected_start\n  Input should be greater than or equal to 0"),
        (dict(injected_start=0, injected_end=2), "on an uncorrected response"),
        (dict(branch=REGENERATE, reason="corrected"), "of a regeneration needs 0 <= tokens <= budget <= requested"),
        (dict(branch=REGENERATE, reason="corrected", continuation_tokens=5, continuation_budget=4, continuation_requested=8), "tokens <= budget"),
        (dict(branch=REGENERATE, reason="corrected", continuation_tokens=1, continuation_budget=9, continuation_requested=8), "budget <= requested"),
        (dict(branch=INJECT_ANSWER, reason="corrected", continuation_tokens=1), "only a regeneration has a continuation"),
        (
            dict(branch=REGENERATE, reason="corrected", continuation_tokens=1, continuation_budget=1, continuation_requested=1, placebo_index=2),
            "a placebo row",
        ),
        (dict(reason="no_placebo", original_correct=False, placebo_index=2), "on branch None"),
        (dict(branch=INJECT_ANSWER, reason="corrected", injected_start=0, injected_end=2, placebo_index=-1), "placebo_index=-1"),
        (dict(branch=INJECT_ANSWER, reason="corrected", injected_start=0, injected_end=2, twin_score=1.0), "twin_score=1.0 without a placebo"),
        (dict(original_length=-1), r"original_length\n  Input should be greater than or equal to 0"),
        (dict(sample_seconds=-0.5), r"sample_seconds\n  Input should be greater than or equal to 0"),
        (dict(original_score=float("nan")), r"original_score\n  Input should be a finite number"),
        (dict(branches=None), r"branches\n  Extra inputs are not permitted"),
    ],
)
def test_a_record_that_cannot_happen_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        CorrectionRecord(**{**UNTOUCHED, **fields})


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


def test_placebo_reward_is_a_named_choice_read_only_with_a_placebo():
    # the isolating placebo is THE placebo: as_gold unless asked otherwise; gold ignores the (default) value
    assert GecConfig().placebo_reward == "as_gold" and GecConfig(answer_source="placebo").placebo_reward == "as_gold"
    assert GecConfig(answer_source="placebo", placebo_reward="graded").placebo_reward == "graded"
    with pytest.raises(ValueError, match=r"edge_gec.placebo_reward='as-gold'; allowed: \['as_gold', 'graded'\]"):
        GecConfig(answer_source="placebo", placebo_reward="as-gold")
    with pytest.raises(ValueError, match="placebo_reward='graded' is read only with edge_gec.answer_source=placebo .*set answer_source=placebo"):
        GecConfig(placebo_reward="graded")


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
        _regenerated(0, 1, tokens=256, budget=256, requested=256),
        _regenerated(0, 1, tokens=40, budget=40, requested=256),
        _record(reason="prompt_too_long", original_correct=False, original_score=0.0),
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
        _regenerated(0, 1, tokens=1, budget=1, requested=1, sample_seconds=1.0, correction_seconds=1.0),
        _record(sample_seconds=3.0),
    ]
    metrics = summarize_corrections(infos, [0.0, 1.0], ["a", "a"], torch.ones(2, 3))
    assert metrics["gec/correction_time_share"] == pytest.approx(0.2)


def test_token_origins_of_kept_and_dropped_first_attempts():
    # T = 6. keep: regenerate [2, 4) = body 2, phrase 2, continuation 2; inject [3, 6) = body 3, answer 3.
    # drop: the span starts at 0 (no body): regenerate [0, 3) = phrase 3, continuation 3; inject [0, 4) =
    # answer 4, then 2 positions past the response's end (coded "sampled"; callers mask them).
    # replace_solution [0, 5): solution 5 (+1 past the end); None and an uncorrected record: sampled.
    records = [
        CorrectionRecord.from_dict(_regenerated(2, 4, tokens=2, budget=2, requested=2)),
        CorrectionRecord.from_dict(_corrected(INJECT_ANSWER, 3, 6)),
        CorrectionRecord.from_dict(_regenerated(0, 3, tokens=3, budget=3, requested=3)),
        CorrectionRecord.from_dict(_corrected(INJECT_ANSWER, 0, 4)),
        CorrectionRecord.from_dict(_corrected(REPLACE_SOLUTION, 0, 5)),
        CorrectionRecord.from_dict(_record(reason="no_placebo", original_correct=False, original_score=0.0)),
        None,
    ]
    S, C, P, A, R = SAMPLED, CONTINUATION, PHRASE, ANSWER, SOLUTION
    assert token_origins(records, 6).tolist() == [
        [S, S, P, P, C, C],
        [S, S, S, A, A, A],
        [P, P, P, C, C, C],
        [A, A, A, A, S, S],
        [R, R, R, R, R, S],
        [S] * 6,
        [S] * 6,
    ]


def test_summary_counts_responses_left_without_a_placebo():
    # answer_source=placebo: r0, r1 found no wrong-grading answer (left as sampled), r2 got row 3's answer
    # injected (tokens 1-2 of 3), r3 was correct.
    infos = [
        _record(reason="no_placebo", original_correct=False, original_score=0.0),
        _record(reason="no_placebo", original_correct=False, original_score=0.0),
        _corrected(INJECT_ANSWER, 1, 3, placebo_index=3),
        _record(),
    ]
    metrics = summarize_corrections(infos, [0.0, 0.0, 0.0, 1.0], ["a", "a", "b", "b"], torch.ones(4, 3))
    assert (metrics["gec/no_placebo"], metrics["gec/corrected"], metrics["gec/corrected_inject_answer"]) == (2, 1, 1)
    assert metrics["gec/not_fitting"] == 0 and metrics["gec/injected_token_frac"] == pytest.approx(2 / 12)


def test_the_share_of_corrections_rewarded_as_their_gold_twin():
    # placebo_reward=as_gold: r0, r1 are placebos rewarded as their twins (1.0 and 0.0: a twin may grade wrong),
    # r2 a regeneration (no answer injected: verl scored it), r3 correct: 2 of 3 corrections.
    infos = [
        _corrected(INJECT_ANSWER, 1, 3, placebo_index=3, twin_score=1.0),
        _corrected(REPLACE_SOLUTION, 0, 3, placebo_index=5, twin_score=0.0),
        _regenerated(1, 2, tokens=1, budget=1, requested=1),
        _record(),
    ]
    metrics = summarize_corrections(infos, [1.0, 0.0, 0.0, 1.0], ["a", "a", "b", "b"], torch.ones(4, 3))
    assert metrics["gec/rewarded_as_gold_frac"] == pytest.approx(2 / 3)
    # graded (the same placebos, twin_score None): none; and no share at all in a step without corrections
    graded = [{**info, "twin_score": None} for info in infos]
    assert summarize_corrections(graded, [0.0, 0.0, 0.0, 1.0], ["a", "a", "b", "b"], torch.ones(4, 3))["gec/rewarded_as_gold_frac"] == 0.0
    assert "gec/rewarded_as_gold_frac" not in summarize_corrections([_record()], [1.0], ["a"], torch.ones(1, 3))


@pytest.mark.parametrize(
    "tokens, stripped",
    [
        ([5, 6, 1, 2], [5, 6]),  # "... <|im_end|><|endoftext|>": both go
        ([5, 6, 2, 1, 2], [5, 6]),  # any order, any number
        ([5, 1, 6, 2], [5, 1, 6]),  # an end id inside the response stays
        ([5, 6], [5, 6]),  # truncated at the cap: nothing to strip
        ([1, 2], []),
        ([], []),
    ],
)
def test_every_trailing_end_token_is_stripped(tokens, stripped):
    assert strip_end_tokens(tokens, {1, 2}) == stripped


def test_the_decision_stream_is_keyed_on_the_response_and_the_placebo_stream_is_its_own():
    # the decision's key is ("gec_decision", seed, *response) hashed by seeds.keyed_seed: no uid, no state
    assert decision_rng(7, 123456789).random() == random.Random(keyed_seed("gec_decision", 7, 123456789)).random()
    assert decision_rng(7, "u", 3).random() == decision_rng(7, "u", 3).random()
    assert decision_rng(7, "u", 3).random() not in {decision_rng(8, "u", 3).random(), decision_rng(7, "u", 4).random()}
    # the placebo stream is another key (so drawing placebos moves no decision), stable per response
    assert placebo_rng(7, "u", 3).random() != decision_rng(7, "u", 3).random()
    assert placebo_rng(7, "u", 3).random() == placebo_rng(7, "u", 3).random()
    assert placebo_rng(7, "u", 3).random() not in {placebo_rng(8, "u", 3).random(), placebo_rng(7, "u", 4).random()}


def _fisher_yates(rng, count):
    """The literal shuffle: swap position k with a uniform pick in [k, count), k = 0, 1, ..."""
    items = list(range(count))
    for position in range(count):
        pick = rng.randrange(position, count)
        items[position], items[pick] = items[pick], items[position]
    return items


@pytest.mark.parametrize("count", [0, 1, 2, 7, 100])
def test_lazy_shuffle_equals_the_literal_fisher_yates_shuffle(count):
    for seed in range(20):
        assert list(shuffled_indices(random.Random(seed), count)) == _fisher_yates(random.Random(seed), count)


def test_lazy_shuffle_puts_every_index_first_equally_often():
    # 6000 shuffles of 6: each index first 1000 times, binomial std sqrt(6000 / 6 * 5 / 6) = 28.9; 5 sigma = 144
    # (a shuffle that never swaps would put 0 first 6000 times, an off-by-one pick never 5)
    counts = Counter(next(shuffled_indices(random.Random(seed), 6)) for seed in range(6000))
    assert set(counts) == set(range(6)) and all(abs(n - 1000) < 144 for n in counts.values()), counts


def _pool(*answers_and_solutions):
    """PlaceboProblems in row order; the key is the answer itself (these answers are already normal)."""
    return [PlaceboProblem(row, answer, solution, answer) for row, (answer, solution) in enumerate(answers_and_solutions)]


def test_placebo_candidates_skip_the_gold_answer_and_follow_the_seeded_order():
    pool = _pool(("2", "s0"), ("3", "s1"), ("2", "s2"), ("5", ""), ("7", "s4"), ("11", "s5"))
    for seed in range(30):
        candidates = placebo_candidates(pool, {"2"}, random.Random(seed), need_solution=False)
        # rows 0 and 2 share the gold answer "2": never lent; the other four all come, in the shuffle's order
        order = [index for index in _fisher_yates(random.Random(seed), 6) if index not in (0, 2)]
        assert candidates == order and sorted(candidates) == [1, 3, 4, 5]
        # replace_solution also needs a solution: row 3 has none
        with_solution = placebo_candidates(pool, {"2"}, random.Random(seed), need_solution=True)
        assert with_solution == [index for index in order if index != 3]
    # same seed, same candidates; the seed matters
    orders = {tuple(placebo_candidates(pool, {"2"}, placebo_rng(42, "u", i), need_solution=False)) for i in range(8)}
    assert len(orders) > 1


def test_placebo_candidates_are_bounded_and_may_be_none():
    pool = _pool(*[(str(n), "s") for n in range(100)])
    candidates = placebo_candidates(pool, {"0"}, random.Random(1), need_solution=True)
    assert len(candidates) == PLACEBO_CANDIDATES == 16 and len(set(candidates)) == 16 and 0 not in candidates
    assert len(placebo_candidates(pool, set(), random.Random(1), need_solution=False, limit=3)) == 3
    # a pool whose only other answers are the gold's, or lack the solution asked for, has no candidate
    assert placebo_candidates(_pool(("2", "s"), ("2", "t")), {"2"}, random.Random(0), need_solution=False) == []
    assert placebo_candidates(_pool(("2", "s"), ("3", "")), {"2"}, random.Random(0), need_solution=True) == []
