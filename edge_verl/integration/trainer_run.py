"""verl's trainer object and the plugin's run, in the trainer's process, for both of verl's trainers (``v1_trainer.py``,
``legacy_trainer.py``): the run attached to the trainer when it loads its checkpoint (``start_run``, checked against
its data), the run's state saved and restored with verl's checkpoints (``checkpoint.py`` holds the files), and what
both trainers' adapters compute for a step: the advantage statistics, each data source's, GEC's advantage-step
outputs and metrics, the grader's metrics, and the check that the actor workers' loss hook ran.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Optional

import torch

from edge_verl.algorithms import gec as gec_math
from edge_verl.algorithms import gec_loss
from edge_verl.algorithms.gec import GEC_LOSS_OPTIONS_KEY, GEC_ORIGIN_COLUMN
from edge_verl.config import keyed_seed, seed_global_generators
from edge_verl.estimators.base import batch_token_inputs
from edge_verl.integration.internals import ACTOR_METRIC_PREFIX
from edge_verl.integration.checkpoint import resumed_folder, restore_run_state, save_state
from edge_verl.integration.run import (
    ADVANTAGE_SCOPE, BY_SOURCE_SCOPE, GEC_ACTOR_SCOPE, GRADER_SCOPE, TrainingRun, plugin_in_use, prefixed, sampling_seed,
)
from edge_verl.integration.run_checks import check_gec_rows, check_run_config

# --- attached to verl's trainer -------------------------------------------------------------------------------

_RUN_ATTRIBUTE = "_edge_verl_run"


def agent_names(dataset: Any) -> Optional[list]:
    """The ``agent_name`` column of a verl RL dataset ([] without the column; None when unreadable)."""
    frame = getattr(dataset, "dataframe", None)
    if frame is None or not hasattr(frame, "column_names"):
        return None
    return list(frame["agent_name"]) if "agent_name" in frame.column_names else []

def start_run(trainer: Any) -> Optional[TrainingRun]:
    """The run's ``TrainingRun`` (None for a run that does not use the plugin), checked against its data;
    attached to the trainer. A seeded run also seeds the trainer process's global generators from its seed (verl
    shuffles its validation loader with torch's global generator)."""
    config = trainer.config
    run = check_run_config(config) if plugin_in_use(config.algorithm) else None
    if run is not None:
        agent = config.actor_rollout_ref.rollout.get("agent", None) or {}
        check_gec_rows(
            run.gec_enabled,
            agent.get("default_agent_loop", None),
            agent_names(getattr(trainer, "train_dataset", None)),
            agent_names(getattr(trainer, "val_dataset", None)),
        )
    if run is not None and run.seeding.enable:  # before the first rollout, validation and dataloader iteration
        seed_global_generators(keyed_seed("trainer", sampling_seed(config)))
    setattr(trainer, _RUN_ATTRIBUTE, run)
    return run

def run_of(trainer: Any) -> Optional[TrainingRun]:
    return getattr(trainer, _RUN_ATTRIBUTE) if hasattr(trainer, _RUN_ATTRIBUTE) else start_run(trainer)


_NOT_IN_WORKERS = "the edge_verl plugin did not run in the actor workers (check VERL_USE_EXTERNAL_PLUGINS and `edge-verl doctor`)."


def check_loss_hook_ran(run: Optional[TrainingRun], metric_keys: Iterable[str]) -> None:
    """Work a feature moves into the actor workers' loss (EDA's gradient form, GEC's masked / sft controls;
    ``TrainingRun.loss_metrics``) reports a metric there: an update without it means the plugin was not
    loaded in the workers (the paper's surrogate, or the detached form, would train silently)."""
    if run is None:
        return
    keys = set(metric_keys)
    for metric, option in run.loss_metrics:
        wanted = f"{ACTOR_METRIC_PREFIX}/{metric}"
        found = any(key.startswith(wanted) for key in keys) if wanted.endswith("/") else wanted in keys
        if not found:
            shown = wanted + "*" if wanted.endswith("/") else wanted
            raise RuntimeError(f"{option} but the actor update reported no {shown} metric: {_NOT_IN_WORKERS}")


# --- the run's state with verl's checkpoints (``checkpoint.py``) -------------------------------------------------


def wrap_load_checkpoint(original: Callable) -> Callable:
    def _load_checkpoint(self, *args, **kwargs):
        run = run_of(self)
        result = original(self, *args, **kwargs)
        folder = resumed_folder(self)
        if run is not None and folder is not None:
            restore_run_state(run, folder)
        return result

    return _load_checkpoint

def wrap_save_checkpoint(original: Callable) -> Callable:
    def _save_checkpoint(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        run = run_of(self)
        if run is not None and run.state is not None:
            save_state(os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"), run.state_dict())
        return result

    return _save_checkpoint


# --- what both trainers' adapters compute: advantage statistics, GEC's and the grader's metrics -------------------


def after_actor_update(run: Optional[TrainingRun], metrics: dict) -> None:
    """Both trainers' ``_update_actor``, on the update's metrics (verl's, reduced): stop a run whose loss
    hook did not run in the workers, and turn GEC's per-origin sums into their statistics in place."""
    check_loss_hook_ran(run, metrics)
    if run is not None and run.gec_enabled:
        finish_gec_actor_metrics(metrics)


def advantage_metrics(data: Any, step: Any) -> dict[str, float]:
    """``edge_verl/adv/*`` of a verl batch after its advantage step (any estimator; the step's uid grouping)."""
    from edge_verl.estimators.groups import response_valid
    from edge_verl.estimators.statistics import advantage_statistics, outcome_statistics

    batch = data.batch
    group_index, num_groups, is_pad = step.grouping(data.non_tensor_batch["uid"])
    advantages = batch["advantages"]
    scores = batch["token_level_rewards"].sum(dim=-1).to(torch.float32)
    device = advantages.device
    stats = advantage_statistics(advantages, batch["response_mask"], scores, group_index.to(device), num_groups, ~is_pad.to(device))
    valid = response_valid(batch["response_mask"], is_pad.to(device))
    stats.update(outcome_statistics(scores, group_index.to(device), num_groups, valid))
    return prefixed(stats, ADVANTAGE_SCOPE)


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
    from edge_verl.estimators.statistics import per_source_statistics

    sources = step.sources if step.sources is not None else data.non_tensor_batch.get("data_source")
    if sources is None:
        raise KeyError("algorithm.edge_metrics.per_source=True needs each row's data_source, which this batch does not carry")
    batch = data.batch
    group_index, num_groups, is_pad = step.grouping(data.non_tensor_batch["uid"])
    device = batch["response_mask"].device
    found = per_source_statistics(
        sources, batch["token_level_rewards"].sum(dim=-1).to(torch.float32), batch["response_mask"],
        batch["old_log_probs"] if "old_log_probs" in batch.keys() else None, group_index.to(device), num_groups, ~is_pad.to(device),
        per_response=step.per_response or None, estimator=step.run.entry if step.run is not None else None,
    )
    return {key: value for source, stats in found.items() for key, value in prefixed(stats, BY_SOURCE_SCOPE, source).items()}


def gec_advantage_outputs(
    run: TrainingRun, step: Any, infos: list, uids: Any, response_mask: torch.Tensor, advantages: torch.Tensor, scores: torch.Tensor,
    entropy: Optional[torch.Tensor] = None,
) -> None:
    """GEC at the advantage step (any estimator): ``gec_loss.advantage_step_outputs`` of the rows' records
    (``infos`` (B,): each row's ``extra_fields["edge_verl_gec"]``, None where GEC did not run; ``scores`` (B,)
    final rewards; ``entropy`` (B, T) the old policy's) into the step: each response token's origin and the
    injected tokens' treatment as loss column and options (the actor's loss, below), the statistics as
    sampled and as trained as ``edge_verl/gec/sampled/*`` and ``edge_verl/gec/final/*``."""
    outputs = gec_loss.advantage_step_outputs(
        infos, response_mask, advantages, scores, step.grouping(uids),
        norm_by_std=run.norm_adv_by_std, epsilon=run.std_epsilon, entropy=entropy,
    )
    step.loss_columns[GEC_ORIGIN_COLUMN] = outputs.origins
    options = run.gec
    step.loss_options[GEC_LOSS_OPTIONS_KEY] = {
        "injected_loss": options.injected_loss, "sft_coef": options.sft_coef, "injected_share": outputs.injected_share,
    }
    step.metrics.update(prefixed(outputs.sampled, "gec", "sampled"))
    step.metrics.update(prefixed(outputs.final, "gec", "final"))


def finish_gec_actor_metrics(metrics: dict) -> None:
    """The actor update's per-origin sums (``actor/gec/<origin>/_*``, reduced by verl) replaced in place by
    the shares and means they give (``gec_loss.finish_origin_metrics``)."""
    finished = gec_loss.finish_origin_metrics(metrics, GEC_ACTOR_SCOPE)
    for key in gec_loss.raw_keys(metrics, GEC_ACTOR_SCOPE):
        metrics.pop(key)
    metrics.update(finished)


def gec_metrics(infos, final_scores, uids, response_mask, old_log_probs) -> dict[str, float]:
    return prefixed(gec_math.summarize_corrections(infos, final_scores, uids, response_mask, old_log_probs))


def grader_metrics(outcomes: Iterable) -> dict[str, float]:
    from edge_verl.reward.score import grader_outcome_fractions

    return prefixed(grader_outcome_fractions(outcomes), GRADER_SCOPE)
