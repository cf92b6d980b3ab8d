"""``grpo_outcome``'s advantage is verl 0.9.1's GRPO: equal to ``compute_grpo_outcome_advantage`` (the loop) and to
the ``grpo_vectorized`` estimator on random batches shaped the way verl's trainer hands them over."""

import inspect

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from edge_verl.estimators.groups import group_index_from_uids, grpo_outcome

GROUP_SIZES = (1, 2, 3, 5, 8)


def _verl_batch(seed: int, pad_rows: int = 0):
    """token_level_rewards (B, T) with each score on its response's last token, response_mask (B, T) of random
    lengths (0 included), uid (B,) as verl's numpy object array; groups of mixed sizes (singletons included),
    rows of a group scattered through the batch; binary scores in some groups (ties: std 0), continuous in others.
    ``pad_rows`` appends rows like verl's v1 batch balancing: uid "pad...", all-zero mask and reward."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(1, 9))
    uids, scores = [], []
    for group in range(int(rng.integers(1, 9))):
        size = int(rng.choice(GROUP_SIZES))
        uid = f"{rng.integers(1 << 62):016x}-{group}"
        values = rng.integers(0, 2, size).astype(float) if rng.uniform() < 0.5 else rng.normal(0.0, 2.0, size)
        uids += [uid] * size
        scores += values.tolist()
    order = rng.permutation(len(uids))
    uids = [uids[i] for i in order] + [f"pad{i}" for i in range(pad_rows)]
    scores = np.array([scores[i] for i in order] + [0.0] * pad_rows)
    lengths = rng.integers(0, width + 1, len(uids))
    lengths[len(order):] = 0
    mask = torch.tensor(np.arange(width)[None, :] < lengths[:, None], dtype=torch.float32)
    rewards = torch.zeros(len(uids), width)
    rows = np.flatnonzero(lengths > 0)
    rewards[rows, lengths[rows] - 1] = torch.tensor(scores[rows], dtype=torch.float32)
    return rewards, mask, np.array(uids, dtype=object)


def _ours(rewards, mask, uids, norm_by_std, epsilon):
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    outcome, _ = grpo_outcome(
        rewards.sum(dim=-1), group_index, num_groups, ~is_pad, norm_by_std=norm_by_std, epsilon=epsilon
    )
    return outcome[:, None] * mask


def test_default_epsilons_agree():
    # verl's compute_advantage calls its GRPO without an epsilon, so verl's default is the one training uses
    verl_default = inspect.signature(core_algos.compute_grpo_outcome_advantage).parameters["epsilon"].default
    ours = inspect.signature(grpo_outcome).parameters["epsilon"].default
    assert verl_default == ours == 1e-6


@pytest.mark.parametrize("estimator", ["grpo", "grpo_vectorized"])
@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("seed", range(12))
def test_grpo_outcome_advantages_equal_verls_grpo_on_random_batches(seed, norm_by_std, estimator):
    rewards, mask, uids = _verl_batch(seed, pad_rows=2 if seed % 3 == 0 else 0)
    verl_fn = core_algos.get_adv_estimator_fn(estimator)
    epsilon = 1e-6 if seed % 2 == 0 else 1e-3
    expected, returns = verl_fn(
        token_level_rewards=rewards.clone(), response_mask=mask, index=uids, epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_by_std,
    )
    torch.testing.assert_close(_ours(rewards, mask, uids, norm_by_std, epsilon), expected)
    torch.testing.assert_close(returns, expected)


def test_singleton_and_tied_groups_worked_example():
    # group a = {3} (singleton: mean 0, std 1 -> 3 / (1 + eps)), group b = {1, 1} (tie: std 0 -> 0 / eps = 0),
    # group c = {0, 2} (mean 1, unbiased std sqrt(2) -> -1/(sqrt 2 + eps), +1/(sqrt 2 + eps))
    rewards = torch.tensor([[3.0], [1.0], [1.0], [0.0], [2.0]])
    mask = torch.ones(5, 1)
    uids = np.array(["a", "b", "b", "c", "c"], dtype=object)
    eps = 1e-6
    hand = torch.tensor([[3 / (1 + eps)], [0.0], [0.0], [-1 / (2**0.5 + eps)], [1 / (2**0.5 + eps)]])
    for estimator in ("grpo", "grpo_vectorized"):
        verl_out, _ = core_algos.get_adv_estimator_fn(estimator)(rewards.clone(), mask, uids, epsilon=eps)
        torch.testing.assert_close(verl_out, hand)
    torch.testing.assert_close(_ours(rewards, mask, uids, True, eps), hand)
