"""The trainer adapters: one per verl 0.9.1 trainer; each wrapper unpacks, calls one plugin function, packs.

verl calls a registered estimator with rewards, mask, uids and ``config.algorithm`` only; EDA also needs
the old policy's per-token entropy and GEPO the old log-probs, and both report metrics verl does not ask
for. Each adapter gathers those inputs once, opens the step's ``AdvantageStep`` (``integration/run.py``)
around verl's own advantage code, and hands the step's metrics and loss columns back to verl as values:

- ``LegacyAdapter`` (``RayPPOTrainer``, ``trainer.use_v1=False``): ``_compute_old_log_prob`` keeps a copy of
  ``entropys`` (which verl pops); ``ray_trainer.compute_advantage`` (called by ``fit``) opens the step with
  the batch's ``old_log_probs`` and that copy, and returns the loss columns as batch columns and the
  metrics in ``meta_info``, which ``compute_data_metrics(batch)`` adds to the step's metrics with GEC's and
  the grader's; ``AgentLoopManager.generate_sequences`` numbers each response within its uid group before
  verl splits the batch (GEC's seeded decisions then do not depend on the split); ``fit`` makes the run
  current for the two module-level functions, which have no reference to the trainer.
- ``V1Adapter`` (``PPOTrainer``): ``_compute_advantage(batch, metrics)`` fetches the entropy from the
  TransferQueue when the estimator needs it, opens the step, and puts the metrics into verl's ``metrics``
  and the loss columns into the TransferQueue; inside it, ``v1.utils.compute_advantage`` adds the
  batch's ``old_log_probs`` and the advantage statistics; ``_compute_metrics``: GEC's and the grader's
  metrics from the rollout's ``extra_fields``.
- both: ``_load_checkpoint`` creates the run's ``TrainingRun`` (before the first rollout) and restores
  GEPO's thresholds on resume, ``_save_checkpoint`` saves them, ``_update_actor`` stops a run whose actor
  loss hook (``integration/actor_loss.py``) did not run; ``validate_config`` (verl's ``main``, before
  ``ray.init``) runs the plugin's preflight.
Every wrapper is gated on the run using the plugin (``run.plugin_in_use``): a plain verl run has no
``TrainingRun``, and each wrapper then calls verl's function and returns its result untouched (no extra
TransferQueue call, no extra column, metric or file). Every patched attribute is in
``internals.CORE``; ``HOOKS`` says which verl module's import installs which adapter.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

from edge_verl.integration import actor_loss, estimators
from edge_verl import names
from edge_verl.features import ESTIMATORS, GEC
from edge_verl.integration.internals import CORE
from edge_verl.integration.preflight import check_gec_rows, check_run_config, preflight_or_exit
from edge_verl.integration.run import TrainingRun, active_run, advantage_step, current_run, current_step, plugin_in_use, prefixed
from edge_verl.integration.state import restore_run_state, save_state

_RUN_ATTRIBUTE = "_edge_verl_run"


# --- the run (both trainers): created before the first rollout ------------------------------------------------


def agent_names(dataset: Any) -> Optional[list]:
    """The ``agent_name`` column of a verl RL dataset ([] without the column; None when unreadable)."""
    frame = getattr(dataset, "dataframe", None)
    if frame is None or not hasattr(frame, "column_names"):
        return None
    return list(frame["agent_name"]) if "agent_name" in frame.column_names else []


def start_run(trainer: Any) -> Optional[TrainingRun]:
    """The run's ``TrainingRun`` (None for a run that does not use the plugin), checked against its data;
    attached to the trainer."""
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
    setattr(trainer, _RUN_ATTRIBUTE, run)
    return run


def run_of(trainer: Any) -> Optional[TrainingRun]:
    return getattr(trainer, _RUN_ATTRIBUTE) if hasattr(trainer, _RUN_ATTRIBUTE) else start_run(trainer)


def _resumed_folder(trainer: Any) -> Optional[str]:
    if trainer.global_steps <= 0:
        return None
    config = trainer.config.trainer
    if config.resume_mode == "resume_path":
        folder = config.resume_from_path
    else:
        folder = os.path.join(config.default_local_dir, f"global_step_{trainer.global_steps}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def _make_load_checkpoint(original: Callable) -> Callable:
    def _load_checkpoint(self, *args, **kwargs):
        run = run_of(self)
        result = original(self, *args, **kwargs)
        folder = _resumed_folder(self)
        if run is not None and folder is not None:
            restore_run_state(run, folder)
        return result

    return _load_checkpoint


def _make_save_checkpoint(original: Callable) -> Callable:
    def _save_checkpoint(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        run = run_of(self)
        if run is not None and run.state is not None:
            save_state(os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"), run.state_dict())
        return result

    return _save_checkpoint


_NOT_IN_WORKERS = "the edge_verl plugin did not run in the actor workers (check VERL_USE_EXTERNAL_PLUGINS and `edge-verl doctor`)."


def check_loss_hook_ran(run: Optional[TrainingRun], metric_keys: Iterable[str]) -> None:
    """Work a feature moves into the actor workers' loss (EDA's gradient form, GEC's masked / sft controls;
    ``TrainingRun.loss_metrics``) reports a metric there: an update without it means the plugin was not
    loaded in the workers (the paper's surrogate, or the detached form, would train silently)."""
    if run is None:
        return
    keys = set(metric_keys)
    for metric, option in run.loss_metrics:
        wanted = f"{names.ACTOR_METRIC_PREFIX}/{metric}"
        found = any(key.startswith(wanted) for key in keys) if wanted.endswith("/") else wanted in keys
        if not found:
            shown = wanted + "*" if wanted.endswith("/") else wanted
            raise RuntimeError(f"{option} but the actor update reported no {shown} metric: {_NOT_IN_WORKERS}")


def after_actor_update(run: Optional[TrainingRun], metrics: dict) -> None:
    """Both trainers' ``_update_actor``, on the update's metrics (verl's, reduced): stop a run whose loss
    hook did not run in the workers, and turn GEC's per-origin sums into their statistics in place."""
    check_loss_hook_ran(run, metrics)
    if run is not None and run.gec_enabled:
        finish_gec_actor_metrics(metrics)


# --- what both adapters compute: advantage statistics, GEC's and the grader's metrics ------------------------


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
    """The estimator's per-token inputs in a verl batch, under the plugin's names (``names.BATCH_KEYS``);
    the legacy trainer's entropy copy is taken out of the batch."""
    batch = data.batch
    inputs = {ours: batch[key] for key, ours in names.BATCH_KEYS.items() if key in batch.keys()}
    if names.ENTROPY_COPY_KEY in batch.keys():
        inputs["entropy"] = batch.pop(names.ENTROPY_COPY_KEY)
    return inputs


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
    """GEC at the advantage step (any estimator): ``gec_loss.advantage_step_outputs`` of the rows' records
    (``infos`` (B,): each row's ``extra_fields["edge_verl_gec"]``, None where GEC did not run; ``scores`` (B,)
    final rewards; ``entropy`` (B, T) the old policy's) into the step: each response token's origin and the
    injected tokens' treatment as loss column and options (``integration/actor_loss.py``), the statistics as
    sampled and as trained as ``edge_verl/gec/sampled/*`` and ``edge_verl/gec/final/*``."""
    outputs = GEC.step_outputs(
        infos, response_mask, advantages, scores, step.grouping(uids),
        norm_by_std=run.norm_adv_by_std, epsilon=run.std_epsilon, entropy=entropy,
    )
    step.loss_columns[GEC.loss_column] = outputs.origins
    step.loss_options.update(GEC.loss_options(run.gec, outputs.injected_share))
    step.metrics.update(prefixed(outputs.sampled, "gec", "sampled"))
    step.metrics.update(prefixed(outputs.final, "gec", "final"))


def finish_gec_actor_metrics(metrics: dict) -> None:
    """The actor update's per-origin sums (``actor/gec/<origin>/_*``, reduced by verl) replaced in place by
    the shares and means they give (``gec_loss.finish_origin_metrics``)."""
    finished = GEC.finish_actor_metrics(metrics, names.GEC_ACTOR_SCOPE)
    for key in GEC.raw_actor_keys(metrics, names.GEC_ACTOR_SCOPE):
        metrics.pop(key)
    metrics.update(finished)


def gec_metrics(infos, final_scores, uids, response_mask, old_log_probs) -> dict[str, float]:
    from edge_verl.algorithms.gec import summarize_corrections

    return prefixed(summarize_corrections(infos, final_scores, uids, response_mask, old_log_probs))


def grader_metrics(outcomes: Iterable) -> dict[str, float]:
    from edge_verl.reward.score import grader_outcome_fractions

    return prefixed(grader_outcome_fractions(outcomes), names.GRADER_SCOPE)


def sample_index_within_group(uids: Iterable) -> np.ndarray:
    """(B,) index of each row among the rows of its uid so far, in batch order: 0, 1, ... per group."""
    seen: dict[str, int] = {}
    index = []
    for uid in uids:
        index.append(seen.get(uid, 0))
        seen[uid] = index[-1] + 1
    return np.asarray(index, dtype=np.int64)


# --- the legacy trainer: verl.trainer.ppo.ray_trainer.RayPPOTrainer --------------------------------------------


class LegacyAdapter:
    """``RayPPOTrainer.fit``: old log-prob pass -> ``compute_advantage(batch)`` -> ``_update_actor(batch)`` ->
    ``compute_data_metrics(batch=batch)``; the batch (a DataProto) carries everything between them."""

    @staticmethod
    def compute_old_log_prob(original: Callable) -> Callable:
        def _compute_old_log_prob(self, batch, *args, **kwargs):
            output = original(self, batch, *args, **kwargs)
            old_log_prob = output[0] if isinstance(output, tuple) else output
            run = run_of(self)
            # EDA reads the old entropy; GEC logs that of the sampled tokens (verl pops it after its metric)
            if run is not None and (run.needs_entropy or run.gec_enabled) and "entropys" in old_log_prob.batch.keys():
                old_log_prob.batch[names.ENTROPY_COPY_KEY] = old_log_prob.batch["entropys"].clone()
            return output

        return _compute_old_log_prob

    @staticmethod
    def compute_advantage(original: Callable) -> Callable:
        """Also serves a call of its own (a script, a trainer subclass with its own ``fit``): one of the
        plugin's estimators then gets its options from ``config`` (GEPO, whose state needs a run, refuses)."""

        def compute_advantage(data, adv_estimator, *args, **kwargs):
            run = current_run()
            ours = str(adv_estimator) in ESTIMATORS
            if not (ours or (run is not None and run.opens_advantage_step)):
                return original(data, adv_estimator, *args, **kwargs)
            with advantage_step(run) as step:
                data = compute_advantage_in_step(original, step, data, (adv_estimator, *args), kwargs)
            infos = data.non_tensor_batch.get(GEC.info_field)
            if run is not None and run.gec_enabled and infos is not None:
                batch = data.batch
                scores = batch["token_level_scores"].sum(dim=-1)
                gec_advantage_outputs(run, step, list(infos), data.non_tensor_batch["uid"], batch["response_mask"], batch["advantages"], scores,
                                      entropy=step.inputs.get("entropy"))
            for key, column in step.loss_columns.items():  # the batch goes on to the actor as it is
                data.batch[key] = column.to(data.batch["advantages"].dtype)
            data.meta_info.update(step.loss_options)
            data.meta_info[names.STEP_METRICS_KEY] = step.metrics
            return data

        return compute_advantage

    @staticmethod
    def compute_data_metrics(original: Callable) -> Callable:
        def compute_data_metrics(batch, use_critic=True, *args, **kwargs):
            metrics = original(batch, use_critic, *args, **kwargs)
            run = current_run()
            if run is None:
                return metrics
            metrics.update(batch.meta_info.pop(names.STEP_METRICS_KEY, {}))
            if run.grader_metrics and names.REWARD_GRADER_KEY in batch.non_tensor_batch:
                metrics.update(grader_metrics(batch.non_tensor_batch[names.REWARD_GRADER_KEY]))
            infos = batch.non_tensor_batch.get(GEC.info_field)
            if run.gec_enabled and infos is not None:  # agent-loop extra_fields are non-tensor columns here
                old_log_probs = batch.batch["old_log_probs"] if "old_log_probs" in batch.batch.keys() else None
                scores = batch.batch["token_level_scores"].sum(dim=-1)
                metrics.update(gec_metrics(list(infos), scores, batch.non_tensor_batch["uid"], batch.batch["response_mask"], old_log_probs))
            return metrics

        return compute_data_metrics

    @staticmethod
    def update_actor(original: Callable) -> Callable:
        def _update_actor(self, batch, *args, **kwargs):
            output = original(self, batch, *args, **kwargs)
            after_actor_update(run_of(self), output.meta_info.get("metrics", {}))
            return output

        return _update_actor

    @staticmethod
    def fit(original: Callable) -> Callable:
        def fit(self, *args, **kwargs):
            run = run_of(self)
            if run is None:
                return original(self, *args, **kwargs)
            with active_run(run):
                return original(self, *args, **kwargs)

        return fit

    @staticmethod
    def generate_sequences(original: Callable) -> Callable:
        def generate_sequences(self, prompts, *args, **kwargs):
            run = current_run()
            training = not prompts.meta_info.get("validate", False)
            if run is not None and run.gec_enabled and training and "uid" in prompts.non_tensor_batch:
                prompts.non_tensor_batch[names.SAMPLE_INDEX_COLUMN] = sample_index_within_group(prompts.non_tensor_batch["uid"])
            return original(self, prompts, *args, **kwargs)

        return generate_sequences

    @classmethod
    def install(cls, module: Any) -> None:
        CORE.wrap(module, "compute_advantage", cls.compute_advantage)
        CORE.wrap(module, "compute_data_metrics", cls.compute_data_metrics)
        for path, make in (
            ("RayPPOTrainer._compute_old_log_prob", cls.compute_old_log_prob),
            ("RayPPOTrainer._update_actor", cls.update_actor),
            ("RayPPOTrainer._load_checkpoint", _make_load_checkpoint),
            ("RayPPOTrainer._save_checkpoint", _make_save_checkpoint),
            ("RayPPOTrainer.fit", cls.fit),
        ):
            CORE.wrap(module, path, make)


# --- the v1 trainer: verl.trainer.ppo.v1.trainer_base.PPOTrainer ----------------------------------------------


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
                infos = [extra.get(GEC.info_field) if isinstance(extra, dict) else None for extra in extras]
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
                infos = [extra.get(GEC.info_field) for extra in extras]
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
            ("PPOTrainer._load_checkpoint", _make_load_checkpoint),
            ("PPOTrainer._save_checkpoint", _make_save_checkpoint),
        ):
            CORE.wrap(module, path, make)

    @classmethod
    def install_utils(cls, module: Any) -> None:
        CORE.wrap(module, "compute_advantage", cls.utils_compute_advantage)


# --- installation (edge_verl.integration.plugin runs these when verl imports each module) -----------------


def _make_validate_config(original: Callable) -> Callable:
    def validate_config(config, *args, **kwargs):
        result = original(config, *args, **kwargs)
        if plugin_in_use(config.algorithm):
            preflight_or_exit(config)
        return result

    return validate_config


def patch_verl_config(module: Any) -> None:
    """verl's ``main`` validates its config before ``ray.init``: the plugin's preflight runs right after."""
    CORE.wrap(module, "validate_config", _make_validate_config)


def patch_agent_loop(module: Any) -> None:
    from edge_verl.integration import gec_agent_loop  # noqa: F401  (@register("edge_gec"))

    CORE.wrap(module, "AgentLoopManager.generate_sequences", LegacyAdapter.generate_sequences)


HOOKS: dict[str, Callable[[Any], None]] = {
    "verl.utils.config": patch_verl_config,
    "verl.workers.utils.losses": actor_loss.patch_losses,
    "verl.experimental.agent_loop.agent_loop": patch_agent_loop,
    "verl.trainer.ppo.core_algos": estimators.register_estimators,
    "verl.trainer.ppo.ray_trainer": LegacyAdapter.install,
    "verl.trainer.ppo.v1.utils": V1Adapter.install_utils,
    "verl.trainer.ppo.v1.trainer_base": V1Adapter.install,
}
