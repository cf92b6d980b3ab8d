"""EDA with gradient through entropy, through verl's real actor loss (``verl.workers.utils.losses.ppo_loss``)
on a tiny Qwen2's real logits, against the reference written out here from the formula.

Reference (EDGE-GRPO ``grpo_aha_trainer.py`` ``_compute_loss``, old-policy normaliser as the issue asks):
    P_i(theta) = masked mean over response tokens of the token entropy at the sampling temperature
    adv_i      = A_i * mean_{j in g} P_j^old / P_i(theta)          (the mean is a constant)
    loss       = mean_i [ sum_t m_it * -min(r_it adv_i, clip(r_it, 1 - 0.2, 1 + 0.2) adv_i) / sum_t m_it ]
with A_i = (r_i - mean_g r) / (std_g r + 1e-4) (unbiased std) and r_it = exp(logp_it - logp_it^old). Tolerance:
loss and every parameter gradient agree to 1e-5 relative + 1e-7 absolute (float32; the same operations in a
different order).
"""

import numpy as np
import pytest
import torch

from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.trainer.ppo import ray_trainer
from verl.utils import tensordict_utils as tu
from verl.workers.config import FSDPActorConfig
from verl.workers.utils import losses

from edge_verl_lab.demo.tiny import build_model, build_tokenizer
from edge_verl.estimators.edge_eda import EDA_GROUP_ENTROPY_COLUMN, EDA_OPTIONS_KEY, EDA_RATIO_COLUMN, NAME as EDA_ESTIMATOR
from edge_verl.integration.run import active_run, TrainingRun

pytestmark = pytest.mark.verl

TEMPERATURE = 0.6
PROMPT_LENGTH = 5
UIDS = ["a", "a", "a", "b", "b", "b"]
SCORES = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
RESPONSE_LENGTHS = [7, 4, 6, 3, 7, 5]
RTOL, ATOL = 1e-5, 1e-7


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tokenizer = build_tokenizer(tmp_path_factory.mktemp("tok"))
    model = build_model(tokenizer, seed=3)
    generator = torch.Generator().manual_seed(0)
    width = max(RESPONSE_LENGTHS)
    prompts = torch.randint(3, 250, (len(UIDS), PROMPT_LENGTH), generator=generator)
    responses = torch.randint(3, 250, (len(UIDS), width), generator=generator)
    mask = (torch.arange(width)[None, :] < torch.tensor(RESPONSE_LENGTHS)[:, None]).float()
    responses = torch.where(mask.bool(), responses, torch.zeros_like(responses))
    return model, prompts, responses, mask


def _forward(model, prompts, responses, mask):
    """Per-row (no padding) forward: flat log-probs and entropies in verl's no-padding layout
    (entry k of a row = the prediction of its token k + 1), and the same as padded (B, T) response tensors."""
    flat_logp, flat_entropy, logp_rows, entropy_rows = [], [], [], []
    width = responses.shape[1]
    for row in range(prompts.shape[0]):
        length = int(mask[row].sum())
        tokens = torch.cat([prompts[row], responses[row, :length]])
        logits = model(input_ids=tokens[None]).logits[0] / TEMPERATURE
        log_softmax = torch.log_softmax(logits[:-1], dim=-1)
        logp = log_softmax.gather(-1, tokens[1:, None])[:, 0]
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
        zero = torch.zeros(1)
        flat_logp.append(torch.cat([logp, zero]))
        flat_entropy.append(torch.cat([entropy, zero]))
        pad = torch.zeros(width - length)
        logp_rows.append(torch.cat([logp[PROMPT_LENGTH - 1 :], pad]))
        entropy_rows.append(torch.cat([entropy[PROMPT_LENGTH - 1 :], pad]))
    return torch.cat(flat_logp), torch.cat(flat_entropy), torch.stack(logp_rows), torch.stack(entropy_rows)


def _advantage_batch(old_logp, old_entropy, mask, entropy_gradient):
    """The legacy trainer's batch after verl's compute_advantage ran edge_eda (the plugin's wrapper writes
    the loss columns into it)."""
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(len(UIDS)), torch.tensor(RESPONSE_LENGTHS) - 1] = torch.tensor(SCORES)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask, "entropys": old_entropy, "old_log_probs": old_logp},
        non_tensors={"uid": np.array(UIDS, dtype=object)},
    )
    config = OmegaConf.create({"adv_estimator": "edge_eda", "edge_eda": {"entropy_gradient": entropy_gradient}})
    with active_run(TrainingRun.from_config(config)):
        return ray_trainer.compute_advantage(data, adv_estimator="edge_eda", config=config)


def _verl_loss_input(batch, prompts, responses, mask):
    """``batch`` in the form verl's actor hands ``ppo_loss`` (padded prompts/responses, global batch info)."""
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "attention_mask": torch.cat([torch.ones_like(prompts), mask.long()], dim=1),
        "response_mask": mask,
        "old_log_probs": batch.batch["old_log_probs"],
        "advantages": batch.batch["advantages"],
    }
    for key in (EDA_GROUP_ENTROPY_COLUMN, EDA_RATIO_COLUMN):
        if key in batch.batch.keys():
            tensors[key] = batch.batch[key]
    data = TensorDict(tensors, batch_size=[len(UIDS)])
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=len(UIDS), **batch.meta_info)
    return data


def _actor_config():
    return FSDPActorConfig(
        strategy="fsdp2",
        ppo_mini_batch_size=len(UIDS),
        ppo_micro_batch_size_per_gpu=len(UIDS),
        rollout_n=3,
        loss_agg_mode="seq-mean-token-mean",
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        calculate_entropy=True,
    )


def _grpo_advantages():
    scores, uids = torch.tensor(SCORES), np.array(UIDS)
    advantages = torch.zeros(len(UIDS))
    for uid in set(UIDS):
        rows = torch.tensor(uids == uid)
        advantages[rows] = (scores[rows] - scores[rows].mean()) / (scores[rows].std() + 1e-4)
    return advantages


def _reference_loss(logp, entropy, old_logp, old_entropy, mask, with_gradient):
    lengths = mask.sum(-1)
    old_p = (old_entropy * mask).sum(-1) / lengths
    group_mean = torch.stack([old_p[torch.tensor(np.array(UIDS) == uid)].mean() for uid in UIDS])
    current_p = (entropy * mask).sum(-1) / lengths if with_gradient else old_p
    advantages = (_grpo_advantages() * group_mean / current_p)[:, None]
    ratio = torch.exp(logp - old_logp)
    per_token = -torch.min(ratio * advantages, torch.clamp(ratio, 0.8, 1.2) * advantages)
    return ((per_token * mask).sum(-1) / lengths).mean()


def _gradients(model, loss):
    model.zero_grad()
    loss.backward()
    return {name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.grad is not None}


def _compare(tiny_inputs, entropy_gradient, perturb):
    model, prompts, responses, mask = tiny_inputs
    with torch.no_grad():
        _, _, old_logp, old_entropy = _forward(model, prompts, responses, mask)
    batch = _advantage_batch(old_logp, old_entropy, mask, entropy_gradient)
    state = {key: value.clone() for key, value in model.state_dict().items()}
    try:
        if perturb:  # a later mini-batch: the policy has moved since the old pass
            with torch.no_grad():
                generator = torch.Generator().manual_seed(1)
                for parameter in model.parameters():
                    parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
        flat_logp, flat_entropy, _, _ = _forward(model, prompts, responses, mask)
        data = _verl_loss_input(batch, prompts, responses, mask)
        loss, metrics = losses.ppo_loss(_actor_config(), {"log_probs": flat_logp, "entropy": flat_entropy}, data)
        plugin = (loss.detach(), _gradients(model, loss), metrics)
        _, _, logp, entropy = _forward(model, prompts, responses, mask)
        reference_loss = _reference_loss(logp, entropy, old_logp, old_entropy, mask, entropy_gradient)
        reference = (reference_loss.detach(), _gradients(model, reference_loss))
    finally:
        model.load_state_dict(state)
    return plugin, reference


@pytest.mark.parametrize("perturb", [False, True], ids=["first_mini_batch", "policy_moved"])
def test_gradient_form_matches_the_reference_loss_and_gradient(tiny, perturb):
    (loss, grads, metrics), (reference_loss, reference_grads) = _compare(tiny, entropy_gradient=True, perturb=perturb)
    torch.testing.assert_close(loss, reference_loss, rtol=RTOL, atol=ATOL)
    assert grads.keys() == reference_grads.keys() and grads
    for name in grads:
        torch.testing.assert_close(grads[name], reference_grads[name], rtol=RTOL, atol=ATOL, msg=name)
    share = metrics[f"{EDA_ESTIMATOR}/entropy_grad_share"].aggregate()
    scale = metrics[f"{EDA_ESTIMATOR}/loss_scale_mean"].aggregate()
    assert 0.0 < share < 1.0
    if not perturb:  # at the old policy the factor is exactly 1: same loss value as the detached form
        assert scale == pytest.approx(1.0, abs=1e-6)


def test_entropy_gradient_changes_the_gradient_but_not_the_first_loss_value(tiny):
    (loss_with, grads_with, _), _ = _compare(tiny, entropy_gradient=True, perturb=False)
    (loss_without, grads_without, _), _ = _compare(tiny, entropy_gradient=False, perturb=False)
    torch.testing.assert_close(loss_with, loss_without, rtol=1e-6, atol=1e-7)
    difference = sum(float((grads_with[name] - grads_without[name]).norm()) for name in grads_with)
    assert difference > 1e-3 * sum(float(grad.norm()) for grad in grads_without.values())


@pytest.mark.parametrize("perturb", [False, True], ids=["first_mini_batch", "policy_moved"])
def test_detached_form_gradient_equals_the_constant_advantage_reference(tiny, perturb):
    (loss, grads, metrics), (reference_loss, reference_grads) = _compare(tiny, entropy_gradient=False, perturb=perturb)
    torch.testing.assert_close(loss, reference_loss, rtol=RTOL, atol=ATOL)
    for name in grads:
        torch.testing.assert_close(grads[name], reference_grads[name], rtol=RTOL, atol=ATOL, msg=name)
    assert not any(key.startswith(EDA_ESTIMATOR) for key in metrics)


def test_gradient_form_without_entropy_in_the_loss_is_a_clear_error(tiny):
    model, prompts, responses, mask = tiny
    with torch.no_grad():
        flat_logp, _, old_logp, old_entropy = _forward(model, prompts, responses, mask)
    data = _verl_loss_input(_advantage_batch(old_logp, old_entropy, mask, True), prompts, responses, mask)
    with pytest.raises(RuntimeError, match="calculate_entropy=True"):
        losses.ppo_loss(_actor_config(), {"log_probs": flat_logp}, data)


def test_the_columns_are_laid_on_response_tokens_only(tiny):
    model, prompts, responses, mask = tiny
    with torch.no_grad():
        _, _, old_logp, old_entropy = _forward(model, prompts, responses, mask)
    batch = _advantage_batch(old_logp, old_entropy, mask, True)
    for key in (EDA_GROUP_ENTROPY_COLUMN, EDA_RATIO_COLUMN):
        column = batch.batch[key]
        assert torch.all(column[mask == 0] == 0) and torch.all(column[mask == 1] > 0)
    assert batch.meta_info[EDA_OPTIONS_KEY] == {"entropy_epsilon": 1e-6, "ratio_clamp": None}
