import math

import numpy as np
import pytest
import torch

from edge_verl.estimators.gepo import (
    GepoThresholds,
    batch_entropy_stats,
    candidate_thresholds,
    compute_gepo_advantages,
    compute_group_entropy,
)
from edge_verl.estimators.groups import group_index_from_uids
from tests.algorithms.reference import gepo_group_entropy_reference


def test_thresholds_worked_example_population_std():
    # {1, 2, 3}: mu = 2, sigma = sqrt(2/3) = 0.81650; H_low = 2 - 0.2 * 0.8165 = 1.83670, H_high = 2 + 0.3 * 0.8165 = 2.24495
    mu, sigma = batch_entropy_stats(torch.tensor([1.0, 2.0, 3.0]), torch.ones(3, dtype=torch.bool))
    assert (mu, sigma) == pytest.approx((2.0, 0.81650), abs=1e-5)
    assert candidate_thresholds(mu, sigma, 0.2, 0.3) == pytest.approx((1.83670, 2.24495), abs=1e-5)


def test_ema_second_step_worked_example():
    # step 2, {5, 6, 7}: candidates 5.83670 / 6.24495; EMA: 0.99 * 1.83670 + 0.01 * 5.83670 = 1.87670,
    # 0.99 * 2.24495 + 0.01 * 6.24495 = 2.28495
    thresholds = GepoThresholds(gamma=0.01)
    for entropies in ([1.0, 2.0, 3.0], [5.0, 6.0, 7.0]):
        stats = batch_entropy_stats(torch.tensor(entropies), torch.ones(3, dtype=torch.bool))
        thresholds.update(*candidate_thresholds(*stats, 0.2, 0.3))
    assert (thresholds.h_low, thresholds.h_high) == pytest.approx((1.8767, 2.2849), abs=1e-4)
    assert thresholds.num_updates == 2


def test_zero_init_takes_gamma_steps_to_recover():
    thresholds = GepoThresholds(gamma=0.01, init="zero")
    thresholds.update(1.0, 2.0)
    assert (thresholds.h_low, thresholds.h_high) == pytest.approx((0.01, 0.02))


def test_pooling_worked_example_token_pooled_vs_mean_of_means():
    # 100 tokens at NLL 0.5 + 10 tokens at NLL 2.0: pooled (50 + 20) / 110 = 0.63636; mean of means (0.5 + 2) / 2 = 1.25
    log_probs = torch.zeros(2, 100)
    log_probs[0] = -0.5
    log_probs[1, :10] = -2.0
    mask = torch.zeros(2, 100)
    mask[0] = 1
    mask[1, :10] = 1
    index, valid = torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.bool)
    pooled, _ = compute_group_entropy(log_probs, mask, index, 1, valid, estimator="token_pooled")
    means, _ = compute_group_entropy(log_probs, mask, index, 1, valid, estimator="response_mean")
    assert float(pooled) == pytest.approx(0.63636, abs=1e-5)
    assert float(means) == pytest.approx(1.25)


def _three_groups(scores):
    # groups with token-pooled entropies exactly 1, 2, 3 (one token each response, log-prob = -H); with
    # norm_by_std=False a group's scores (s, -s) give GRPO advantages (s, -s) (group mean 0)
    uids = ["a", "a", "b", "b", "c", "c"]
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    log_probs = torch.tensor([[-1.0], [-1.0], [-2.0], [-2.0], [-3.0], [-3.0]])
    return dict(
        scores=torch.tensor(scores),
        entropy_source=log_probs,
        response_mask=torch.ones(6, 1),
        group_index=group_index,
        num_groups=num_groups,
        valid=~is_pad,
        norm_by_std=False,
    )


def test_shaping_worked_example():
    # H = 1 < H_low: positive x0.5, negative unchanged; H = 2: unchanged; H = 3 > H_high: negative x0.2
    result = compute_gepo_advantages(**_three_groups([1.0, -1.0, 1.0, -1.0, 1.0, -1.0]), thresholds=GepoThresholds())
    assert result.shaped_outcome_advantages.tolist() == pytest.approx([0.5, -1.0, 1.0, -1.0, 1.0, -0.2])
    assert (result.h_low, result.h_high) == pytest.approx((1.83670, 2.24495), abs=1e-5)
    assert result.positive_attenuated.tolist() == [True, False, False, False, False, False]
    assert result.negative_attenuated.tolist() == [False, False, False, False, False, True]


def test_zero_advantage_untouched_and_frozen_state_not_updated():
    thresholds = GepoThresholds()
    thresholds.load_state_dict({"h_low": 10.0, "h_high": 20.0, "num_updates": 5})
    result = compute_gepo_advantages(**_three_groups([0.0] * 6), thresholds=thresholds, update_state=False)
    assert torch.all(result.advantages == 0)
    assert thresholds.state_dict()["h_low"] == 10.0 and thresholds.num_updates == 5
    # with thresholds 10 / 20 every group is "confident": no negative is attenuated, positives would be
    assert (result.h_low, result.h_high) == (10.0, 20.0)


def test_apply_then_update_uses_previous_thresholds():
    thresholds = GepoThresholds()
    thresholds.load_state_dict({"h_low": 0.0, "h_high": 100.0, "num_updates": 1})
    result = compute_gepo_advantages(
        **_three_groups([1.0, -1.0] * 3), thresholds=thresholds, order="apply_then_update"
    )
    assert torch.equal(result.shaped_outcome_advantages, result.outcome_advantages)  # nothing below 0 or above 100
    assert thresholds.num_updates == 2 and thresholds.h_low == pytest.approx(0.01 * 1.83670, abs=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_group_entropy_equals_loop_reference(seed):
    rng = np.random.default_rng(seed)
    uids = [f"u{i}" for i in rng.integers(0, 6, 25)]
    log_probs = -rng.exponential(1.0, (25, 9))
    mask = (rng.uniform(size=(25, 9)) < 0.7).astype(np.float32)
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    entropy, group_valid = compute_group_entropy(
        torch.tensor(log_probs, dtype=torch.float32), torch.tensor(mask), group_index, num_groups, ~is_pad
    )
    expected = gepo_group_entropy_reference(log_probs.tolist(), mask.tolist(), uids)
    first = {uid: int(group_index[uids.index(uid)]) for uid in expected}
    for uid, value in expected.items():
        assert float(entropy[first[uid]]) == pytest.approx(value, rel=1e-5)


def test_state_dict_round_trip_and_missing_keys():
    thresholds = GepoThresholds()
    thresholds.update(1.0, 2.0)
    restored = GepoThresholds()
    restored.load_state_dict(thresholds.state_dict())
    assert restored.state_dict() == thresholds.state_dict()
    with pytest.raises(KeyError, match="h_high"):
        restored.load_state_dict({"h_low": 1.0, "num_updates": 1})


@pytest.mark.parametrize("seed", range(20))
def test_gepo_never_produces_nan_or_inf_and_leaves_masked_tokens_zero(seed):
    rng = np.random.default_rng(seed)
    size, width = int(rng.integers(1, 16)), int(rng.integers(1, 6))
    uids = [rng.choice(["a", "b", "c", "pad7"]) for _ in range(size)]
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    log_probs = torch.tensor(rng.choice([0.0, -1e-30, -1.0, -80.0, -math.inf, math.nan], (size, width)), dtype=torch.float32)
    mask = torch.tensor(rng.integers(0, 2, (size, width)), dtype=torch.float32)
    result = compute_gepo_advantages(
        torch.tensor(rng.normal(size=size), dtype=torch.float32), log_probs, mask, group_index, num_groups,
        ~is_pad, GepoThresholds(),
    )
    assert torch.isfinite(result.advantages).all()
    assert torch.all(result.advantages[mask == 0] == 0)
    assert torch.all(result.advantages[is_pad] == 0)


def test_gepo_from_scores_uses_grpos_normalised_advantage():
    # scores (1, 0) in each group: GRPO A = (+0.70711, -0.70711) (unbiased std 0.70711, epsilon 1e-6);
    # group entropies 1, 2, 3 as above, so only group a's positive (x0.5) and group c's negative (x0.2) move.
    batch = dict(_three_groups([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]), norm_by_std=True)
    result = compute_gepo_advantages(**batch, thresholds=GepoThresholds())
    a = 0.5 / (0.5**0.5 + 1e-6)  # (1 - 0.5) / (std 0.70711 + epsilon) = 0.70711
    assert result.outcome_advantages.tolist() == pytest.approx([a, -a] * 3, rel=1e-6)
    assert result.shaped_outcome_advantages.tolist() == pytest.approx([0.5 * a, -a, a, -a, a, -0.2 * a], rel=1e-5)


def test_group_entropy_equal_to_a_threshold_is_not_attenuated():
    # frozen thresholds H_low = H_high = 2.0 and group entropies exactly 1.0, 2.0, 3.0 (float32: 1-token groups):
    # group a: 1 < 2 -> positive x0.5; group b: 2 < 2 and 2 > 2 are both false -> untouched (Eq. 7 is strict);
    # group c: 3 > 2 -> negative x0.2. Shaped: (0.5, -1, 1, -1, 1, -0.2).
    thresholds = GepoThresholds()
    thresholds.load_state_dict({"h_low": 2.0, "h_high": 2.0, "num_updates": 3})
    result = compute_gepo_advantages(**_three_groups([1.0, -1.0] * 3), thresholds=thresholds, update_state=False)
    assert result.group_entropy.tolist() == [1.0, 2.0, 3.0]
    assert result.shaped_outcome_advantages.tolist() == pytest.approx([0.5, -1.0, 1.0, -1.0, 1.0, -0.2])
    assert result.positive_attenuated.tolist() == [True, False, False, False, False, False]
    assert result.negative_attenuated.tolist() == [False, False, False, False, False, True]


def test_batch_of_equal_group_entropies_is_plain_grpo():
    # every group has entropy 2.0: mu = 2, sigma = 0, so the candidates are H_low = 2 - 0.2 * 0 = 2 and
    # H_high = 2 + 0.3 * 0 = 2, exactly each group's entropy; the first step seeds H = H_hat, and with strict
    # inequalities no group is below H_low or above H_high: the shaped advantages are GRPO's (1, -1) x 3.
    batch = _three_groups([1.0, -1.0] * 3)
    batch["entropy_source"] = torch.full((6, 1), -2.0)
    for order in ("update_then_apply", "apply_then_update"):
        result = compute_gepo_advantages(**batch, thresholds=GepoThresholds(), order=order)
        assert (result.h_low, result.h_high) == (2.0, 2.0)
        assert torch.equal(result.shaped_outcome_advantages, result.outcome_advantages)
        assert result.shaped_outcome_advantages.tolist() == [1.0, -1.0] * 3
        assert not result.positive_attenuated.any() and not result.negative_attenuated.any()


def test_apply_then_update_first_step_seeds_then_applies_the_candidates():
    # fresh thresholds (num_updates = 0): there are no previous thresholds, so the first step seeds
    # H = H_hat = (1.83670, 2.24495) (entropies 1, 2, 3 as in test_thresholds_worked_example_population_std)
    # and shapes with them, exactly like update_then_apply: (0.5, -1, 1, -1, 1, -0.2). Shaping with the
    # unseeded (0, 0) instead would attenuate every negative: (1, -0.2, 1, -0.2, 1, -0.2).
    thresholds = GepoThresholds()
    result = compute_gepo_advantages(**_three_groups([1.0, -1.0] * 3), thresholds=thresholds, order="apply_then_update")
    assert (result.h_low, result.h_high) == pytest.approx((1.83670, 2.24495), abs=1e-5)
    assert result.shaped_outcome_advantages.tolist() == pytest.approx([0.5, -1.0, 1.0, -1.0, 1.0, -0.2])
    assert thresholds.num_updates == 1
    assert (thresholds.h_low, thresholds.h_high) == pytest.approx((1.83670, 2.24495), abs=1e-5)
    # step 2, entropies 5, 6, 7 (candidates 5.83670 / 6.24495): shaped with step 1's thresholds, so every
    # group is above H_high = 2.24495 -> every negative x0.2; the state then moves to the EMA
    # 0.99 * 1.83670 + 0.01 * 5.83670 = 1.87670, 0.99 * 2.24495 + 0.01 * 6.24495 = 2.28495
    batch = _three_groups([1.0, -1.0] * 3)
    batch["entropy_source"] = batch["entropy_source"] - 4.0
    second = compute_gepo_advantages(**batch, thresholds=thresholds, order="apply_then_update")
    assert (second.h_low, second.h_high) == pytest.approx((1.83670, 2.24495), abs=1e-5)
    assert second.shaped_outcome_advantages.tolist() == pytest.approx([1.0, -0.2] * 3)
    assert (thresholds.h_low, thresholds.h_high) == pytest.approx((1.87670, 2.28495), abs=1e-5)
