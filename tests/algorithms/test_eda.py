import math

import numpy as np
import pytest
import torch

from edge_verl.algorithms.eda import compute_eda_advantages
from edge_verl.algorithms.group_stats import group_index_from_uids, grpo_advantages
from tests.algorithms.reference import eda_reference


def _batch(uids, scores, entropy, mask):
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    return dict(
        scores=torch.tensor(scores, dtype=torch.float32),
        token_entropy=torch.tensor(entropy, dtype=torch.float32),
        response_mask=torch.tensor(mask, dtype=torch.float32),
        group_index=group_index,
        num_groups=num_groups,
        valid=~is_pad,
    )


def test_eda_hand_computed_two_responses():
    # Group of 2: rewards (1, 0) -> mean 0.5, unbiased std 0.70711, A = (+0.70711, -0.70711) (epsilon 0).
    # Response entropies (masked means): row 0 = (0.2 + 0.4) / 2 = 0.3, row 1 = 0.9 (its 2nd token is masked).
    # Group mean P = 0.6 -> P_hat = (0.5, 1.5) -> A_hat = (0.70711 / 0.5, -0.70711 / 1.5) = (1.41421, -0.47140).
    batch = _batch(["g", "g"], [1.0, 0.0], [[0.2, 0.4], [0.9, 5.0]], [[1, 1], [1, 0]])
    result = compute_eda_advantages(**batch, std_epsilon=0.0)
    torch.testing.assert_close(result.entropy_ratio, torch.tensor([0.5, 1.5]))
    torch.testing.assert_close(result.advantages, torch.tensor([[1.41421, 1.41421], [-0.47140, 0.0]]), atol=1e-5, rtol=0)


def test_eda_reduces_to_grpo_when_entropies_are_equal():
    rng = np.random.default_rng(0)
    uids = [f"u{i // 8}" for i in range(64)]
    batch = _batch(uids, rng.integers(0, 2, 64).tolist(), np.full((64, 5), 0.7).tolist(), np.ones((64, 5)).tolist())
    result = compute_eda_advantages(**batch, std_epsilon=1e-6)
    grpo = grpo_advantages(batch["scores"], batch["group_index"], batch["num_groups"], batch["valid"], epsilon=1e-6)
    torch.testing.assert_close(result.advantages, grpo[:, None].expand(-1, 5).contiguous())


def test_eda_keeps_the_sign_and_zero_for_tied_groups():
    rng = np.random.default_rng(1)
    uids = [f"u{i // 4}" for i in range(32)]
    scores = rng.integers(0, 2, 32).tolist()
    batch = _batch(uids, scores, rng.uniform(0.01, 3.0, (32, 6)).tolist(), np.ones((32, 6)).tolist())
    result = compute_eda_advantages(**batch)
    assert torch.equal(torch.sign(result.eda_outcome_advantages), torch.sign(result.outcome_advantages))
    tied = [all(scores[g * 4 + k] == scores[g * 4] for k in range(4)) for g in range(8)]
    for group, is_tied in enumerate(tied):
        if is_tied:
            assert torch.all(result.advantages[group * 4 : group * 4 + 4] == 0)


@pytest.mark.parametrize("seed", range(4))
def test_eda_equals_loop_reference(seed):
    rng = np.random.default_rng(seed)
    size, width = 30, 7
    uids = [f"u{i}" for i in rng.integers(0, 5, size)]
    mask = (rng.uniform(size=(size, width)) < 0.8).astype(np.float32)
    mask[0] = 0  # an empty response
    entropy = rng.uniform(0, 2, (size, width)).astype(np.float32)
    scores = rng.integers(0, 2, size).astype(np.float32)
    result = compute_eda_advantages(**_batch(uids, scores.tolist(), entropy.tolist(), mask.tolist()))
    expected = eda_reference(scores.tolist(), entropy.tolist(), mask.tolist(), uids, 1e-4)
    torch.testing.assert_close(result.advantages, torch.tensor(expected, dtype=torch.float32), rtol=1e-5, atol=1e-6)


def test_eda_is_permutation_invariant():
    rng = np.random.default_rng(3)
    uids = [f"u{i // 4}" for i in range(24)]
    args = (rng.integers(0, 2, 24).tolist(), rng.uniform(0, 2, (24, 5)).tolist(), np.ones((24, 5)).tolist())
    result = compute_eda_advantages(**_batch(uids, *args))
    order = rng.permutation(24)
    permuted = compute_eda_advantages(**_batch([uids[i] for i in order], *[[a[i] for i in order] for a in args]))
    torch.testing.assert_close(permuted.advantages, result.advantages[torch.as_tensor(order)])


def test_eda_zero_entropy_and_padding_rows_stay_finite_and_masked_tokens_untouched():
    uids = ["g", "g", "g", "pad1", "h", "h"]
    entropy = [[0.0, 0.0], [0.5, 0.5], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    mask = [[1, 1], [1, 0], [1, 1], [0, 0], [1, 1], [1, 1]]
    result = compute_eda_advantages(**_batch(uids, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], entropy, mask))
    assert torch.isfinite(result.advantages).all()
    assert result.advantages[1, 1] == 0 and torch.all(result.advantages[3] == 0)
    # group h has zero mean entropy: left unscaled (P_hat = 1), i.e. plain GRPO with epsilon 1e-4
    torch.testing.assert_close(result.entropy_ratio[4:], torch.ones(2))


def test_eda_ratio_clamp_bounds_the_entropy_ratio():
    batch = _batch(["g"] * 3, [1.0, 0.0, 0.0], [[0.001], [1.0], [2.0]], [[1], [1], [1]])
    result = compute_eda_advantages(**batch, ratio_clamp=(0.1, 10.0))
    assert float(result.entropy_ratio.min()) == pytest.approx(0.1)


@pytest.mark.parametrize("seed", range(20))
def test_eda_never_produces_nan_or_inf(seed):
    rng = np.random.default_rng(seed)
    size, width = int(rng.integers(1, 20)), int(rng.integers(1, 6))
    entropy = rng.choice([0.0, 1e-30, 1e-3, 1.0, 50.0, math.nan, math.inf], size=(size, width))
    mask = rng.integers(0, 2, (size, width))
    uids = [rng.choice(["a", "b", "pad"]) for _ in range(size)]
    scores = rng.choice([0.0, 1.0, 1e6], size=size)
    result = compute_eda_advantages(**_batch(uids, scores.tolist(), entropy.tolist(), mask.tolist()))
    assert torch.isfinite(result.advantages).all()
    assert torch.all(result.advantages[torch.tensor(mask) == 0] == 0)
