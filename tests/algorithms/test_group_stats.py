import numpy as np
import pytest
import torch

from edge_verl.estimators.groups import (
    group_index_from_uids, grpo_outcome, response_valid, zero_variance_group_fraction,
)
from tests.algorithms.reference import grpo_reference


def test_group_index_numbers_groups_by_first_appearance_and_flags_padding():
    group_index, num_groups, is_pad = group_index_from_uids(np.array(["b", "a", "b", "pad9", "a"], dtype=object))
    assert group_index.tolist() == [0, 1, 0, 2, 1]
    assert num_groups == 3
    assert is_pad.tolist() == [False, False, False, True, False]


def test_grpo_hand_computed_group_of_four():
    # scores 1, 0, 0, 1: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735; A = +-0.5 / 0.57735 = +-0.86603
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0])
    group_index = torch.zeros(4, dtype=torch.long)
    advantages, _ = grpo_outcome(scores, group_index, 1, torch.ones(4, dtype=torch.bool), epsilon=0.0)
    torch.testing.assert_close(advantages, torch.tensor([0.86603, -0.86603, -0.86603, 0.86603]), atol=1e-5, rtol=0)


def test_grpo_single_response_group_keeps_raw_score_like_verl():
    advantages, _ = grpo_outcome(torch.tensor([0.7]), torch.zeros(1, dtype=torch.long), 1, torch.ones(1, dtype=torch.bool))
    torch.testing.assert_close(advantages, torch.tensor([0.7 / (1 + 1e-6)]))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_equals_loop_reference(seed, norm_by_std):
    rng = np.random.default_rng(seed)
    uids = [f"u{i}" for i in rng.integers(0, 7, size=40)] + ["pad0", "pad0"]
    scores = rng.integers(0, 2, size=len(uids)).astype(np.float32)
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    advantages, _ = grpo_outcome(torch.tensor(scores), group_index, num_groups, ~is_pad, norm_by_std=norm_by_std)
    expected = grpo_reference(scores.tolist(), uids, 1e-6, norm_by_std=norm_by_std)
    torch.testing.assert_close(advantages, torch.tensor(expected, dtype=torch.float32))


def test_zero_variance_fraction_counts_tied_groups_only():
    # groups: a = (1, 1) tied, b = (0, 1) mixed, c = (0, 0) tied, d = single response (ignored)
    uids = ["a", "a", "b", "b", "c", "c", "d"]
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    assert zero_variance_group_fraction(scores, group_index, num_groups, ~is_pad) == pytest.approx(2 / 3)


def test_response_valid_excludes_padding_and_empty_rows():
    mask = torch.tensor([[1, 1], [0, 0], [1, 0]])
    assert response_valid(mask, torch.tensor([False, False, True])).tolist() == [True, False, False]


# (1100, 4000) takes the blocked CPU path (> 2^20 elements) with a last block of 1100 % 65 rows;
# (3, 2^19) blocks of one row each (a row longer than a block).
@pytest.mark.parametrize("shape", [(64, 33), (1100, 4000), (3, 1 << 19)], ids=["multiply_sum_path", "blocked_path", "row_per_block"])
def test_masked_row_sum_both_paths_match_a_reference_and_zero_non_finite(shape):
    from edge_verl.estimators.groups import masked_row_sum

    generator = torch.Generator().manual_seed(0)
    values = torch.rand(shape, generator=generator)
    mask = (torch.rand(shape, generator=generator) < 0.6).float()
    values[0, 0], values[1, 1], values[2, 2] = float("nan"), float("inf"), float("-inf")
    values[-1, -1] = float("nan")  # the last block too
    mask[2, 2] = 0  # a masked -inf must not poison its row either
    expected = (torch.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0) * mask).sum(dim=-1)
    torch.testing.assert_close(masked_row_sum(values, mask), expected, rtol=1e-5, atol=1e-3)


def test_advantage_statistics_hand_computed_with_padding_and_masks():
    from edge_verl.estimators.statistics import advantage_statistics

    # Group 0: per-response advantages 1.5, -0.5, -0.5, -0.5 (token means over the mask); group 1 all 0
    # (scores tie); row 8 is v1 padding (excluded even with a huge value), row 9 has no response token.
    # Valid values: [1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0]: mean 0, sum of squares 2.25 + 3 * 0.25 = 3.0,
    # unbiased variance 3.0 / 7 = 0.428571...; zero-variance groups: 1 of 2.
    mask = torch.tensor([[1, 1, 0]] * 10, dtype=torch.float32)
    mask[9] = 0
    per_row = torch.tensor([1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0, 1e6, 7.0])
    advantages = per_row[:, None] * mask
    advantages[0, 2] = 99.0  # a masked token never counts
    scores = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    group_index = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 1])
    valid = torch.tensor([True] * 8 + [False, True])
    stats = advantage_statistics(advantages, mask, scores, group_index, 3, valid)
    assert stats["var"] == pytest.approx(3.0 / 7)
    assert stats["zero_variance_group_frac"] == pytest.approx(0.5)


def test_advantage_statistics_of_one_response_or_non_finite_values_are_finite():
    from edge_verl.estimators.statistics import advantage_statistics

    one = advantage_statistics(torch.ones(1, 4), torch.ones(1, 4), torch.ones(1), torch.zeros(1, dtype=torch.long), 1, torch.ones(1, dtype=torch.bool))
    assert one == {"var": 0.0, "zero_variance_group_frac": 0.0}


def test_group_index_matches_a_first_appearance_reference_for_any_uid_type():
    rng = np.random.default_rng(0)
    for uids in (
        np.array([f"u{i}" for i in rng.integers(0, 50, 500)], dtype=object),
        rng.integers(0, 7, 100),  # integer uids are grouped by their string form
        np.array([], dtype=object),
    ):
        seen = {}
        reference = [seen.setdefault(str(uid), len(seen)) for uid in uids]
        group_index, num_groups, is_pad = group_index_from_uids(uids)
        assert group_index.tolist() == reference and num_groups == len(seen)
        assert is_pad.tolist() == [str(uid).startswith("pad") for uid in uids]


def test_tied_group_fraction_hand_computed():
    # groups: (1, 1) tied, (0, 1) mixed, (1,) single (not counted), (0, 0, 0) tied -> 2 of 3 multi groups
    from edge_verl.estimators.groups import group_mean_std, tied_group_fraction

    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    group_index = torch.tensor([0, 0, 1, 1, 2, 3, 3, 3])
    _, std, count = group_mean_std(scores, group_index, 4, torch.ones(8, dtype=torch.bool))
    assert float(tied_group_fraction(std, count)) == pytest.approx(2 / 3)
    assert float(tied_group_fraction(torch.ones(1), torch.ones(1))) == 0.0  # no group of 2+
