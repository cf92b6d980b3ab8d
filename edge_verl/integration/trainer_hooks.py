"""Thin wrappers around verl 0.9.1 trainer internals; each unpacks, calls one plugin function, packs.

Every wrapper is gated on "this run uses one of the plugin's estimators, or GEC" (``TrainingRun``): a
plain verl run with the plugin installed does exactly what it does without it (no extra TransferQueue
fetch, no extra checkpoint file). What each wrapper is for:
- ``verl.utils.config.validate_config`` (verl's ``main``, before ``ray.init``): the plugin's preflight
  (``integration/preflight.py``), so a mistake in its options fails in seconds, before Ray starts;
- both trainers' ``_load_checkpoint`` (before the first rollout): build the run's ``TrainingRun`` (options
  parsed and validated once), check GEC's setup against the data, restore GEPO's thresholds on resume;
  ``_save_checkpoint``: save them; ``fit``: make the run current (``active_run``) for the whole loop;
- ``compute_advantage`` (``ray_trainer`` and ``v1.utils`` bindings): open the ``AdvantageStep`` that hands
  the batch's old_log_probs / entropy to the estimator (verl passes neither), and, when the run asks for
  ``algorithm.edge_metrics.advantage_stats``, compute ``edge_verl/adv/*`` for any estimator;
- v1 ``PPOTrainer._compute_advantage``: fetch per-token ``entropy`` from the TransferQueue when the
  estimator needs it (v1 writes it but does not read it back), and add the estimator's metrics to the
  step's metrics; v1 ``PPOTrainer._compute_metrics``: GEC's metrics from the rollout's extra_fields, and
  the reward's grader outcomes (``edge_verl/grader/*``) when the run grades with edge_verl's reward;
- legacy ``RayPPOTrainer._compute_old_log_prob``: keep a copy of ``entropys``, which legacy pops;
  legacy ``ray_trainer.compute_data_metrics``: the estimator's, GEC's and the grader's metrics into the
  step's metrics;
- legacy ``AgentLoopManager.generate_sequences``: number each response within its uid group before verl
  splits the batch across agent-loop workers, so GEC's seeded decisions do not depend on the split;
- EDA's gradient form: the advantage step's loss columns go where the actor update reads its batch (legacy:
  the ``compute_advantage`` wrapper, into the DataProto; v1: ``_compute_advantage``, into the
  TransferQueue); both trainers' ``_update_actor``: stop when the actor loss hook did not run
  (``integration/eda_loss.py`` wraps verl's ``ppo_loss`` in the workers).
``VERL_INTERNALS`` lists every verl attribute used here with the parameters relied on; the internals
test (and ``edge-verl doctor``) fail when an upgrade changes one.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

from edge_verl.integration import eda_loss, estimators, names
from edge_verl.integration.post_import import wrap
from edge_verl.integration.preflight import check_gec_rows, check_run_config, preflight_or_exit
from edge_verl.integration.run import TrainingRun, active_run, advantage_step, current_run, current_step, prefixed
from edge_verl.integration.state import restore_run_state, save_state

# module -> attribute path -> the parameters relied on (functions: the leading parameters, in order;
# classes: constructor fields that must exist). See edge_verl.integration.internals.
VERL_INTERNALS: dict[str, dict[str, tuple[str, ...]]] = {
    "verl.utils.config": {"validate_config": ("config", "use_reference_policy", "use_critic")},
    "verl.trainer.ppo.core_algos": {
        "register_adv_est": ("name_or_enum",),
        "get_adv_estimator_fn": ("name_or_enum",),
        "ADV_ESTIMATOR_REGISTRY": (),
    },
    "verl.trainer.ppo.ray_trainer": {
        "compute_advantage": ("data", "adv_estimator", "gamma", "lam", "num_repeat", "norm_adv_by_std_in_grpo", "config"),
        "compute_data_metrics": ("batch", "use_critic"),
        "RayPPOTrainer._compute_old_log_prob": ("self", "batch"),
        "RayPPOTrainer._update_actor": ("self", "batch"),
        "RayPPOTrainer._load_checkpoint": ("self",),
        "RayPPOTrainer._save_checkpoint": ("self",),
        "RayPPOTrainer.fit": ("self",),
    },
    "verl.trainer.ppo.v1.utils": {
        "compute_advantage": ("data", "adv_estimator", "gamma", "lam", "num_repeat", "norm_adv_by_std_in_grpo", "config"),
    },
    "verl.trainer.ppo.v1.trainer_base": {
        "tq.kv_batch_get": ("keys", "partition_id", "select_fields"),
        "KVBatchMeta": ("keys", "tags", "partition_id"),
        "PPOTrainer._compute_advantage": ("self", "batch", "metrics"),
        "PPOTrainer._compute_metrics": ("self", "batch", "metrics"),
        "PPOTrainer._update_actor": ("self", "batch", "metrics"),
        "PPOTrainer._load_checkpoint": ("self",),
        "PPOTrainer._save_checkpoint": ("self",),
        "PPOTrainer.fit": ("self", "agent_loop_manager"),
    },
    "verl.experimental.agent_loop.agent_loop": {
        "register": ("agent_name",),
        "_agent_loop_registry": (),
        "AgentLoopOutput": ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "reward_score", "extra_fields"),
        "AgentLoopManager.generate_sequences": ("self", "prompts"),
        "LLMServerClient.generate": ("self", "request_id", "prompt_ids", "sampling_params"),
    },
    "verl.experimental.agent_loop.single_turn_agent_loop": {
        "SingleTurnAgentLoop.run": ("self", "sampling_params"),
    },
    "verl.trainer.ppo.reward": {"get_custom_reward_fn": ("config",)},
    "verl.workers.utils.losses": {"ppo_loss": ("config", "model_output", "data", "dp_group"), "get_policy_loss_fn": ("name",)},
    "verl.workers.utils.padding": {"no_padding_2_padding": ("tensor", "data"), "response_to_nested": ("tensor", "response_mask")},
    "verl.utils.tensordict_utils": {"get_non_tensor_data": ("data", "key", "default")},
}

_RUN_ATTRIBUTE = "_edge_verl_run"


# --- the run: created before the first rollout, current during fit ---------------------------------------


def agent_names(dataset: Any) -> Optional[list]:
    """The ``agent_name`` column of a verl RL dataset ([] without the column; None when unreadable)."""
    frame = getattr(dataset, "dataframe", None)
    if frame is None or not hasattr(frame, "column_names"):
        return None
    return list(frame["agent_name"]) if "agent_name" in frame.column_names else []


def start_run(trainer: Any) -> TrainingRun:
    """The run's ``TrainingRun`` from its config, checked against its data; attached to the trainer."""
    config = trainer.config
    run = check_run_config(config)
    agent = config.actor_rollout_ref.rollout.get("agent", None) or {}
    check_gec_rows(
        run.gec_enabled,
        agent.get("default_agent_loop", None),
        agent_names(getattr(trainer, "train_dataset", None)),
        agent_names(getattr(trainer, "val_dataset", None)),
    )
    setattr(trainer, _RUN_ATTRIBUTE, run)
    return run


def run_of(trainer: Any) -> TrainingRun:
    run = getattr(trainer, _RUN_ATTRIBUTE, None)
    return run if run is not None else start_run(trainer)


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
        if folder is not None:
            restore_run_state(run, folder)
        return result

    return _load_checkpoint


def _make_save_checkpoint(original: Callable) -> Callable:
    def _save_checkpoint(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        run = run_of(self)
        if run.thresholds is not None:
            save_state(os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"), run.state_dict())
        return result

    return _save_checkpoint


def _make_fit(original: Callable) -> Callable:
    def fit(self, *args, **kwargs):
        with active_run(run_of(self)):
            return original(self, *args, **kwargs)

    return fit


# --- the advantage step (both trainers) --------------------------------------------------------------------


def advantage_metrics(data: Any, step: Any) -> dict[str, float]:
    """``edge_verl/adv/*`` of a verl batch after its advantage step (any estimator; the step's uid grouping)."""
    from edge_verl.algorithms.group_stats import advantage_statistics

    batch = data.batch
    group_index, num_groups, is_pad = step.grouping(data.non_tensor_batch["uid"])
    advantages = batch["advantages"]
    scores = batch["token_level_rewards"].sum(dim=-1).to(torch.float32)
    device = advantages.device
    stats = advantage_statistics(advantages, batch["response_mask"], scores, group_index.to(device), num_groups, ~is_pad.to(device))
    return prefixed(stats, names.ADVANTAGE_SCOPE)


def _make_compute_advantage(original: Callable) -> Callable:
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        run = current_run()
        ours = str(adv_estimator) in names.ESTIMATORS
        with_stats = ours or (run is not None and run.advantage_stats)
        if not ours and not with_stats:
            return original(data, adv_estimator, *args, **kwargs)
        inputs = {}
        if ours:
            batch = data.batch
            inputs = {ours_key: batch[key] for key, ours_key in estimators.BATCH_KEYS.items() if key in batch.keys()}
            if names.ENTROPY_COPY_KEY in batch.keys():
                inputs["entropy"] = batch.pop(names.ENTROPY_COPY_KEY)
        outermost = current_step() is None
        with advantage_step(**inputs) as step:
            data = original(data, adv_estimator, *args, **kwargs)
            if with_stats:
                step.metrics.update(advantage_metrics(data, step))
        if outermost:  # legacy trainer: the batch goes on to the actor as it is
            for key, column in step.loss_columns.items():
                data.batch[key] = column.to(data.batch["advantages"].dtype)
            data.meta_info.update(step.loss_options)
            if run is not None:  # compute_data_metrics collects them
                run.pending_metrics.update(step.metrics)
        return data

    return compute_advantage


def _make_v1_compute_advantage(original: Callable, tq_module: Any) -> Callable:
    def _compute_advantage(self, batch, metrics, *args, **kwargs):
        run = run_of(self)
        if not run.opens_advantage_step:
            return original(self, batch, metrics, *args, **kwargs)
        entropy = response_mask = None
        if run.needs_entropy:
            fetched = tq_module.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["entropy", "response_mask"])
            response_mask = fetched["response_mask"]
            entropy = fetched.to_padded_tensor()["entropy"]
        with advantage_step(entropy=entropy) as step:
            result = original(self, batch, metrics, *args, **kwargs)
        metrics.update(step.metrics)
        if step.loss_columns:
            result = _put_loss_inputs(tq_module, result, step, response_mask)
        return result

    return _compute_advantage


def _put_loss_inputs(tq_module: Any, batch: Any, step: Any, response_mask: Any) -> Any:
    """v1: the estimator's loss columns into the TransferQueue next to ``advantages`` (nested the same
    way, on the rows' response lengths), its loss options into the batch's extra_info (which reaches the
    actor update as non-tensor data)."""
    from tensordict import TensorDict
    from verl.workers.utils.padding import response_to_nested

    fields = TensorDict({key: response_to_nested(column, response_mask) for key, column in step.loss_columns.items()}, batch_size=len(batch.keys))
    stored = tq_module.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
    stored.extra_info = {**(batch.extra_info or {}), **(stored.extra_info or {}), **step.loss_options}
    return stored


_LOSS_HOOK_METRIC = f"actor/{names.EDA_ESTIMATOR}/loss_scale_mean"


def _check_loss_hook_ran(run: TrainingRun, metric_keys: Iterable[str]) -> None:
    """EDA's gradient form lives in the actor workers' loss: an update without its metric means the
    plugin was not loaded there (the detached form would train silently)."""
    if run.entropy_gradient and _LOSS_HOOK_METRIC not in set(metric_keys):
        raise RuntimeError(
            f"algorithm.edge_eda.entropy_gradient=True but the actor update reported no {_LOSS_HOOK_METRIC}: the "
            "edge_verl plugin did not run in the actor workers (check VERL_USE_EXTERNAL_PLUGINS and `edge-verl doctor`)."
        )


def _make_v1_update_actor(original: Callable) -> Callable:
    def _update_actor(self, batch, metrics, *args, **kwargs):
        result = original(self, batch, metrics, *args, **kwargs)
        _check_loss_hook_ran(run_of(self), metrics)
        return result

    return _update_actor


def _make_legacy_update_actor(original: Callable) -> Callable:
    def _update_actor(self, batch, *args, **kwargs):
        output = original(self, batch, *args, **kwargs)
        _check_loss_hook_ran(run_of(self), output.meta_info.get("metrics", {}))
        return output

    return _update_actor


# --- GEC's metrics and sample numbering ------------------------------------------------------------------


def _gec_metrics(infos, final_scores, uids, response_mask, old_log_probs) -> dict[str, float]:
    from edge_verl.algorithms.gec import summarize_corrections

    return prefixed(summarize_corrections(infos, final_scores, uids, response_mask, old_log_probs))


def _grader_metrics(outcomes: Iterable) -> dict[str, float]:
    from edge_verl.reward.score import grader_outcome_fractions

    return prefixed(grader_outcome_fractions(outcomes), names.GRADER_SCOPE)


def _make_v1_compute_metrics(original: Callable, tq_module: Any) -> Callable:
    def _compute_metrics(self, batch, metrics, *args, **kwargs):
        result = original(self, batch, metrics, *args, **kwargs)
        run = run_of(self)
        if not (run.gec_enabled or run.grader_metrics):
            return result
        keys = [key for key, tag in zip(batch.keys, batch.tags) if not tag.get("is_padding", False)]
        fields = ["extra_fields", "uid", "rm_scores", "response_mask", "old_log_probs"] if run.gec_enabled else ["extra_fields"]
        data = tq_module.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
        extras = [extra if isinstance(extra, dict) else {} for extra in data.pop("extra_fields").tolist()]
        if run.grader_metrics:
            metrics.update(_grader_metrics((extra.get(names.REWARD_EXTRA_INFO_FIELD) or {}).get(names.REWARD_GRADER_KEY) for extra in extras))
        if not run.gec_enabled:
            return result
        infos = [extra.get(names.GEC_INFO_KEY) for extra in extras]
        uids = [str(uid) for uid in data.pop("uid").tolist()]
        padded = data.to_padded_tensor()
        metrics.update(_gec_metrics(infos, padded["rm_scores"].sum(dim=-1), uids, padded["response_mask"], padded["old_log_probs"]))
        return result

    return _compute_metrics


def sample_index_within_group(uids: Iterable) -> np.ndarray:
    """(B,) index of each row among the rows of its uid so far, in batch order: 0, 1, ... per group."""
    seen: dict[str, int] = {}
    index = []
    for uid in uids:
        index.append(seen.get(uid, 0))
        seen[uid] = index[-1] + 1
    return np.asarray(index, dtype=np.int64)


def _make_generate_sequences(original: Callable) -> Callable:
    def generate_sequences(self, prompts, *args, **kwargs):
        run = current_run()
        training = not prompts.meta_info.get("validate", False)
        if run is not None and run.gec_enabled and training and "uid" in prompts.non_tensor_batch:
            prompts.non_tensor_batch[names.SAMPLE_INDEX_COLUMN] = sample_index_within_group(prompts.non_tensor_batch["uid"])
        return original(self, prompts, *args, **kwargs)

    return generate_sequences


# --- legacy trainer ----------------------------------------------------------------------------------------


def _make_legacy_old_log_prob(original: Callable) -> Callable:
    def _compute_old_log_prob(self, batch, *args, **kwargs):
        output = original(self, batch, *args, **kwargs)
        old_log_prob = output[0] if isinstance(output, tuple) else output
        if run_of(self).needs_entropy and "entropys" in old_log_prob.batch.keys():
            old_log_prob.batch[names.ENTROPY_COPY_KEY] = old_log_prob.batch["entropys"].clone()
        return output

    return _compute_old_log_prob


def _make_compute_data_metrics(original: Callable) -> Callable:
    def compute_data_metrics(*args, **kwargs):
        metrics = original(*args, **kwargs)
        run = current_run()
        batch = kwargs.get("batch", args[0] if args else None)
        if run is not None and run.grader_metrics and batch is not None and names.REWARD_GRADER_KEY in batch.non_tensor_batch:
            metrics.update(_grader_metrics(batch.non_tensor_batch[names.REWARD_GRADER_KEY]))
        if run is None or not run.is_ours:
            return metrics
        metrics.update(run.pending_metrics)
        run.pending_metrics.clear()
        infos = batch.non_tensor_batch.get(names.GEC_INFO_KEY) if batch is not None else None
        if infos is not None:  # legacy trainer: agent-loop extra_fields are non-tensor columns
            metrics.update(
                _gec_metrics(
                    list(infos),
                    batch.batch["token_level_scores"].sum(dim=-1),
                    batch.non_tensor_batch["uid"],
                    batch.batch["response_mask"],
                    batch.batch["old_log_probs"] if "old_log_probs" in batch.batch.keys() else None,
                )
            )
        return metrics

    return compute_data_metrics


# --- installation (edge_verl.integration.plugin runs these when verl imports each module) -----------------


def _make_validate_config(original: Callable) -> Callable:
    def validate_config(config, *args, **kwargs):
        result = original(config, *args, **kwargs)
        preflight_or_exit(config)
        return result

    return validate_config


def patch_verl_config(module: Any) -> None:
    """verl's ``main`` validates its config before ``ray.init``: the plugin's preflight runs right after."""
    wrap(module, "validate_config", _make_validate_config)


def patch_ray_trainer(module: Any) -> None:
    wrap(module, "compute_advantage", _make_compute_advantage)
    wrap(module, "compute_data_metrics", _make_compute_data_metrics)
    for name, make in (
        ("_compute_old_log_prob", _make_legacy_old_log_prob),
        ("_update_actor", _make_legacy_update_actor),
        ("_load_checkpoint", _make_load_checkpoint),
        ("_save_checkpoint", _make_save_checkpoint),
        ("fit", _make_fit),
    ):
        wrap(module.RayPPOTrainer, name, make)


def patch_v1_utils(module: Any) -> None:
    wrap(module, "compute_advantage", _make_compute_advantage)


def patch_v1_trainer_base(module: Any) -> None:
    trainer = module.PPOTrainer
    wrap(trainer, "_compute_advantage", lambda original: _make_v1_compute_advantage(original, module.tq))
    wrap(trainer, "_compute_metrics", lambda original: _make_v1_compute_metrics(original, module.tq))
    wrap(trainer, "_update_actor", _make_v1_update_actor)
    wrap(trainer, "_load_checkpoint", _make_load_checkpoint)
    wrap(trainer, "_save_checkpoint", _make_save_checkpoint)
    wrap(trainer, "fit", _make_fit)


def patch_agent_loop(module: Any) -> None:
    from edge_verl.integration import gec_agent_loop  # noqa: F401  (@register("edge_gec"))

    wrap(module.AgentLoopManager, "generate_sequences", _make_generate_sequences)


HOOKS: dict[str, Callable[[Any], None]] = {
    "verl.utils.config": patch_verl_config,
    "verl.workers.utils.losses": eda_loss.patch_losses,
    "verl.experimental.agent_loop.agent_loop": patch_agent_loop,
    "verl.trainer.ppo.core_algos": estimators.register_estimators,
    "verl.trainer.ppo.ray_trainer": patch_ray_trainer,
    "verl.trainer.ppo.v1.utils": patch_v1_utils,
    "verl.trainer.ppo.v1.trainer_base": patch_v1_trainer_base,
}
