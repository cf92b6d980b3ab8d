"""Thin wrappers around verl 0.9.1 trainer internals; each unpacks, calls one plugin function, packs.

They act only when ``algorithm.adv_estimator`` is one of this plugin's estimators (checkpoint state is
saved for every run, it is a small JSON file). What each wrapper is for:
- ``compute_advantage`` (``ray_trainer`` and ``v1.utils`` bindings): hand the batch's old_log_probs /
  entropy to the estimator (verl passes neither) and drop the legacy entropy copy afterwards;
- v1 ``PPOTrainer._compute_advantage``: fetch per-token ``entropy`` from the TransferQueue (v1 writes it
  but does not read it back) and merge the estimator's metrics into the step's metrics;
- legacy ``RayPPOTrainer._compute_old_log_prob``: keep a copy of ``entropys``, which legacy pops;
- legacy ``ray_trainer.compute_data_metrics``: merge the estimator's metrics into the step's metrics;
- both trainers' ``_load_checkpoint`` (runs first in ``fit``): refuse unsupported settings before any
  rollout, validate the options, restore GEPO's thresholds; ``_save_checkpoint``: save them.
``VERL_INTERNALS`` lists every verl attribute used here; a test fails when an upgrade removes one.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from edge_verl.algorithms.gec import AGENT_NAME as GEC_SECTION
from edge_verl.algorithms.gec import INFO_KEY as GEC_INFO_KEY
from edge_verl.integration import estimators, state

VERL_INTERNALS: dict[str, tuple[str, ...]] = {
    "verl.trainer.ppo.core_algos": ("register_adv_est", "ADV_ESTIMATOR_REGISTRY", "get_adv_estimator_fn"),
    "verl.trainer.ppo.ray_trainer": (
        "compute_advantage",
        "compute_data_metrics",
        "RayPPOTrainer._compute_old_log_prob",
        "RayPPOTrainer._load_checkpoint",
        "RayPPOTrainer._save_checkpoint",
    ),
    "verl.trainer.ppo.v1.utils": ("compute_advantage",),
    "verl.trainer.ppo.v1.trainer_base": (
        "tq",
        "PPOTrainer._compute_advantage",
        "PPOTrainer._load_checkpoint",
        "PPOTrainer._save_checkpoint",
        "PPOTrainer._compute_metrics",
    ),
    "verl.experimental.agent_loop.agent_loop": ("register", "_agent_loop_registry", "AgentLoopOutput"),
    "verl.experimental.agent_loop.single_turn_agent_loop": ("SingleTurnAgentLoop",),
    "verl.trainer.ppo.reward": ("get_custom_reward_fn",),
}

ENTROPY_COPY_KEY = "edge_verl_entropys"


def _gec_configured(config: Any) -> bool:
    """GEC is in use when the run configures it (algorithm.edge_gec) or makes it the default loop."""
    agent = config.actor_rollout_ref.rollout.get("agent", {}) or {}
    return GEC_SECTION in config.algorithm or agent.get("default_agent_loop", None) == GEC_SECTION


def _is_ours(config: Any) -> bool:
    return config is not None and str(config.algorithm.adv_estimator) in estimators.ESTIMATORS


def _wrap(owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
    original = getattr(owner, name)
    if getattr(original, "__edge_verl_wrapped__", False):
        return
    wrapper = functools.wraps(original)(make(original))
    wrapper.__edge_verl_wrapped__ = True
    setattr(owner, name, wrapper)


# --- compute_advantage (both trainers) -------------------------------------------------------------------


def _make_compute_advantage(original: Callable) -> Callable:
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        if str(adv_estimator) not in estimators.ESTIMATORS:
            return original(data, adv_estimator, *args, **kwargs)
        handed = {key: data.batch[key] for key in ("old_log_probs", *estimators.ENTROPY_KEYS) if key in data.batch.keys()}
        estimators.add_pending_inputs(**handed)
        try:
            data = original(data, adv_estimator, *args, **kwargs)
        finally:
            estimators.clear_pending_inputs()
        if ENTROPY_COPY_KEY in data.batch.keys():
            data.batch.pop(ENTROPY_COPY_KEY)
        return data

    return compute_advantage


# --- v1 trainer -----------------------------------------------------------------------------------------


def _make_v1_compute_advantage(original: Callable, tq_module: Any) -> Callable:
    def _compute_advantage(self, batch, metrics):
        if not _is_ours(self.config):
            return original(self, batch, metrics)
        fetched = tq_module.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["entropy", "response_mask"]
        )
        estimators.add_pending_inputs(entropy=fetched.to_padded_tensor()["entropy"])
        result = original(self, batch, metrics)
        metrics.update(estimators.pop_pending_metrics())
        return result

    return _compute_advantage


def _make_v1_compute_metrics(original: Callable, tq_module: Any) -> Callable:
    def _compute_metrics(self, batch, metrics, *args, **kwargs):
        result = original(self, batch, metrics, *args, **kwargs)
        keys = [key for key, tag in zip(batch.keys, batch.tags) if not tag.get("is_padding", False)]
        extra_fields = tq_module.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        infos = [fields.get(GEC_INFO_KEY) if isinstance(fields, dict) else None for fields in extra_fields.pop("extra_fields").tolist()]
        if not any(info is not None for info in infos):  # no row ran the GEC loop this step
            return result
        data = tq_module.kv_batch_get(
            keys=keys, partition_id=batch.partition_id, select_fields=["uid", "rm_scores", "response_mask", "old_log_probs"]
        )
        uids = [str(uid) for uid in data.pop("uid").tolist()]
        padded = data.to_padded_tensor()
        metrics.update(
            _gec_metrics(infos, padded["rm_scores"].sum(dim=-1), uids, padded["response_mask"], padded["old_log_probs"])
        )
        return result

    return _compute_metrics


# --- legacy trainer -------------------------------------------------------------------------------------


def _make_legacy_old_log_prob(original: Callable) -> Callable:
    def _compute_old_log_prob(self, batch, *args, **kwargs):
        output = original(self, batch, *args, **kwargs)
        old_log_prob = output[0] if isinstance(output, tuple) else output
        if _is_ours(self.config) and "entropys" in old_log_prob.batch.keys():
            old_log_prob.batch[ENTROPY_COPY_KEY] = old_log_prob.batch["entropys"].clone()
        return output

    return _compute_old_log_prob


def _gec_metrics(infos, final_scores, uids, response_mask, old_log_probs) -> dict[str, float]:
    from edge_verl.algorithms.gec import summarize_corrections

    metrics = summarize_corrections(infos, final_scores, uids, response_mask, old_log_probs)
    return {f"{estimators.METRIC_PREFIX}/{key}": value for key, value in metrics.items()}


def _make_compute_data_metrics(original: Callable) -> Callable:
    def compute_data_metrics(*args, **kwargs):
        metrics = original(*args, **kwargs)
        metrics.update(estimators.pop_pending_metrics())
        batch = kwargs.get("batch", args[0] if args else None)
        infos = batch.non_tensor_batch.get(GEC_INFO_KEY) if batch is not None else None
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


# --- checkpoints (both trainers) ------------------------------------------------------------------------


def _resumed_folder(trainer: Any) -> str | None:
    if trainer.global_steps <= 0:
        return None
    config = trainer.config.trainer
    if config.resume_mode == "resume_path":
        folder = config.resume_from_path
    else:
        folder = os.path.join(config.default_local_dir, f"global_step_{trainer.global_steps}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def validate_run_config(config: Any) -> None:
    """Fail before the first rollout on settings the estimators cannot run with."""
    if _gec_configured(config):
        from edge_verl.integration.gec_agent_loop import check_gec_supported

        check_gec_supported(config)
    estimator = str(config.algorithm.adv_estimator)
    if estimator not in estimators.ESTIMATORS:
        return
    estimators.check_supported(config.algorithm, estimator)
    if estimator == estimators.EDA_NAME:
        estimators.eda_config(config.algorithm)
    else:
        estimators.gepo_config(config.algorithm)


def _make_load_checkpoint(original: Callable) -> Callable:
    def _load_checkpoint(self, *args, **kwargs):
        validate_run_config(self.config)
        state.reset_state()
        result = original(self, *args, **kwargs)
        folder = _resumed_folder(self)
        if folder is not None:
            uses_gepo = str(self.config.algorithm.adv_estimator) == estimators.GEPO_NAME
            state.load_state(folder, estimators.gepo_config(self.config.algorithm) if uses_gepo else None)
        return result

    return _load_checkpoint


def _make_save_checkpoint(original: Callable) -> Callable:
    def _save_checkpoint(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        state.save_state(folder)
        return result

    return _save_checkpoint


# --- installation ---------------------------------------------------------------------------------------


def patch_ray_trainer(module: Any) -> None:
    _wrap(module, "compute_advantage", _make_compute_advantage)
    _wrap(module, "compute_data_metrics", _make_compute_data_metrics)
    _wrap(module.RayPPOTrainer, "_compute_old_log_prob", _make_legacy_old_log_prob)
    _wrap(module.RayPPOTrainer, "_load_checkpoint", _make_load_checkpoint)
    _wrap(module.RayPPOTrainer, "_save_checkpoint", _make_save_checkpoint)


def patch_v1_utils(module: Any) -> None:
    _wrap(module, "compute_advantage", _make_compute_advantage)


def patch_v1_trainer_base(module: Any) -> None:
    _wrap(module.PPOTrainer, "_compute_advantage", lambda original: _make_v1_compute_advantage(original, module.tq))
    _wrap(module.PPOTrainer, "_load_checkpoint", _make_load_checkpoint)
    _wrap(module.PPOTrainer, "_save_checkpoint", _make_save_checkpoint)
    _wrap(module.PPOTrainer, "_compute_metrics", lambda original: _make_v1_compute_metrics(original, module.tq))


def register_gec_agent_loop(module: Any) -> None:
    from edge_verl.integration import gec_agent_loop  # noqa: F401  (@register("edge_gec"))


HOOKS: dict[str, Callable[[Any], None]] = {
    "verl.experimental.agent_loop.agent_loop": register_gec_agent_loop,
    "verl.trainer.ppo.core_algos": estimators.register_estimators,
    "verl.trainer.ppo.ray_trainer": patch_ray_trainer,
    "verl.trainer.ppo.v1.utils": patch_v1_utils,
    "verl.trainer.ppo.v1.trainer_base": patch_v1_trainer_base,
}
