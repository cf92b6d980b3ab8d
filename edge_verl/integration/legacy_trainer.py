"""The adapter of verl 0.9.1's legacy trainer (``verl.trainer.ppo.ray_trainer.RayPPOTrainer``,
``trainer.use_v1=False``; deprecated on verl's main branch). What it computes is ``trainer.py``'s; this file
only moves values the way the legacy ``fit`` carries them:

- ``_compute_old_log_prob`` keeps a copy of ``entropys`` (``ENTROPY_COPY_KEY``), which verl pops after
  logging ``actor/entropy``, before ``compute_advantage``;
- ``ray_trainer.compute_advantage`` (called by ``fit``) opens the step with the batch's ``old_log_probs``
  and that copy, and returns the loss columns as batch columns and the metrics in ``meta_info``
  (``STEP_METRICS_KEY``), which ``compute_data_metrics(batch)`` adds to the step's metrics with GEC's and the
  grader's;
- ``AgentLoopManager.generate_sequences`` numbers each response within its uid group before verl splits the
  batch over agent-loop workers (each response's seed, ``rollout.py``, and GEC's decisions then do not depend
  on the split; v1 passes ``session_id`` instead);
- ``fit`` makes the run current for those two module-level functions, which have no reference to the trainer.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from edge_verl.algorithms.gec import GEC_INFO_KEY
from edge_verl.config import SAMPLE_INDEX_COLUMN
from edge_verl.estimators.base import ESTIMATORS
from edge_verl.integration.internals import CORE
from edge_verl.integration.run import active_run, advantage_step, current_run, REWARD_GRADER_KEY
from edge_verl.integration.trainer_run import (
    after_actor_update, compute_advantage_in_step, gec_advantage_outputs, gec_metrics, grader_metrics, run_of,
    wrap_load_checkpoint, wrap_save_checkpoint,
)

# The old policy's per-token entropy, copied under this column before verl pops ``entropys``.
ENTROPY_COPY_KEY = "edge_verl_entropys"
# ``meta_info`` key under which the advantage step's metrics travel to ``compute_data_metrics``.
STEP_METRICS_KEY = "edge_verl_step_metrics"


def sample_index_within_group(uids: Iterable) -> np.ndarray:
    """(B,) index of each row among the rows of its uid so far, in batch order: 0, 1, ... per group."""
    seen: dict[str, int] = {}
    index = []
    for uid in uids:
        index.append(seen.get(uid, 0))
        seen[uid] = index[-1] + 1
    return np.asarray(index, dtype=np.int64)


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
                old_log_prob.batch[ENTROPY_COPY_KEY] = old_log_prob.batch["entropys"].clone()
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
            copy = data.batch.pop(ENTROPY_COPY_KEY) if ENTROPY_COPY_KEY in data.batch.keys() else None
            with advantage_step(run, entropy=copy) as step:
                data = compute_advantage_in_step(original, step, data, (adv_estimator, *args), kwargs)
            infos = data.non_tensor_batch.get(GEC_INFO_KEY)
            if run is not None and run.gec_enabled and infos is not None:
                batch = data.batch
                scores = batch["token_level_scores"].sum(dim=-1)
                gec_advantage_outputs(run, step, list(infos), data.non_tensor_batch["uid"], batch["response_mask"], batch["advantages"], scores,
                                      entropy=step.inputs.get("entropy"))
            for key, column in step.loss_columns.items():  # the batch goes on to the actor as it is
                data.batch[key] = column.to(data.batch["advantages"].dtype)
            data.meta_info.update(step.loss_options)
            data.meta_info[STEP_METRICS_KEY] = step.metrics
            return data

        return compute_advantage

    @staticmethod
    def compute_data_metrics(original: Callable) -> Callable:
        def compute_data_metrics(batch, use_critic=True, *args, **kwargs):
            metrics = original(batch, use_critic, *args, **kwargs)
            run = current_run()
            if run is None:
                return metrics
            metrics.update(batch.meta_info.pop(STEP_METRICS_KEY, {}))
            if run.grader_metrics and REWARD_GRADER_KEY in batch.non_tensor_batch:
                metrics.update(grader_metrics(batch.non_tensor_batch[REWARD_GRADER_KEY]))
            infos = batch.non_tensor_batch.get(GEC_INFO_KEY)
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
            numbered = run is not None and (run.seeding.enable or (run.gec_enabled and training))
            if numbered and "uid" in prompts.non_tensor_batch:
                prompts.non_tensor_batch[SAMPLE_INDEX_COLUMN] = sample_index_within_group(prompts.non_tensor_batch["uid"])
            return original(self, prompts, *args, **kwargs)

        return generate_sequences

    @classmethod
    def install(cls, module: Any) -> None:
        CORE.wrap(module, "compute_advantage", cls.compute_advantage)
        CORE.wrap(module, "compute_data_metrics", cls.compute_data_metrics)
        for path, make in (
            ("RayPPOTrainer._compute_old_log_prob", cls.compute_old_log_prob),
            ("RayPPOTrainer._update_actor", cls.update_actor),
            ("RayPPOTrainer._load_checkpoint", wrap_load_checkpoint),
            ("RayPPOTrainer._save_checkpoint", wrap_save_checkpoint),
            ("RayPPOTrainer.fit", cls.fit),
        ):
            CORE.wrap(module, path, make)
