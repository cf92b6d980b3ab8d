import math

import numpy as np
import pytest
import torch

from edge_verl.estimators.edge_eda import compute_eda_advantages
from edge_verl.estimators.groups import group_index_from_uids, grpo_outcome
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
    grpo, _ = grpo_outcome(batch["scores"], batch["group_index"], batch["num_groups"], batch["valid"], epsilon=1e-6)
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


# --- the gradient-through-entropy form (entropy_gradient_scale, used inside the actor loss) ------------------


def test_entropy_gradient_scale_hand_computed():
    # Old pass: P_old = (0.3, 0.9), group mean 0.6 -> P_hat_old = (0.5, 1.5).
    # Current P = (0.6, 0.9): P_hat = (1.0, 1.5) -> s = P_hat_old / P_hat = (0.5, 1.0).
    # ds_0/dP_0 = -P_hat_old_0 * mean / P_0^2 = -0.5 * 0.6 / 0.36 = -0.83333; ds_1/dP_1 = -1.5 * 0.6 / 0.81 = -1.11111.
    from edge_verl.estimators.edge_eda import entropy_gradient_scale

    current = torch.tensor([0.6, 0.9], requires_grad=True)
    scale = entropy_gradient_scale(current, torch.tensor([0.6, 0.6]), torch.tensor([0.5, 1.5]), entropy_epsilon=1e-6, ratio_clamp=None)
    torch.testing.assert_close(scale, torch.tensor([0.5, 1.0]))
    (gradient,) = torch.autograd.grad(scale.sum(), current)
    torch.testing.assert_close(gradient, torch.tensor([-0.83333, -1.11111]), atol=1e-5, rtol=0)


def test_entropy_gradient_scale_is_one_at_the_old_policy_and_follows_the_estimator():
    from edge_verl.estimators.edge_eda import entropy_gradient_scale

    rng = np.random.default_rng(5)
    uids = [f"u{i // 4}" for i in range(24)]
    mask = (rng.uniform(size=(24, 9)) < 0.8).astype(float)
    mask[3] = 0  # a row without tokens
    entropy = rng.uniform(0.0, 2.0, (24, 9))
    entropy[4:8] = 0.0  # a group at zero entropy: left unscaled
    batch = _batch(uids, rng.integers(0, 2, 24).tolist(), entropy.tolist(), mask.tolist())
    for clamp in (None, (0.5, 1.5)):
        result = compute_eda_advantages(**batch, ratio_clamp=clamp)
        scale = entropy_gradient_scale(
            result.response_entropy, result.group_entropy, result.entropy_ratio, entropy_epsilon=1e-6, ratio_clamp=clamp
        )
        torch.testing.assert_close(scale, torch.ones(24))
        # A_hat * s = A / P_hat(theta): at a moved policy the loss's advantage is the estimator's on the new entropy
        moved = result.response_entropy * torch.tensor(rng.uniform(0.5, 2.0, 24), dtype=torch.float32)
        scale = entropy_gradient_scale(moved, result.group_entropy, result.entropy_ratio, entropy_epsilon=1e-6, ratio_clamp=clamp)
        expected = torch.where(
            result.group_entropy > 0,
            result.outcome_advantages / (moved / result.group_entropy.clamp(min=1e-12)).clamp(min=clamp[0] if clamp else 1e-6, max=clamp[1] if clamp else float("inf")),
            result.eda_outcome_advantages,
        )
        torch.testing.assert_close(result.eda_outcome_advantages * scale, expected, rtol=1e-5, atol=1e-6)


def test_entropy_gradient_scale_is_finite_with_zero_entropy_and_unscaled_rows_have_no_gradient():
    from edge_verl.estimators.edge_eda import entropy_gradient_scale

    current = torch.tensor([0.0, 0.4, 0.7, float("inf")], requires_grad=True)
    group = torch.tensor([0.5, 0.0, 0.5, 0.5])  # row 1: left unscaled by the estimator
    scale = entropy_gradient_scale(current, group, torch.tensor([0.8, 1.0, 1.4, 1.0]), entropy_epsilon=1e-6, ratio_clamp=(0.1, 10.0))
    assert torch.all(torch.isfinite(scale))
    assert scale[1] == 1.0
    (gradient,) = torch.autograd.grad(scale.sum(), current)
    assert torch.all(torch.isfinite(gradient)) and gradient[0] == 0 and gradient[1] == 0 and gradient[2] != 0
