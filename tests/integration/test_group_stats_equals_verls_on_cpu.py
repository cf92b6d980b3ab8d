"""``estimators.base.group_mean_std`` computes what verl's ``verl.utils.groupwise.group_mean_std`` does, as verl's
GRPO calls it (``eps=0.0``): the same mean, unbiased std and count per group, to the last bit, on random
float32 scores with singleton groups, tied groups and rows left out (``valid``: verl's padding rows)."""

import numpy as np
import pytest
import torch
from verl.utils.groupwise import group_mean_std as verl_group_mean_std

from edge_verl.estimators.groups import group_mean_std

GROUP_SIZES = (1, 1, 2, 3, 5, 8)


def _scores(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(scores (B,) float32, group_index (B,) long, P): groups of mixed sizes, singletons included, their rows
    scattered; 0/1 scores in some groups (all tied in some of those), continuous in others."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice(GROUP_SIZES, int(rng.integers(1, 12)))
    index, scores = [], []
    for group, size in enumerate(sizes):
        kind = rng.integers(3)
        values = (rng.integers(0, 2, size) if kind == 0 else np.full(size, float(rng.integers(0, 2))) if kind == 1
                  else rng.normal(0.0, 2.0, size))
        index += [group] * int(size)
        scores += list(values)
    order = rng.permutation(len(index))
    return (torch.tensor(np.asarray(scores)[order], dtype=torch.float32), torch.tensor(np.asarray(index)[order]),
            len(sizes))


@pytest.mark.parametrize("seed", range(40))
def test_group_mean_std_equals_verls_on_every_row(seed):
    scores, group_index, groups = _scores(seed)
    mine = group_mean_std(scores, group_index, groups, torch.ones_like(scores, dtype=torch.bool))
    theirs = verl_group_mean_std(scores, group_index, eps=0.0, device="cpu")
    for found, expected in zip(mine, theirs):
        torch.testing.assert_close(found, expected, rtol=0, atol=0)


@pytest.mark.parametrize("seed", range(40))
def test_group_mean_std_over_the_valid_rows_equals_verls_on_those_rows_alone(seed):
    # the rows left out (padding) count for nothing: verl given only the valid rows gives the same groups;
    # a group with no valid row is mean 0, std 1, count 0 in ours and absent from verl's (its last index + 1 groups)
    scores, group_index, groups = _scores(seed)
    valid = torch.from_numpy(np.random.default_rng(1000 + seed).uniform(size=len(scores)) < 0.8)
    mean, std, count = group_mean_std(scores, group_index, groups, valid)
    present = torch.unique(group_index[valid])
    renumbered = torch.searchsorted(present, group_index[valid])
    theirs = verl_group_mean_std(scores[valid], renumbered, eps=0.0, device="cpu")
    for found, expected in zip((mean[present], std[present], count[present]), theirs):
        torch.testing.assert_close(found, expected, rtol=0, atol=0)
    absent = count == 0
    assert bool((mean[absent] == 0).all() and (std[absent] == 1).all())


def test_singleton_and_tied_groups_by_hand():
    # groups: [3.0] alone, [1, 1, 1] tied, [0, 2]
    scores = torch.tensor([3.0, 1.0, 0.0, 1.0, 2.0, 1.0])
    group_index = torch.tensor([0, 1, 2, 1, 2, 1])
    mine = group_mean_std(scores, group_index, 3, torch.ones(6, dtype=torch.bool))
    theirs = verl_group_mean_std(scores, group_index, eps=0.0, device="cpu")
    expected = (torch.tensor([0.0, 1.0, 1.0]), torch.tensor([1.0, 0.0, 2.0**0.5]), torch.tensor([1.0, 3.0, 2.0]))
    for found, verls, wanted in zip(mine, theirs, expected):
        torch.testing.assert_close(found, wanted)
        torch.testing.assert_close(found, verls, rtol=0, atol=0)
