"""GEC's tokens in the loss, the pure parts: token origins from the records, the controls' treatment of the
injected tokens, the per-origin sums, and the statistics of the responses as sampled."""

import numpy as np
import pytest
import torch

from edge_verl.algorithms.gec import INJECT_ANSWER, ORIGINS, REGENERATE, REPLACE_SOLUTION, CorrectionRecord
from edge_verl.algorithms.gec_loss import token_origins
from edge_verl.algorithms.gec_loss import (
    advantage_step_outputs, finish_origin_metrics, injected_nll, not_sampled, raw_keys, treat_injected,
)
from edge_verl.estimators.groups import group_index_from_uids
from edge_verl.estimators.statistics import as_sampled_statistics
from edge_verl.integration.actor_loss import origin_sums, vanilla_clipped, VanillaClip

S, C, P, A, SOL = range(5)


def _record(branch=None, span=(0, 0)):
    continuation = dict(continuation_tokens=2, continuation_budget=2, continuation_requested=4) if branch == REGENERATE else {}
    return CorrectionRecord(
        branch=branch, reason="correct" if branch is None else "corrected", fallback=False, original_correct=branch is None,
        original_score=1.0 if branch is None else 0.0, original_length=3, injected_start=span[0], injected_end=span[1],
        all_wrong_group=branch is not None, prompt_length=4, sample_seconds=0.0, correction_seconds=0.0, **continuation,
    )


def test_origins_follow_each_branchs_token_layout():
    records = [
        None,  # a row GEC did not run on
        _record(),  # left as sampled
        _record(REGENERATE, (2, 4)),  # 2 sampled, phrase [2, 4), continuation after
        _record(INJECT_ANSWER, (1, 3)),  # 1 sampled, answer + EOS [1, 3)
        _record(REPLACE_SOLUTION, (0, 5)),  # the solution throughout
        _record(REGENERATE, (0, 2)),  # first_attempt=drop: the phrase first
    ]
    expected = [
        [S, S, S, S, S, S],
        [S, S, S, S, S, S],
        [S, S, P, P, C, C],
        [S, A, A, S, S, S],  # positions past the response's end are masked by the caller
        [SOL, SOL, SOL, SOL, SOL, S],
        [P, P, C, C, C, C],
    ]
    assert token_origins(records, 6).tolist() == expected
    assert not_sampled(torch.tensor(expected)).sum() == 2 + 2 + 5 + 2


@pytest.mark.parametrize("mode", ["surrogate", "masked", "sft"])
def test_treat_injected_changes_only_injected_tokens_and_stops_their_gradient(mode):
    log_prob = torch.randn(3, 5, requires_grad=True)
    advantages = torch.randn(3, 5)
    injected = torch.zeros(3, 5, dtype=torch.bool)
    injected[1, 2:4] = True
    treated_log_prob, treated_advantages = treat_injected(log_prob, advantages, injected, mode)
    assert torch.equal(treated_log_prob.detach(), log_prob.detach())  # values never change
    keep = ~injected
    assert torch.equal(treated_advantages[keep], advantages[keep])
    (treated_log_prob * (treated_advantages + 1.0)).sum().backward()
    if mode == "surrogate":
        assert torch.equal(treated_advantages, advantages) and bool((log_prob.grad[injected] != 0).all())
    else:
        assert bool((treated_advantages[injected] == 0).all()) and bool((log_prob.grad[injected] == 0).all())
    assert bool((log_prob.grad[keep] != 0).all())


def test_unknown_mode_is_an_error_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="surrogate"):
        treat_injected(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1, dtype=torch.bool), "ignore")


def test_injected_nll_is_verls_token_mean_convention():
    log_prob = torch.tensor([[-1.0, -2.0, -3.0]])
    injected = torch.tensor([[False, True, True]])
    assert float(injected_nll(log_prob, injected, None)) == pytest.approx(2.5)  # (2 + 3) / 2 local tokens
    assert float(injected_nll(log_prob, injected, 4.0, dp_size=2)) == pytest.approx(2.5)  # 5 / 4 * 2


def test_origin_sums_have_every_key_for_every_origin_and_no_nan_on_empty_or_extreme_inputs():
    origins = torch.tensor([[S, A, A], [S, S, S]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])  # one padded answer token, one empty row
    old = torch.tensor([[-1.0, -50.0, 0.0], [0.0, 0.0, 0.0]])
    new = torch.tensor([[-1.0, 10.0, 0.0], [0.0, 0.0, 0.0]])  # log-ratio 60: clamped to 20 as verl does
    sums = origin_sums(origins, mask, old, new, torch.ones(2, 3), VanillaClip(0.2, 0.2, 3.0), grad=torch.ones(2, 3))
    assert set(sums) == {f"{origin}/{name}" for origin in ORIGINS for name in ("_tokens", "_old_logprob_sum", "_ratio_sum", "_vanilla_clipped", "_grad_abs", "ratio_max")}
    assert all(np.isfinite(value) for value in sums.values())
    assert sums["answer/_tokens"] == 1 and sums["answer/_ratio_sum"] == pytest.approx(np.exp(20.0), rel=1e-5)
    assert sums["answer/_vanilla_clipped"] == 1 and sums["sampled/_vanilla_clipped"] == 0 and sums["solution/_tokens"] == 0
    finished = finish_origin_metrics({f"actor/gec/{key}": value for key, value in sums.items()}, "actor/gec")
    assert finished["actor/gec/answer/token_share"] == 0.5 and "actor/gec/solution/ratio_mean" not in finished
    assert len(raw_keys({f"actor/gec/{key}": 0 for key in sums} | {"actor/gec/sampled/token_share": 1}, "actor/gec")) == len(sums)
    assert finish_origin_metrics({}, "actor/gec") == {}


def test_statistics_as_sampled_are_those_of_the_rewards_before_correction():
    # group a: sampled scores [1, 0, 0, 0]; GEC corrected rows 1 and 2 to 1 (final [1, 1, 1, 0]).
    # group b: sampled [0, 0, 0, 0] (tied), all four corrected to 1.
    # GRPO on the sampled scores (unbiased std): group a mean 0.25, std 0.5 -> advantages [1.5, -0.5, -0.5, -0.5]
    # (eps 0), group b all 0; variance over the 8 (ddof 1): mean 0, sum of squares 3 -> 3 / 7.
    uids = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    sampled = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    mask = torch.ones(8, 3)
    trained = torch.tensor([0.5, 0.5, 0.5, -1.5, 0, 0, 0, 0])[:, None] * mask  # any trained advantages
    uncorrected = torch.tensor([True, False, False, True, False, False, False, False])
    stats = as_sampled_statistics(sampled, trained, mask, group_index, num_groups, ~is_pad, uncorrected, epsilon=0.0)
    assert stats["adv_var"] == pytest.approx(3 / 7)
    assert stats["zero_variance_group_frac"] == pytest.approx(0.5)  # group b ties as sampled
    assert stats["adv_var_uncorrected"] == pytest.approx(2.0)  # rows 0 and 3: 0.5, -1.5 -> mean -0.5, var 2 / 1


def test_ratio_max_is_the_max_over_the_update_on_both_trainers():
    # Two mini-batches: the answer tokens' largest ratios are 1.5 and (absent: 0) ; the sums average.
    # legacy hands lists per mini-batch, v1 hands values verl already reduced (mean; max for "max" keys).
    legacy = {
        "actor/gec/answer/_tokens": [2.0, 0.0], "actor/gec/answer/_ratio_sum": [2.6, 0.0],
        "actor/gec/answer/_old_logprob_sum": [-3.0, 0.0], "actor/gec/answer/_vanilla_clipped": [1.0, 0.0],
        "actor/gec/answer/ratio_max": [1.5, 0.0],
        "actor/gec/sampled/_tokens": [4.0, 6.0], "actor/gec/sampled/_ratio_sum": [4.0, 6.6],
        "actor/gec/sampled/_old_logprob_sum": [-4.0, -6.0], "actor/gec/sampled/_vanilla_clipped": [0.0, 1.0],
        "actor/gec/sampled/ratio_max": [1.0, 1.3],
    }
    v1 = {key: (max(values) if key.endswith("ratio_max") else sum(values) / len(values)) for key, values in legacy.items()}
    from_legacy, from_v1 = finish_origin_metrics(legacy, "actor/gec"), finish_origin_metrics(v1, "actor/gec")
    assert from_legacy == pytest.approx(from_v1)
    assert from_legacy["actor/gec/answer/ratio_max"] == 1.5  # not (1.5 + 0) / 2
    assert from_legacy["actor/gec/sampled/ratio_max"] == 1.3
    # token-weighted over the update: sampled ratio mean (4.0 + 6.6) / (4 + 6) = 1.06, answer 2.6 / 2 = 1.3
    assert from_legacy["actor/gec/sampled/ratio_mean"] == pytest.approx(1.06)
    assert from_legacy["actor/gec/answer/ratio_mean"] == pytest.approx(1.3)
    assert from_legacy["actor/gec/answer/token_share"] == pytest.approx(2 / 12)


def test_vanilla_clipping_is_verls_including_the_dual_clip():
    # clip 0.2, dual clip 3: A > 0 is clipped above 1.2; A < 0 below 0.8 and (dual clip) above 3
    ratio = torch.tensor([1.1, 1.3, 0.7, 0.9, 2.0, 3.5, 0.5, 5.0])
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 0.0])
    clipped = vanilla_clipped(ratio, advantages, VanillaClip(0.2, 0.2, 3.0))
    assert clipped.tolist() == [False, True, True, False, False, True, False, False]


def test_other_loss_modes_get_no_clip_fraction():
    origins, mask = torch.tensor([[S, A]]), torch.ones(1, 2)
    sums = origin_sums(origins, mask, torch.zeros(1, 2), torch.tensor([[0.0, 1.0]]), torch.ones(1, 2), None)
    assert not any("clipped" in key for key in sums)
    finished = finish_origin_metrics({f"actor/gec/{key}": value for key, value in sums.items()}, "actor/gec")
    assert "actor/gec/answer/ratio_mean" in finished and not any("clip" in key for key in finished)


def test_advantage_step_outputs_lay_origins_on_the_response_and_count_the_injected_share():
    # row 0 left as sampled (3 tokens), row 1 inject_answer: 1 sampled then 2 answer tokens; row 2: no GEC
    infos = [_record().to_dict(), _record(INJECT_ANSWER, (1, 3)).to_dict(), None]
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    uids = np.array(["a", "a", "a"], dtype=object)
    outputs = advantage_step_outputs(
        infos, mask, torch.zeros(3, 4), torch.tensor([1.0, 1.0, 0.0]), group_index_from_uids(uids), norm_by_std=True, epsilon=1e-6,
        entropy=torch.tensor([[0.5, 0.5, 0.5, 9.0], [0.2, 9.0, 9.0, 9.0], [0.2, 0.2, 9.0, 9.0]]),
    )
    assert outputs.origins.tolist() == [[S, S, S, 0], [S, A, A, 0], [S, S, 0, 0]]
    assert outputs.injected_share == pytest.approx(2 / 8)
    # as sampled: row 1 scored 0 before its correction, so the group is [1, 0, 0]
    assert outputs.sampled["score_mean"] == pytest.approx(1 / 3)
    # the sampled tokens' entropy: (3 x 0.5 + 0.2 + 2 x 0.2) / 6, the injected ones' 9 left out
    assert outputs.sampled["entropy"] == pytest.approx(2.1 / 6)
    assert set(outputs.final) == {"adv_var", "zero_variance_group_frac"}
