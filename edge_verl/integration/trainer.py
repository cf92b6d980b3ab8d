"""verl 0.9.1's v1 trainer (``verl.trainer.ppo.v1.trainer_base.PPOTrainer``) adapted to the plugin's
estimators, and the advantage-step helpers both trainers' adapters share.

verl calls a registered estimator with rewards, mask, uids and ``config.algorithm`` only; EDA also needs the
old policy's per-token entropy, GEPO the old log-probs, and both report metrics verl does not ask for.
``V1Adapter`` wraps the trainer's ``_compute_advantage`` (fetch those inputs from the TransferQueue once, run
verl's advantage code inside the step, put the step's metrics into verl's ``metrics`` and its loss columns
into the TransferQueue), ``_compute_metrics`` (GEC's and the grader's metrics from the rollout's
``extra_fields``), ``_update_actor``, the checkpoint methods and ``v1.utils.compute_advantage``. Each wrapper
returns verl's result untouched for a run that does not use the plugin.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

from edge_verl import names
from edge_verl.algorithms import gec
from edge_verl.integration import seeding
from edge_verl.integration.internals import CORE
from edge_verl.integration.run import (
    TrainingRun, advantage_step, check_loss_hook_ran, current_step, prefixed, run_of, wrap_load_checkpoint, wrap_save_checkpoint,
)


# --- what both trainers' adapters compute: advantage statistics, GEC's and the grader's metrics -------------------


def after_actor_update(run: Optional[TrainingRun], metrics: dict) -> None:
    """Both trainers' ``_update_actor``, on the update's metrics (verl's, reduced): stop a run whose loss
    hook did not run in the workers, and turn GEC's per-origin sums into their statistics in place."""
    check_loss_hook_ran(run, metrics)
    if run is not None and run.gec_enabled:
        finish_gec_actor_metrics(metrics)


def advantage_metrics(data: Any, step: Any) -> dict[str, float]:
    """``edge_verl/adv/*`` of a verl batch after its advantage step (any estimator; the step's uid grouping)."""
    from edge_verl.algorithms.group_stats import advantage_statistics, outcome_statistics, response_valid

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
    """The estimator's per-token inputs in a verl batch, under the plugin's names (``names.BATCH_KEYS``)."""
    batch = data.batch
    return {ours: batch[key] for key, ours in names.BATCH_KEYS.items() if key in batch.keys()}


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
    from edge_verl.algorithms.group_stats import per_source_statistics

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
    injected tokens' treatment as loss column and options (``integration/actor_loss.py``), the statistics as
    sampled and as trained as ``edge_verl/gec/sampled/*`` and ``edge_verl/gec/final/*``."""
    outputs = gec.advantage_step_outputs(
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
    finished = gec.finish_origin_metrics(metrics, names.GEC_ACTOR_SCOPE)
    for key in gec.raw_keys(metrics, names.GEC_ACTOR_SCOPE):
        metrics.pop(key)
    metrics.update(finished)


def gec_metrics(infos, final_scores, uids, response_mask, old_log_probs) -> dict[str, float]:
    return prefixed(gec.summarize_corrections(infos, final_scores, uids, response_mask, old_log_probs))


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
            ("PPOTrainer._build_replay_buffer", seeding.wrap_build_replay_buffer),
        ):
            CORE.wrap(module, path, make)

    @classmethod
    def install_utils(cls, module: Any) -> None:
        CORE.wrap(module, "compute_advantage", cls.utils_compute_advantage)
