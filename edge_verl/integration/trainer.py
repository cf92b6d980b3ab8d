"""verl 0.9.1's PPO step adapted to the plugin's estimators and GEC: the v1 trainer's adapter
(``verl.trainer.ppo.v1.trainer_base.PPOTrainer``), the advantage-step helpers both trainers' adapters share, and
the hook in the actor's loss (``verl.workers.utils.losses``) that the update they start runs in every worker.

verl calls a registered estimator with rewards, mask, uids and ``config.algorithm`` only; EDA also needs the
old policy's per-token entropy, GEPO the old log-probs, and both report metrics verl does not ask for.
``V1Adapter`` wraps the trainer's ``_compute_advantage`` (fetch those inputs from the TransferQueue once, run
verl's advantage code inside the step, put the step's metrics into verl's ``metrics`` and its loss columns
into the TransferQueue), ``_compute_metrics`` (GEC's and the grader's metrics from the rollout's
``extra_fields``), ``_update_actor``, the checkpoint methods and ``v1.utils.compute_advantage``. Each wrapper
returns verl's result untouched for a run that does not use the plugin.

The loss hook wraps ``losses.ppo_loss`` and the policy-loss lookup it uses, which every actor backend of verl
0.9.1 calls (FSDP and Megatron engines, both trainers). What it does is decided by the columns the batch carries
(written at the advantage step): an estimator's ``LossScale`` (EDA's gradient form) and GEC's token origins with
how the loss treats injected tokens; any other batch goes through verl's loss untouched.
"""

from __future__ import annotations

import functools
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

from edge_verl import names
from edge_verl.algorithms import gec as gec_math
from edge_verl.estimators.base import (
    ESTIMATORS, GRADIENT_SHARE_METRIC, LOSS_SCALE_METRIC, Estimator, batch_token_inputs, entropy_gradient_share, loss_gradients,
)
from edge_verl.integration.checkpoint import wrap_load_checkpoint, wrap_save_checkpoint
from edge_verl.integration.internals import CORE, LOG_RATIO_CLAMP, POLICY_LOSS_KEYWORDS
from edge_verl.integration.run import TrainingRun, advantage_step, check_loss_hook_ran, current_step, prefixed, run_of


# --- what both trainers' adapters compute: advantage statistics, GEC's and the grader's metrics -------------------


def after_actor_update(run: Optional[TrainingRun], metrics: dict) -> None:
    """Both trainers' ``_update_actor``, on the update's metrics (verl's, reduced): stop a run whose loss
    hook did not run in the workers, and turn GEC's per-origin sums into their statistics in place."""
    check_loss_hook_ran(run, metrics)
    if run is not None and run.gec_enabled:
        finish_gec_actor_metrics(metrics)


def advantage_metrics(data: Any, step: Any) -> dict[str, float]:
    """``edge_verl/adv/*`` of a verl batch after its advantage step (any estimator; the step's uid grouping)."""
    from edge_verl.estimators.base import advantage_statistics, outcome_statistics, response_valid

    batch = data.batch
    group_index, num_groups, is_pad = step.grouping(data.non_tensor_batch["uid"])
    advantages = batch["advantages"]
    scores = batch["token_level_rewards"].sum(dim=-1).to(torch.float32)
    device = advantages.device
    stats = advantage_statistics(advantages, batch["response_mask"], scores, group_index.to(device), num_groups, ~is_pad.to(device))
    valid = response_valid(batch["response_mask"], is_pad.to(device))
    stats.update(outcome_statistics(scores, group_index.to(device), num_groups, valid))
    return prefixed(stats, names.ADVANTAGE_SCOPE)


def step_inputs(data: Any) -> dict[str, torch.Tensor]:
    """The estimators' per-token inputs in a verl batch, under their names (``estimators.base.TOKEN_INPUTS``)."""
    return batch_token_inputs(data.batch)


def compute_advantage_in_step(original: Callable, step: Any, data: Any, args: tuple, kwargs: dict) -> Any:
    """verl's ``compute_advantage`` inside an open step, with the batch's inputs for the estimator and,
    when the run asks for them (``edge_metrics.advantage_stats``), the advantage statistics of whatever
    estimator ran (the plugin's estimators report their own variance and tied groups in any case)."""
    for key, value in step_inputs(data).items():
        step.inputs.setdefault(key, value)
    data = original(data, *args, **kwargs)
    if step.run is not None and step.run.advantage_stats:
        step.metrics.update(advantage_metrics(data, step))
    if step.run is not None and step.run.per_source:
        step.metrics.update(per_source_metrics(data, step))
    return data


def per_source_metrics(data: Any, step: Any) -> dict[str, float]:
    """``edge_verl/by_source/<data_source>/*`` of a verl batch after its advantage step: the responses'
    sources from the step (the v1 adapter reads them from the TransferQueue) or the batch (legacy)."""
    from edge_verl.estimators.base import per_source_statistics

    sources = step.sources if step.sources is not None else data.non_tensor_batch.get("data_source")
    if sources is None:
        raise KeyError("algorithm.edge_metrics.per_source=True needs each row's data_source, which this batch does not carry")
    batch = data.batch
    group_index, num_groups, is_pad = step.grouping(data.non_tensor_batch["uid"])
    device = batch["response_mask"].device
    found = per_source_statistics(
        sources, batch["token_level_rewards"].sum(dim=-1).to(torch.float32), batch["response_mask"],
        batch["old_log_probs"] if "old_log_probs" in batch.keys() else None, group_index.to(device), num_groups, ~is_pad.to(device),
        gepo=step.per_response or None,
    )
    return {key: value for source, stats in found.items() for key, value in prefixed(stats, names.BY_SOURCE_SCOPE, source).items()}


def gec_advantage_outputs(
    run: TrainingRun, step: Any, infos: list, uids: Any, response_mask: torch.Tensor, advantages: torch.Tensor, scores: torch.Tensor,
    entropy: Optional[torch.Tensor] = None,
) -> None:
    """GEC at the advantage step (any estimator): ``gec.advantage_step_outputs`` of the rows' records
    (``infos`` (B,): each row's ``extra_fields["edge_verl_gec"]``, None where GEC did not run; ``scores`` (B,)
    final rewards; ``entropy`` (B, T) the old policy's) into the step: each response token's origin and the
    injected tokens' treatment as loss column and options (the actor's loss, below), the statistics as
    sampled and as trained as ``edge_verl/gec/sampled/*`` and ``edge_verl/gec/final/*``."""
    outputs = gec_math.advantage_step_outputs(
        infos, response_mask, advantages, scores, step.grouping(uids),
        norm_by_std=run.norm_adv_by_std, epsilon=run.std_epsilon, entropy=entropy,
    )
    step.loss_columns[names.GEC_ORIGIN_COLUMN] = outputs.origins
    options = run.gec
    step.loss_options[names.GEC_LOSS_OPTIONS_KEY] = {
        "injected_loss": options.injected_loss, "sft_coef": options.sft_coef, "injected_share": outputs.injected_share,
    }
    step.metrics.update(prefixed(outputs.sampled, "gec", "sampled"))
    step.metrics.update(prefixed(outputs.final, "gec", "final"))


def finish_gec_actor_metrics(metrics: dict) -> None:
    """The actor update's per-origin sums (``actor/gec/<origin>/_*``, reduced by verl) replaced in place by
    the shares and means they give (``gec.finish_origin_metrics``)."""
    finished = gec_math.finish_origin_metrics(metrics, names.GEC_ACTOR_SCOPE)
    for key in gec_math.raw_keys(metrics, names.GEC_ACTOR_SCOPE):
        metrics.pop(key)
    metrics.update(finished)


def gec_metrics(infos, final_scores, uids, response_mask, old_log_probs) -> dict[str, float]:
    return prefixed(gec_math.summarize_corrections(infos, final_scores, uids, response_mask, old_log_probs))


def grader_metrics(outcomes: Iterable) -> dict[str, float]:
    from edge_verl.reward.score import grader_outcome_fractions

    return prefixed(grader_outcome_fractions(outcomes), names.GRADER_SCOPE)


# --- the v1 trainer ------------------------------------------------------------------------------------------

class V1Adapter:
    """``PPOTrainer``: every step's data lives in the TransferQueue (``tq``); ``_compute_advantage(batch,
    metrics)`` fetches what verl's advantage code reads and writes the advantages back."""

    def __init__(self, tq_module: Any):
        self.tq = tq_module

    def compute_advantage(self, original: Callable) -> Callable:
        def _compute_advantage(trainer, batch, metrics, *args, **kwargs):
            run = run_of(trainer)
            if run is None or not run.opens_advantage_step:
                return original(trainer, batch, metrics, *args, **kwargs)
            entropy = response_mask = sources = None
            if run.needs_entropy:
                fetched = self.tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["entropy", "response_mask"])
                response_mask = fetched["response_mask"]
                entropy = fetched.to_padded_tensor()["entropy"]
            if run.per_source:  # verl's advantage batch holds uid, not data_source
                sources = self.tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["data_source"]).pop("data_source").tolist()
            with advantage_step(run, entropy=entropy) as step:
                step.sources = sources
                result = original(trainer, batch, metrics, *args, **kwargs)
            if run.gec_enabled:
                fields = ["extra_fields", "uid", "response_mask", "advantages", "rm_scores"]
                fields += [] if entropy is not None else ["entropy"]  # the sampled tokens' entropy (gec/sampled/entropy)
                data = self.tq.kv_batch_get(keys=result.keys, partition_id=result.partition_id, select_fields=fields)
                extras = data.pop("extra_fields").tolist()
                uids = np.array([str(uid) for uid in data.pop("uid").tolist()], dtype=object)
                response_mask = data["response_mask"] if response_mask is None else response_mask
                padded = data.to_padded_tensor()
                infos = [extra.get(names.GEC_INFO_KEY) if isinstance(extra, dict) else None for extra in extras]
                scores = padded["rm_scores"].sum(dim=-1)
                gec_advantage_outputs(run, step, infos, uids, padded["response_mask"], padded["advantages"], scores,
                                      entropy=entropy if entropy is not None else padded["entropy"])
            metrics.update(step.metrics)
            return self.put_loss_inputs(result, step, response_mask) if step.loss_columns else result

        return _compute_advantage

    def put_loss_inputs(self, batch: Any, step: Any, response_mask: Any) -> Any:
        """The estimator's loss columns into the TransferQueue next to ``advantages`` (nested the same way,
        on the rows' response lengths), its loss options into the batch's extra_info (which reaches the
        actor update as non-tensor data)."""
        from tensordict import TensorDict
        from verl.workers.utils.padding import response_to_nested

        fields = TensorDict({key: response_to_nested(column, response_mask) for key, column in step.loss_columns.items()}, batch_size=len(batch.keys))
        stored = self.tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
        stored.extra_info = {**(batch.extra_info or {}), **(stored.extra_info or {}), **step.loss_options}
        return stored

    @staticmethod
    def utils_compute_advantage(original: Callable) -> Callable:
        """``v1.utils.compute_advantage``: called by ``_compute_advantage``, inside the step it opened (any
        other caller gets verl's function as it is)."""

        def compute_advantage(data, *args, **kwargs):
            step = current_step()
            if step is None:
                return original(data, *args, **kwargs)
            return compute_advantage_in_step(original, step, data, args, kwargs)

        return compute_advantage

    def compute_metrics(self, original: Callable) -> Callable:
        def _compute_metrics(trainer, batch, metrics, *args, **kwargs):
            result = original(trainer, batch, metrics, *args, **kwargs)
            run = run_of(trainer)
            if run is None or not (run.gec_enabled or run.grader_metrics):
                return result
            keys = [key for key, tag in zip(batch.keys, batch.tags) if not tag.get("is_padding", False)]
            fields = ["extra_fields", "uid", "rm_scores", "response_mask", "old_log_probs"] if run.gec_enabled else ["extra_fields"]
            data = self.tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
            extras = [extra if isinstance(extra, dict) else {} for extra in data.pop("extra_fields").tolist()]
            if run.grader_metrics:
                metrics.update(grader_metrics((extra.get(names.REWARD_EXTRA_INFO_FIELD) or {}).get(names.REWARD_GRADER_KEY) for extra in extras))
            if run.gec_enabled:
                uids = [str(uid) for uid in data.pop("uid").tolist()]
                padded = data.to_padded_tensor()
                infos = [extra.get(names.GEC_INFO_KEY) for extra in extras]
                metrics.update(gec_metrics(infos, padded["rm_scores"].sum(dim=-1), uids, padded["response_mask"], padded["old_log_probs"]))
            return result

        return _compute_metrics

    @staticmethod
    def update_actor(original: Callable) -> Callable:
        def _update_actor(self, batch, metrics, *args, **kwargs):
            result = original(self, batch, metrics, *args, **kwargs)
            after_actor_update(run_of(self), metrics)
            return result

        return _update_actor

    @classmethod
    def install(cls, module: Any) -> None:
        adapter = cls(module.tq)
        for path, make in (
            ("PPOTrainer._compute_advantage", adapter.compute_advantage),
            ("PPOTrainer._compute_metrics", adapter.compute_metrics),
            ("PPOTrainer._update_actor", cls.update_actor),
            ("PPOTrainer._load_checkpoint", wrap_load_checkpoint),
            ("PPOTrainer._save_checkpoint", wrap_save_checkpoint),
        ):
            CORE.wrap(module, path, make)

    @classmethod
    def install_utils(cls, module: Any) -> None:
        CORE.wrap(module, "compute_advantage", cls.utils_compute_advantage)


# === the actor's loss (in every actor worker) ==================================================================

# An estimator with a ``LossScale`` whose columns the micro-batch carries (EDA's gradient form): per micro-batch,
# the entry's factor from those columns and the current policy's entropy (``model_output["entropy"]``, which needs
# ``actor.calculate_entropy=True``); verl's own policy loss (any ``policy_loss.loss_mode``, its clipping and
# ``loss_agg_mode`` unchanged) then receives the advantages times that factor. Diagnostics:
# ``actor/<estimator>/entropy_grad_share`` (one ``autograd.grad`` over the loss's elementwise ops, no second
# backward through the model) and ``actor/<estimator>/loss_scale_mean``.
#
# GEC: each response token's origin (``names.GEC_ORIGIN_COLUMN``) and, batch-level, how the loss treats injected
# tokens (``names.GEC_LOSS_OPTIONS_KEY``: ``edge_gec.injected_loss`` surrogate | masked | sft, ``sft_coef``, and
# ``injected_share``, which turns the mini-batch's token count into its injected-token count for the SFT term's
# token mean). The surrogate receives the advantages and log-probs of ``gec.treat_injected``, the SFT term is added
# to verl's loss, and the per-origin sums (``gec.origin_sums``) go into ``actor/gec/<origin>/...``, turned into
# shares and means once verl has reduced them (``gec.finish_origin_metrics``).

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
    sums: dict[str, float] = field(default_factory=dict)  # gec_math.origin_sums (+ the SFT term's NLL sum)
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
    return _scaling_estimator(keys) is not None or names.GEC_ORIGIN_COLUMN in keys


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
        injected = gec_math.not_sampled(gec.origins.to(entropy.device))
        entropy = torch.where(injected, entropy.detach(), entropy)
    options = _options(data, loss.options_key, loss.columns[0], f"the {entry.name} estimator")
    factor, active = loss.factor(dict(columns.items()), options, entropy)
    mask = columns["response_mask"].to(factor.dtype)
    return _LossScale(entry.name, factor[:, None] * mask, entropy, active, {})


def _gec_tokens(data: Any) -> _GecTokens:
    columns = data.select(names.GEC_ORIGIN_COLUMN).to_padded_tensor()
    options = _options(data, names.GEC_LOSS_OPTIONS_KEY, names.GEC_ORIGIN_COLUMN, "the plugin's GEC advantage step")
    return _GecTokens(
        origins=columns[names.GEC_ORIGIN_COLUMN].round().to(torch.int64),
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
        gec = _gec_tokens(data) if names.GEC_ORIGIN_COLUMN in keys else None
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
            for key, value in state.gec.sums.items():  # verl's trainer prefixes them with names.ACTOR_METRIC_PREFIX
                aggregation = AggregationType.MAX if key.endswith(gec_math.RAW_MAX) else AggregationType.MEAN
                metrics[f"{names.GEC_LOSS_SCOPE}/{key}"] = Metric(value=value, aggregation=aggregation)
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
    """GEC's per-origin sums of one micro-batch (``gec.origin_sums``) with verl's ratio (the log-ratio clamped to
    ``LOG_RATIO_CLAMP`` before exp, as verl's loss) and, with verl's vanilla clipping (``clip``; None for any other
    loss mode), the tokens it clips."""
    with torch.no_grad():
        log_ratio = (log_prob.detach().float() - old_log_prob.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = log_ratio.exp()
        clipped = vanilla_clipped(ratio, advantages.detach().float(), clip) if clip is not None else None
    return gec_math.origin_sums(origins, response_mask, old_log_prob, ratio, clipped, grad)


def _sft_term(tokens: _GecTokens, log_prob: torch.Tensor, injected: torch.Tensor, config: Any) -> torch.Tensor:
    """sft_coef x the token-mean NLL of the injected tokens, normalised like verl's token-mean loss: the
    mini-batch's (global) token count times the step's injected share (exact with one mini-batch)."""
    info = getattr(config, "global_batch_info", {}) or {}
    batch_tokens = info.get("batch_num_tokens")
    num_tokens = None if batch_tokens is None else float(batch_tokens) * tokens.injected_share
    nll = gec_math.injected_nll(log_prob, injected, num_tokens, int(info.get("dp_size", 1) or 1))
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
            injected = gec_math.not_sampled(gec.origins) & kwargs["response_mask"].to(torch.bool)
            kwargs["log_prob"], advantages = gec_math.treat_injected(log_prob, advantages, injected, gec.injected_loss)
        kwargs["advantages"] = advantages
        loss, metrics = policy_loss_fn(**kwargs)
        grads = loss_gradients(loss, log_prob, scaled.entropy if scaled is not None else None)
        if scaled is not None:
            if grads is not None:
                scaled.metrics[GRADIENT_SHARE_METRIC] = entropy_gradient_share(*grads)
            active = scaled.active
            scaled.metrics[LOSS_SCALE_METRIC] = float(scaled.scale.detach().amax(dim=-1)[active].mean()) if bool(active.any()) else 1.0
        if gec is not None:
            clip = _vanilla_clip(kwargs["config"]) if loss_mode == names.VANILLA_POLICY_LOSS else None
            grad = None if grads is None else grads[0] if grads[0] is not None else torch.zeros_like(log_prob)
            gec.sums = origin_sums(gec.origins, kwargs["response_mask"], kwargs["old_log_prob"], log_prob, advantages, clip, grad)
            if gec.injected_loss == "sft":
                gec.sft_term = _sft_term(gec, log_prob, injected, kwargs["config"])
                gec.sums[gec_math.NLL_SUM] = float(-(log_prob.detach() * injected).sum())
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
