"""The hook in the actor's loss, in every actor worker (FSDP and Megatron engines, both trainers): it wraps
``losses.ppo_loss`` and the policy-loss lookup it uses. What it does is decided by the columns the micro-batch carries
(written at the advantage step): an estimator's ``LossScale`` (EDA's gradient form) and GEC's token origins with how
the loss treats injected tokens; any other batch goes through verl's loss untouched.

An estimator with a ``LossScale`` whose columns the micro-batch carries (EDA's gradient form): per micro-batch,
the entry's factor from those columns and the current policy's entropy (``model_output["entropy"]``, which needs
``actor.calculate_entropy=True``); verl's own policy loss (any ``policy_loss.loss_mode``, its clipping and
``loss_agg_mode`` unchanged) then receives the advantages times that factor. Diagnostics:
``actor/<estimator>/entropy_grad_share`` (one ``autograd.grad`` over the loss's elementwise ops, no second
backward through the model) and ``actor/<estimator>/loss_scale_mean``.

GEC: each response token's origin (``GEC_ORIGIN_COLUMN``) and, batch-level, how the loss treats injected
tokens (``GEC_LOSS_OPTIONS_KEY``: ``edge_gec.injected_loss`` surrogate | masked | sft, ``sft_coef``, and
``injected_share``, which turns the mini-batch's token count into its injected-token count for the SFT term's
token mean). The surrogate receives the advantages and log-probs of ``gec_loss.treat_injected``, the SFT term is added
to verl's loss, and the per-origin sums (``gec_loss.origin_sums``) go into ``actor/gec/<origin>/...``, turned into
shares and means once verl has reduced them (``gec_loss.finish_origin_metrics``).
"""

from __future__ import annotations

import functools
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from edge_verl.algorithms import gec_loss
from edge_verl.algorithms.gec import GEC_LOSS_OPTIONS_KEY, GEC_ORIGIN_COLUMN
from edge_verl.estimators.base import (
    ESTIMATORS, GRADIENT_SHARE_METRIC, LOSS_SCALE_METRIC, Estimator, entropy_gradient_share, loss_gradients,
)
from edge_verl.integration.internals import CORE, LOG_RATIO_CLAMP, POLICY_LOSS_KEYWORDS, VANILLA_POLICY_LOSS
from edge_verl.integration.run import GEC_LOSS_SCOPE

# The modules that bind ``ppo_loss`` by name at import (``from verl.workers.utils.losses import ppo_loss``),
# when imported before ``losses`` finished (each has its entry in ``internals.CORE``).
_PPO_LOSS_IMPORTERS = ("verl.workers.engine_workers", "verl.trainer.distillation.losses")


@dataclass
class _LossScale:
    """An estimator's factor for the policy loss of one micro-batch (its ``estimators.LossScale``), and the
    tensors its diagnostics need; ``scope``: the estimator's name, its metrics' scope."""

    scope: str
    scale: torch.Tensor  # (B, T) s_i on each row's tokens
    entropy: torch.Tensor  # (B, T) the current entropy the scale was computed from (with gradient)
    active: torch.Tensor  # (B,) rows whose advantage follows the entropy
    metrics: dict[str, float]


@dataclass
class _GecTokens:
    """GEC's per-token origins in one micro-batch and how the loss treats the injected ones."""

    origins: torch.Tensor  # (B, T) int64 codes of gec.ORIGINS
    injected_loss: str
    sft_coef: float
    injected_share: float  # the step's injected tokens / its response tokens
    sums: dict[str, float] = field(default_factory=dict)  # gec_loss.origin_sums (+ the SFT term's NLL sum)
    sft_term: Optional[torch.Tensor] = None  # added to verl's loss after the surrogate


@dataclass
class _MicroBatch:
    """What the hook set up for one micro-batch: an estimator's loss scale (EDA's gradient form), GEC's tokens, or both."""

    scaled: Optional[_LossScale] = None
    gec: Optional[_GecTokens] = None


_CURRENT: ContextVar[Optional[_MicroBatch]] = ContextVar("edge_verl_actor_loss", default=None)


def _scaling_estimator(keys: Any) -> Optional[Estimator]:
    """The estimator whose ``LossScale`` columns the micro-batch carries (at most one runs per step)."""
    return next((entry for entry in ESTIMATORS.values() if entry.loss is not None and entry.loss.columns[0] in keys), None)


def is_active(data: Any) -> bool:
    """The micro-batch asks the hook for something: an estimator's loss scale or GEC's token treatment."""
    keys = data.keys()
    return _scaling_estimator(keys) is not None or GEC_ORIGIN_COLUMN in keys


def _options(data: Any, key: str, column: str, writer: str) -> dict:
    from verl.utils import tensordict_utils as tu

    options = tu.get_non_tensor_data(data=data, key=key, default=None)
    if options is None:
        raise RuntimeError(
            f"The batch carries {column} but not {key}: {writer} writes both; was the batch built by another "
            "version of edge_verl?"
        )
    return dict(options)


def _loss_scale(entry: Estimator, model_output: Any, data: Any, gec: Optional["_GecTokens"]) -> _LossScale:
    """The estimator's factor from the current entropy (``entry.loss.factor``); with GEC's masked / sft
    control, the injected tokens' entropy enters it as a constant (its value kept, its gradient stopped), so
    that no gradient reaches them through the entropy path either."""
    from verl.workers.utils.padding import no_padding_2_padding

    loss = entry.loss
    entropy = model_output.get("entropy", None)
    if entropy is None:
        raise RuntimeError(
            f"The {entry.name} estimator's loss scale needs the current policy's entropy in the actor loss: "
            "set actor_rollout_ref.actor.calculate_entropy=True."
        )
    entropy = no_padding_2_padding(entropy, data)
    columns = data.select("response_mask", *loss.columns).to_padded_tensor()
    if gec is not None and gec.injected_loss != "surrogate":
        injected = gec_loss.not_sampled(gec.origins.to(entropy.device))
        entropy = torch.where(injected, entropy.detach(), entropy)
    options = _options(data, loss.options_key, loss.columns[0], f"the {entry.name} estimator")
    factor, active = loss.factor(dict(columns.items()), options, entropy)
    mask = columns["response_mask"].to(factor.dtype)
    return _LossScale(entry.name, factor[:, None] * mask, entropy, active, {})


def _gec_tokens(data: Any) -> _GecTokens:
    columns = data.select(GEC_ORIGIN_COLUMN).to_padded_tensor()
    options = _options(data, GEC_LOSS_OPTIONS_KEY, GEC_ORIGIN_COLUMN, "the plugin's GEC advantage step")
    return _GecTokens(
        origins=columns[GEC_ORIGIN_COLUMN].round().to(torch.int64),
        injected_loss=str(options["injected_loss"]),
        sft_coef=float(options["sft_coef"]),
        injected_share=float(options["injected_share"]),
    )


def _make_ppo_loss(original: Callable) -> Callable:
    def ppo_loss(config, model_output, data, dp_group=None):
        if not is_active(data):
            return original(config, model_output, data, dp_group)
        from verl.utils.metric import AggregationType, Metric

        keys = data.keys()
        gec = _gec_tokens(data) if GEC_ORIGIN_COLUMN in keys else None
        scaling = _scaling_estimator(keys)
        scaled = _loss_scale(scaling, model_output, data, gec) if scaling is not None else None
        state = _MicroBatch(scaled=scaled, gec=gec)
        token = _CURRENT.set(state)
        try:
            loss, metrics = original(config, model_output, data, dp_group)
        finally:
            _CURRENT.reset(token)
        if state.scaled is not None:
            for key, value in state.scaled.metrics.items():
                metrics[f"{state.scaled.scope}/{key}"] = Metric(value=value, aggregation=AggregationType.MEAN)
        if state.gec is not None:
            if state.gec.sft_term is not None:
                loss = loss + state.gec.sft_term
            for key, value in state.gec.sums.items():  # verl's trainer prefixes them with ACTOR_METRIC_PREFIX
                aggregation = AggregationType.MAX if key.endswith(gec_loss.RAW_MAX) else AggregationType.MEAN
                metrics[f"{GEC_LOSS_SCOPE}/{key}"] = Metric(value=value, aggregation=aggregation)
        return loss, metrics

    return ppo_loss


@dataclass(frozen=True)
class VanillaClip:
    """verl's vanilla PPO clipping (``compute_policy_loss_vanilla``): the ratio range [1 - low, 1 + high]
    and, for negative advantages, the dual clip's bound ``ratio_c`` (verl's ``clip_ratio_c``)."""

    low: float
    high: float
    ratio_c: float


def _vanilla_clip(config: Any) -> VanillaClip:
    """verl's vanilla PPO clipping from the actor config (``compute_policy_loss_vanilla``): clip_ratio_low /
    _high, else clip_ratio; the dual clip's clip_ratio_c."""
    clip = config.clip_ratio
    low, high = getattr(config, "clip_ratio_low", None), getattr(config, "clip_ratio_high", None)
    return VanillaClip(float(clip if low is None else low), float(clip if high is None else high), float(config.clip_ratio_c))


def vanilla_clipped(ratio: torch.Tensor, advantages: torch.Tensor, clip: VanillaClip) -> torch.Tensor:
    """(B, T) bool: the tokens whose gradient verl's vanilla PPO loss clips away, by verl's own comparisons:
    the clipped term wins (its ``pg_clipfrac``: A > 0 and ratio > 1 + high, or A < 0 and ratio < 1 - low) or,
    for A < 0, the dual clip's bound -A * ratio_c caps the loss (its ``pg_clipfrac_lower``: ratio > ratio_c).
    The two sets are disjoint, so a batch's fraction is the sum of verl's two fractions."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip.low, 1 + clip.high)
    surrogate = torch.maximum(unclipped, clipped)
    return (clipped > unclipped) | ((advantages < 0) & (surrogate > -advantages * clip.ratio_c))


def origin_sums(
    origins: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip: Optional[VanillaClip],
    grad: Optional[torch.Tensor] = None,
) -> dict[str, float]:
    """GEC's per-origin sums of one micro-batch (``gec_loss.origin_sums``) with verl's ratio (the log-ratio clamped to
    ``LOG_RATIO_CLAMP`` before exp, as verl's loss) and, with verl's vanilla clipping (``clip``; None for any other
    loss mode), the tokens it clips."""
    with torch.no_grad():
        log_ratio = (log_prob.detach().float() - old_log_prob.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = log_ratio.exp()
        clipped = vanilla_clipped(ratio, advantages.detach().float(), clip) if clip is not None else None
    return gec_loss.origin_sums(origins, response_mask, old_log_prob, ratio, clipped, grad)


def _sft_term(tokens: _GecTokens, log_prob: torch.Tensor, injected: torch.Tensor, config: Any) -> torch.Tensor:
    """sft_coef x the token-mean NLL of the injected tokens, normalised like verl's token-mean loss: the
    mini-batch's (global) token count times the step's injected share (exact with one mini-batch)."""
    info = getattr(config, "global_batch_info", {}) or {}
    batch_tokens = info.get("batch_num_tokens")
    num_tokens = None if batch_tokens is None else float(batch_tokens) * tokens.injected_share
    nll = gec_loss.injected_nll(log_prob, injected, num_tokens, int(info.get("dp_size", 1) or 1))
    return tokens.sft_coef * nll


def _make_policy_loss(policy_loss_fn: Callable, state: _MicroBatch, loss_mode: str) -> Callable:
    @functools.wraps(policy_loss_fn)
    def policy_loss(*args, **kwargs):
        if args or any(keyword not in kwargs for keyword in POLICY_LOSS_KEYWORDS):
            raise RuntimeError(
                f"edge_verl's loss hook expects verl's ppo_loss to call the policy loss with the keywords {POLICY_LOSS_KEYWORDS}"
            )
        advantages, log_prob = kwargs["advantages"], kwargs["log_prob"]
        scaled, gec = state.scaled, state.gec
        if scaled is not None:
            if advantages.shape != scaled.scale.shape:
                raise RuntimeError(f"advantages {tuple(advantages.shape)} and the {scaled.scope} loss scale {tuple(scaled.scale.shape)} differ")
            advantages = advantages * scaled.scale.to(advantages.dtype)
        injected = None
        if gec is not None:
            if gec.origins.shape != advantages.shape:
                raise RuntimeError(f"advantages {tuple(advantages.shape)} and GEC's origins {tuple(gec.origins.shape)} differ")
            injected = gec_loss.not_sampled(gec.origins) & kwargs["response_mask"].to(torch.bool)
            kwargs["log_prob"], advantages = gec_loss.treat_injected(log_prob, advantages, injected, gec.injected_loss)
        kwargs["advantages"] = advantages
        loss, metrics = policy_loss_fn(**kwargs)
        grads = loss_gradients(loss, log_prob, scaled.entropy if scaled is not None else None)
        if scaled is not None:
            if grads is not None:
                scaled.metrics[GRADIENT_SHARE_METRIC] = entropy_gradient_share(*grads)
            active = scaled.active
            scaled.metrics[LOSS_SCALE_METRIC] = float(scaled.scale.detach().amax(dim=-1)[active].mean()) if bool(active.any()) else 1.0
        if gec is not None:
            clip = _vanilla_clip(kwargs["config"]) if loss_mode == VANILLA_POLICY_LOSS else None
            grad = None if grads is None else grads[0] if grads[0] is not None else torch.zeros_like(log_prob)
            gec.sums = origin_sums(gec.origins, kwargs["response_mask"], kwargs["old_log_prob"], log_prob, advantages, clip, grad)
            if gec.injected_loss == "sft":
                gec.sft_term = _sft_term(gec, log_prob, injected, kwargs["config"])
                gec.sums[gec_loss.NLL_SUM] = float(-(log_prob.detach() * injected).sum())
        return loss, metrics

    return policy_loss


def _make_get_policy_loss_fn(original: Callable) -> Callable:
    def get_policy_loss_fn(name, *args, **kwargs):
        # verl's own function, except inside a micro-batch the hook set up (EDA's scale, GEC's tokens);
        # ``name`` is the loss mode verl runs (``policy_loss.loss_mode``)
        policy_loss_fn = original(name, *args, **kwargs)
        state = _CURRENT.get()
        return policy_loss_fn if state is None else _make_policy_loss(policy_loss_fn, state, str(name))

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
