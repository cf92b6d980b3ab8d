"""EDA with gradient through entropy: the hook in verl's actor loss (``verl.workers.utils.losses``).

In verl 0.9.1 every actor backend (the FSDP and Megatron engines, both trainers) computes its loss in
``losses.ppo_loss`` with the current policy's per-token entropy in ``model_output["entropy"]`` when the
update asks for it (``actor_rollout_ref.actor.calculate_entropy=True``). With
``algorithm.edge_eda.entropy_gradient=True`` the ``edge_eda`` estimator writes two per-token columns next
to the advantages (``names.EDA_GROUP_ENTROPY_COLUMN``: the detached normaliser, the old policy's group
mean entropy; ``names.EDA_RATIO_COLUMN``: the old P_hat) and, batch-level, the guard options they were
computed with (``names.EDA_OPTIONS_KEY``: entropy_epsilon, ratio_clamp). A batch carrying them is the only thing that switches the hook on; any other batch goes
through verl's loss untouched.

What the hook does, per micro-batch: P_i(theta) = masked mean of the current entropy over the response;
s_i = P_hat_i^old / P_hat_i(theta) (``edge_verl.algorithms.eda.entropy_gradient_scale``); verl's own policy
loss (whatever ``policy_loss.loss_mode``: its clipping and ``loss_agg_mode`` unchanged) then receives the
advantages times s_i, i.e. A_i / P_hat_i(theta), the reference's form. s_i = 1 in value at the old policy,
so the first mini-batch's loss value equals the detached form's; only the gradient differs.

Diagnostic (``actor/edge_eda/entropy_grad_share``): of the loss gradient with respect to the policy's
outputs, the share that reaches them through the entropy, ``|dL/dH| / (|dL/dlogp| + |dL/dH|)`` (norms
over the micro-batch's response tokens). Both paths then back-propagate through the same network, so this
is a cheap proxy for the share in parameter space (one ``autograd.grad`` over the loss's elementwise ops,
no second backward through the model). Also ``actor/edge_eda/loss_scale_mean`` (mean s over scaled rows:
1 at the first mini-batch, drifting as the policy moves in later mini-batches or epochs).
"""

from __future__ import annotations

import functools
import sys
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from edge_verl.algorithms.eda import entropy_gradient_scale
from edge_verl.algorithms.group_stats import masked_response_mean
from edge_verl.integration import names
from edge_verl.integration.internals import CORE

# The modules that bind ``ppo_loss`` by name at import (``from verl.workers.utils.losses import ppo_loss``),
# when imported before ``losses`` finished (each has its entry in ``internals.CORE``).
_PPO_LOSS_IMPORTERS = ("verl.workers.engine_workers", "verl.trainer.distillation.losses")


@dataclass
class _LossScale:
    """The factor for the policy loss of one micro-batch, and the tensors the diagnostic needs."""

    scale: torch.Tensor  # (B, T) s_i on each row's tokens
    entropy: torch.Tensor  # (B, T) the current entropy the scale was computed from (with gradient)
    active: torch.Tensor  # (B,) rows whose advantage follows the entropy
    metrics: dict[str, float]


_CURRENT: ContextVar[Optional[_LossScale]] = ContextVar("edge_verl_eda_loss", default=None)


def is_active(data: Any) -> bool:
    """The micro-batch asks for EDA's gradient through entropy (its estimator wrote the columns)."""
    return names.EDA_GROUP_ENTROPY_COLUMN in data.keys()


def loss_scale(entropy: torch.Tensor, columns: dict[str, torch.Tensor], options: dict) -> _LossScale:
    """s (B, T) from the current padded entropy (B, T), the estimator's padded columns (same shape) and its
    guard options (``names.EDA_OPTIONS_KEY``: entropy_epsilon, ratio_clamp)."""
    mask = columns["response_mask"].to(torch.bool)
    group_entropy = masked_response_mean(columns[names.EDA_GROUP_ENTROPY_COLUMN].to(torch.float32), mask)
    old_ratio = masked_response_mean(columns[names.EDA_RATIO_COLUMN].to(torch.float32), mask)
    response_entropy = masked_response_mean(entropy.to(torch.float32), mask)
    epsilon = float(options["entropy_epsilon"])
    clamp = options.get("ratio_clamp")
    scale = entropy_gradient_scale(
        response_entropy,
        group_entropy,
        old_ratio,
        entropy_epsilon=epsilon,
        ratio_clamp=(float(clamp[0]), float(clamp[1])) if clamp is not None else None,
    )
    return _LossScale(scale[:, None] * mask.to(scale.dtype), entropy, group_entropy > epsilon, {})


def _options(data: Any) -> dict:
    from verl.utils import tensordict_utils as tu

    options = tu.get_non_tensor_data(data=data, key=names.EDA_OPTIONS_KEY, default=None)
    if options is None:
        raise RuntimeError(
            f"The batch carries {names.EDA_GROUP_ENTROPY_COLUMN} but not {names.EDA_OPTIONS_KEY}: the edge_eda "
            "estimator writes both; was the batch built by another version of edge_verl?"
        )
    return dict(options)


def _make_ppo_loss(original: Callable) -> Callable:
    def ppo_loss(config, model_output, data, dp_group=None):
        if not is_active(data):
            return original(config, model_output, data, dp_group)
        from verl.utils.metric import AggregationType, Metric
        from verl.workers.utils.padding import no_padding_2_padding

        entropy = model_output.get("entropy", None)
        if entropy is None:
            raise RuntimeError(
                "algorithm.edge_eda.entropy_gradient=True needs the current policy's entropy in the actor loss: "
                "set actor_rollout_ref.actor.calculate_entropy=True."
            )
        entropy = no_padding_2_padding(entropy, data)
        columns = data.select("response_mask", names.EDA_GROUP_ENTROPY_COLUMN, names.EDA_RATIO_COLUMN).to_padded_tensor()
        state = loss_scale(entropy, dict(columns.items()), _options(data))
        token = _CURRENT.set(state)
        try:
            loss, metrics = original(config, model_output, data, dp_group)
        finally:
            _CURRENT.reset(token)
        for key, value in state.metrics.items():
            metrics[f"{names.EDA_ESTIMATOR}/{key}"] = Metric(value=value, aggregation=AggregationType.MEAN)
        return loss, metrics

    return ppo_loss


def gradient_share(loss: torch.Tensor, log_prob: torch.Tensor, entropy: torch.Tensor) -> Optional[float]:
    """|dL/dH| / (|dL/dlogp| + |dL/dH|) over the micro-batch (see module docstring); None without a graph."""
    if not (torch.is_grad_enabled() and loss.requires_grad and entropy.requires_grad):
        return None
    inputs = [log_prob, entropy] if log_prob.requires_grad else [entropy]
    grads = torch.autograd.grad(loss, inputs, retain_graph=True, allow_unused=True)
    norms = [float(grad.norm()) if grad is not None else 0.0 for grad in grads]
    through_entropy = norms[-1]
    through_log_prob = norms[0] if len(norms) == 2 else 0.0
    total = through_log_prob + through_entropy
    return through_entropy / total if total > 0 else 0.0


def _make_policy_loss(policy_loss_fn: Callable, state: _LossScale) -> Callable:
    @functools.wraps(policy_loss_fn)
    def policy_loss(*args, **kwargs):
        if args or "advantages" not in kwargs:
            raise RuntimeError("edge_eda's loss hook expects verl's ppo_loss to call the policy loss with keywords")
        advantages = kwargs["advantages"]
        if advantages.shape != state.scale.shape:
            raise RuntimeError(f"advantages {tuple(advantages.shape)} and EDA's scale {tuple(state.scale.shape)} differ")
        kwargs["advantages"] = advantages * state.scale.to(advantages.dtype)
        loss, metrics = policy_loss_fn(**kwargs)
        share = gradient_share(loss, kwargs["log_prob"], state.entropy)
        if share is not None:
            state.metrics["entropy_grad_share"] = share
        active = state.active
        state.metrics["loss_scale_mean"] = float(state.scale.detach().amax(dim=-1)[active].mean()) if bool(active.any()) else 1.0
        return loss, metrics

    return policy_loss


def _make_get_policy_loss_fn(original: Callable) -> Callable:
    def get_policy_loss_fn(name, *args, **kwargs):
        # verl's own function, except inside a micro-batch of EDA's gradient form (advantages rescaled)
        policy_loss_fn = original(name, *args, **kwargs)
        state = _CURRENT.get()
        return policy_loss_fn if state is None else _make_policy_loss(policy_loss_fn, state)

    return get_policy_loss_fn


def patch_losses(module: Any) -> None:
    """Wrap ``ppo_loss`` and the policy-loss lookup it uses; rebind importers that already hold the original."""
    original = getattr(module.ppo_loss, "__wrapped__", module.ppo_loss)
    CORE.wrap(module, "ppo_loss", _make_ppo_loss)
    CORE.wrap(module, "get_policy_loss_fn", _make_get_policy_loss_fn)
    for name in _PPO_LOSS_IMPORTERS:
        importer = sys.modules.get(name)
        if importer is not None and getattr(importer, "ppo_loss", None) is original:
            CORE.wrap(importer, "ppo_loss", _make_ppo_loss)
