"""GEC's injected tokens in verl's real actor loss (``verl.workers.utils.losses.ppo_loss``, patched by the
plugin): the per-origin gradient shares, ratios and clip fractions, and the masked / sft controls, on a small
batch computed by hand.

The batch (3 responses, token-mean over N = 11 response tokens, vanilla PPO with clip 0.2):
    row 0: S S S          A = +1   (left as sampled)
    row 1: S S A A        A = +2   (inject_answer: two sampled tokens, then two injected answer tokens)
    row 2: S P C C        A = -1   (regenerate: one sampled token, the phrase, two continuation tokens)
(S sampled, A answer, P phrase, C continuation). At the old policy (ratio 1, nothing clipped) the surrogate is
L = -sum_t A_t / N, so dL/dlogp_t = -A_t / N and |g_t| = |A_t| / 11:
    sampled      3*1 + 2*2 + 1*1 = 8       answer 2*2 = 4     phrase 1     continuation 2     solution 0
    total 15 -> shares 8/15, 4/15, 1/15, 2/15, 0; L = -(3 + 8 - 4) / 11 = -7/11.
"""

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.workers.config import FSDPActorConfig
from verl.workers.config.actor import PolicyLossConfig
from verl.workers.utils import losses

from edge_verl.algorithms.gec import ORIGINS
from edge_verl.algorithms.gec_loss import finish_origin_metrics
from edge_verl.algorithms.gec import GEC_LOSS_OPTIONS_KEY, GEC_ORIGIN_COLUMN
from edge_verl.estimators.edge_eda import EDA_GROUP_ENTROPY_COLUMN, EDA_OPTIONS_KEY, EDA_RATIO_COLUMN
from edge_verl.integration.trainer_run import finish_gec_actor_metrics

pytestmark = pytest.mark.verl

S, C, P, A = (ORIGINS.index(name) for name in ("sampled", "continuation", "phrase", "answer"))
PROMPT_LENGTH = 2
ORIGIN_ROWS = [[S, S, S, S], [S, S, A, A], [S, P, C, C]]  # row 0's 4th position is padding
LENGTHS = [3, 4, 4]
ADVANTAGES = [1.0, 2.0, -1.0]
N_TOKENS = 11


def _mask():
    return (torch.arange(4)[None, :] < torch.tensor(LENGTHS)[:, None]).float()


def _config(clip=0.2, loss_mode="vanilla"):
    return FSDPActorConfig(
        strategy="fsdp2", ppo_mini_batch_size=3, ppo_micro_batch_size_per_gpu=3, rollout_n=3,
        loss_agg_mode="token-mean", clip_ratio_low=clip, clip_ratio_high=clip, policy_loss=PolicyLossConfig(loss_mode=loss_mode),
    )


def _flat(per_token):
    """(3, 4) response values in verl's no-padding layout (entry k of a row predicts its token k + 1)."""
    flat = []
    for row, length in enumerate(LENGTHS):
        flat += [torch.zeros(PROMPT_LENGTH - 1), per_token[row, :length], torch.zeros(1)]
    return torch.cat(flat)


def _loss(log_prob, old_log_prob, injected_loss="surrogate", sft_coef=1.0, config=None, entropy=None):
    """verl's ppo_loss on the batch above; ``log_prob`` (3, 4) is a leaf whose gradient the test reads.
    ``entropy`` (3, 4): the current entropy, with EDA's gradient-form columns (old P_hat 1 for every row,
    group entropy 1) added to the batch."""
    mask = _mask()
    origins = torch.tensor(ORIGIN_ROWS, dtype=torch.float32) * mask
    tensors = {
        "prompts": torch.full((3, PROMPT_LENGTH), 5),
        "responses": torch.full((3, 4), 7) * mask.long(),
        "attention_mask": torch.cat([torch.ones(3, PROMPT_LENGTH, dtype=torch.long), mask.long()], dim=1),
        "response_mask": mask,
        "old_log_probs": old_log_prob * mask,
        "advantages": torch.tensor(ADVANTAGES)[:, None] * mask,
        GEC_ORIGIN_COLUMN: origins,
    }
    options = {"injected_loss": injected_loss, "sft_coef": sft_coef, "injected_share": 3 / N_TOKENS}
    non_tensors = {GEC_LOSS_OPTIONS_KEY: options}
    model_output = {"log_probs": _flat(log_prob)}
    if entropy is not None:
        tensors[EDA_GROUP_ENTROPY_COLUMN] = mask.clone()
        tensors[EDA_RATIO_COLUMN] = mask.clone()
        non_tensors[EDA_OPTIONS_KEY] = {"entropy_epsilon": 1e-6, "ratio_clamp": None}
        model_output["entropy"] = _flat(entropy)
    data = TensorDict(tensors, batch_size=[3])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=N_TOKENS, global_batch_size=3, **non_tensors)
    loss, metrics = losses.ppo_loss(config or _config(), model_output, data)
    loss.backward()
    reduced = {f"actor/{key}": [metric.aggregate()] for key, metric in metrics.items() if hasattr(metric, "aggregate")}
    finish_gec_actor_metrics(reduced)
    return loss.detach(), log_prob.grad, reduced


def _old_policy():
    old = -torch.arange(1.0, 13.0).reshape(3, 4) / 4  # any values: ratio 1 when log_prob equals them
    return old.clone().requires_grad_(True), old


def test_hand_computed_gradient_shares_at_the_old_policy():
    log_prob, old = _old_policy()
    loss, grad, metrics = _loss(log_prob, old)
    assert float(loss) == pytest.approx(-7 / 11, abs=1e-6)
    expected = {"sampled": 8 / 15, "answer": 4 / 15, "phrase": 1 / 15, "continuation": 2 / 15, "solution": 0.0}
    for origin, share in expected.items():
        assert metrics[f"actor/gec/{origin}/grad_share"] == pytest.approx(share, abs=1e-6), origin
    tokens = {"sampled": 6, "answer": 2, "phrase": 1, "continuation": 2, "solution": 0}
    for origin, count in tokens.items():
        assert metrics[f"actor/gec/{origin}/token_share"] == pytest.approx(count / N_TOKENS, abs=1e-6), origin
    # the old log-prob mean of the answer tokens: row 1 positions 2, 3 -> -(7 + 8) / 4 / 2
    assert metrics["actor/gec/answer/old_logprob_mean"] == pytest.approx(-15 / 8, abs=1e-6)
    assert metrics["actor/gec/sampled/ratio_mean"] == pytest.approx(1.0) and metrics["actor/gec/sampled/vanilla_clip_frac"] == 0.0
    assert "actor/gec/solution/ratio_mean" not in metrics  # no tokens: no mean
    assert not any(key.rsplit("/", 1)[-1].startswith("_") for key in metrics), "raw sums are replaced"
    torch.testing.assert_close(grad, -torch.tensor(ADVANTAGES)[:, None] * _mask() / N_TOKENS)


def test_masked_gives_no_gradient_to_injected_tokens_and_keeps_the_rest():
    log_prob, old = _old_policy()
    loss, grad, metrics = _loss(log_prob, old, injected_loss="masked")
    # surviving terms: row 0 3 x (+1), row 1 2 x (+2), row 2 3 x (-1) (S, C, C) -> L = -(3 + 4 - 3) / 11
    assert float(loss) == pytest.approx(-4 / 11, abs=1e-6)
    assert float(grad[1, 2:].abs().sum()) == 0.0 and float(grad[2, 1]) == 0.0
    expected = {"sampled": 8 / 10, "continuation": 2 / 10, "answer": 0.0, "phrase": 0.0, "solution": 0.0}
    for origin, share in expected.items():
        assert metrics[f"actor/gec/{origin}/grad_share"] == pytest.approx(share, abs=1e-6), origin
    assert grad[0, 0] == pytest.approx(-1 / 11) and grad[2, 2] == pytest.approx(1 / 11)  # the rest as in surrogate


def test_sft_adds_the_token_mean_nll_of_injected_tokens_and_no_surrogate_through_them():
    log_prob, old = _old_policy()
    loss, grad, metrics = _loss(log_prob, old, injected_loss="sft", sft_coef=0.5)
    # injected log-probs: row 1 positions 2, 3 -> -7/4, -8/4; row 2 position 1 -> -10/4; NLL mean = 25/12
    nll = (7 + 8 + 10) / 4 / 3
    assert float(loss) == pytest.approx(-4 / 11 + 0.5 * nll, abs=1e-6)
    assert metrics["actor/gec/sft_nll"] == pytest.approx(nll, abs=1e-6)
    assert metrics["actor/gec/answer/grad_share"] == 0.0 and metrics["actor/gec/phrase/grad_share"] == 0.0
    torch.testing.assert_close(grad[1, 2:], torch.full((2,), -0.5 / 3))  # d(0.5 * mean NLL)/dlogp = -0.5 / 3
    assert float(grad[2, 1]) == pytest.approx(-0.5 / 3)


def test_ratio_and_clip_statistics_per_origin_once_the_policy_moved():
    _, old = _old_policy()
    shift = torch.zeros(3, 4)
    shift[1, 2] = np.log(1.5)  # answer token, A > 0, ratio 1.5 > 1.2: clipped
    shift[1, 3] = np.log(1.1)  # answer token, ratio 1.1: inside the range
    shift[2, 2] = np.log(0.5)  # continuation token, A < 0, ratio 0.5 < 0.8: clipped
    log_prob = (old + shift).clone().requires_grad_(True)
    _, grad, metrics = _loss(log_prob, old)
    assert metrics["actor/gec/answer/ratio_mean"] == pytest.approx((1.5 + 1.1) / 2, rel=1e-5)
    assert metrics["actor/gec/answer/ratio_max"] == pytest.approx(1.5, rel=1e-5)
    assert metrics["actor/gec/answer/vanilla_clip_frac"] == pytest.approx(0.5)
    assert metrics["actor/gec/continuation/vanilla_clip_frac"] == pytest.approx(0.5)
    assert metrics["actor/gec/continuation/ratio_mean"] == pytest.approx((0.5 + 1.0) / 2, rel=1e-5)
    assert metrics["actor/gec/sampled/vanilla_clip_frac"] == 0.0
    assert float(grad[1, 2]) == 0.0 and float(grad[2, 2]) == 0.0  # clipped tokens carry no gradient
    # |g| on the others: row 0 3 x 1, row 1 2 x 2 + 1.1 x 2, row 2 (S, P, C) 3 x 1 -> 12.2; answer 2.2 of it
    assert metrics["actor/gec/answer/grad_share"] == pytest.approx(2.2 / 12.2, rel=1e-5)


def test_the_vanilla_clip_fraction_is_the_clipping_verls_own_loss_reports():
    # verl's vanilla loss reports the tokens its clip removes as two disjoint fractions of the response tokens,
    # pg_clipfrac (the clipped term wins) and pg_clipfrac_lower (dual clip: A < 0 and ratio > clip_ratio_c = 3):
    # the per-origin fractions weighted by the origins' token shares must add up to their sum.
    generator = torch.Generator().manual_seed(1)
    dual_clipped = 0.0
    for _ in range(5):
        old = -torch.rand(3, 4, generator=generator) * 3
        log_prob = (old + 1.5 * torch.randn(3, 4, generator=generator)).requires_grad_(True)
        _, _, metrics = _loss(log_prob, old)
        # verl's own keys already carry "actor/", which _loss prefixes once more
        upper, lower = metrics["actor/actor/pg_clipfrac"][0], metrics["actor/actor/pg_clipfrac_lower"][0]
        ours = sum(metrics.get(f"actor/gec/{o}/vanilla_clip_frac", 0.0) * metrics[f"actor/gec/{o}/token_share"] for o in ORIGINS)
        assert ours == pytest.approx(upper + lower, abs=1e-6)
        dual_clipped += lower
    assert dual_clipped > 0, "the batches reach the dual clip"


def test_another_loss_mode_gets_no_vanilla_clip_fraction():
    # GSPO clips a sequence-level ratio: vanilla PPO's per-token clipping would be a wrong number
    _, old = _old_policy()
    log_prob = (old + 0.5).clone().requires_grad_(True)
    _, _, metrics = _loss(log_prob, old, config=_config(loss_mode="gspo"))
    assert metrics["actor/gec/sampled/ratio_mean"] == pytest.approx(np.exp(0.5), rel=1e-5)
    assert not any("clip" in key for key in metrics if key.startswith("actor/gec/"))


@pytest.mark.parametrize("mode", ["surrogate", "masked"])
def test_shares_are_those_of_the_gradient_backward_computed_on_random_batches(mode):
    # In these modes the surrogate is the whole loss, so dL/dlogp is what loss.backward() leaves in
    # log_prob.grad: each origin's grad_share must be its part of sum |grad|, and its token_share its part
    # of the response tokens, both computed here from the tensors, not from the metrics.
    generator = torch.Generator().manual_seed(0)
    origins = torch.tensor(ORIGIN_ROWS) * _mask().long()
    for _ in range(5):
        old = -torch.rand(3, 4, generator=generator) * 3
        log_prob = (old + 0.3 * torch.randn(3, 4, generator=generator)).requires_grad_(True)
        _, grad, metrics = _loss(log_prob, old, injected_loss=mode)
        magnitude = grad.abs() * _mask()
        for code, origin in enumerate(ORIGINS):
            selected = (origins == code) & _mask().bool()
            assert metrics[f"actor/gec/{origin}/grad_share"] == pytest.approx(float(magnitude[selected].sum() / magnitude.sum()), abs=1e-6)
            assert metrics[f"actor/gec/{origin}/token_share"] == pytest.approx(float(selected.sum()) / N_TOKENS)


@pytest.mark.parametrize("mode", ["surrogate", "masked", "sft"])
def test_with_edas_gradient_form_no_gradient_reaches_injected_tokens_through_the_entropy_either(mode):
    log_prob, old = _old_policy()
    entropy = (0.5 + torch.arange(12.0).reshape(3, 4) / 12).requires_grad_(True)
    _, grad, metrics = _loss(log_prob, old, injected_loss=mode, entropy=entropy)
    injected = torch.zeros(3, 4, dtype=torch.bool)
    injected[1, 2:] = injected[2, 1] = True
    through_entropy = entropy.grad[injected].abs()
    if mode == "surrogate":  # the paper: the injected tokens' entropy is part of P_i(theta) like any token's
        assert bool((through_entropy > 0).all())
    else:
        assert float(through_entropy.sum()) == 0.0 and float(grad[1, 2:].abs().sum()) == pytest.approx(0.0 if mode == "masked" else 2 / 3)  # sft: 2 x 1/3 from the NLL
    assert bool((entropy.grad[0, :3] != 0).all())  # sampled tokens: EDA's entropy path as always
    assert 0.0 < metrics["actor/edge_eda/entropy_grad_share"][0] < 1.0


def test_sums_reduced_over_several_mini_batches_give_token_weighted_statistics():
    # two mini-batches as verl hands them to the trainer (one value per mini-batch, averaged by verl):
    # answer tokens 2 then 0, ratio sums 3.0 then 0 -> ratio mean 3.0 / 2 over the update, not (1.5 + 0) / 2
    raw = {
        "actor/gec/answer/_tokens": [2.0, 0.0], "actor/gec/answer/_ratio_sum": [3.0, 0.0],
        "actor/gec/answer/_old_logprob_sum": [-2.0, 0.0], "actor/gec/answer/_vanilla_clipped": [1.0, 0.0],
        "actor/gec/answer/_grad_abs": [1.0, 0.0], "actor/gec/answer/ratio_max": [1.6, 0.0],
        "actor/gec/sampled/_tokens": [2.0, 4.0], "actor/gec/sampled/_ratio_sum": [2.0, 4.0],
        "actor/gec/sampled/_old_logprob_sum": [-1.0, -1.0], "actor/gec/sampled/_vanilla_clipped": [0.0, 1.0],
        "actor/gec/sampled/_grad_abs": [1.0, 2.0], "actor/gec/sampled/ratio_max": [1.0, 1.0],
    }
    finished = finish_origin_metrics(raw, "actor/gec")
    assert finished["actor/gec/answer/ratio_mean"] == pytest.approx(1.5)
    assert finished["actor/gec/answer/token_share"] == pytest.approx(2 / 8)
    assert finished["actor/gec/sampled/vanilla_clip_frac"] == pytest.approx(1 / 6)
    assert finished["actor/gec/answer/grad_share"] + finished["actor/gec/sampled/grad_share"] == pytest.approx(1.0)
    assert finished["actor/gec/answer/grad_share"] == pytest.approx(0.5 / 2.0)
