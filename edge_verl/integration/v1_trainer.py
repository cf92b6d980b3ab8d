"""verl's v1 trainer (``PPOTrainer``, ``trainer.use_v1=True``) adapted to the plugin's run, in the trainer's process.

``V1Adapter`` wraps ``_compute_advantage`` (fetch the estimator's inputs from the TransferQueue once, run verl's
advantage code inside the step, put the step's metrics into verl's ``metrics`` and its loss columns into the
TransferQueue), ``_compute_metrics`` (GEC's and the grader's metrics from the rollout's ``extra_fields``),
``_update_actor``, the checkpoint methods (``trainer_run.py``) and ``v1.utils.compute_advantage``; a seeded run's
``ReplayBuffer.sample`` returns the step's samples in (prompt, sample) order instead of completion order.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from edge_verl.algorithms.gec import GEC_INFO_KEY
from edge_verl.config import PROMPT_KEY_FIELD
from edge_verl.integration.internals import CORE
from edge_verl.integration.run import (
    REWARD_EXTRA_INFO_FIELD, REWARD_GRADER_KEY, advantage_step, current_step, sampling_seed,
)
from edge_verl.integration.trainer_run import (
    after_actor_update, compute_advantage_in_step, gec_advantage_outputs, gec_metrics, grader_metrics, run_of,
    wrap_load_checkpoint, wrap_save_checkpoint,
)

# --- a seeded run's update batch in (prompt, sample) order (v1) ----------------------------------------------------


def _values(column: Any) -> list:
    """A TransferQueue column as a list of Python values (a tensor, a non-tensor stack, or a plain sequence)."""
    if hasattr(column, "tolist"):
        return column.tolist()
    return [getattr(item, "data", item) for item in column]


def _order_key(key: str, prompt: Any, session: Any) -> tuple:
    """verl's sample key is ``{uid}_{session_id}_{output index}``; the uid is random, the prompt key is not."""
    return int(prompt), int(session), int(key.rsplit("_", 1)[-1])


# The sampling seed of a replay buffer's run, set by the trainer that builds it (``ReplayBuffer`` gets only the
# trainer's v1 section of the config, not ``algorithm``).
_BUFFER_SEED = "_edge_verl_sampling_seed"


def wrap_build_replay_buffer(original: Callable) -> Callable:
    def _build_replay_buffer(self, *args, **kwargs):
        buffer = original(self, *args, **kwargs)
        setattr(buffer, _BUFFER_SEED, sampling_seed(self.config))
        return buffer

    return _build_replay_buffer


def wrap_replay_buffer_sample(tq_module: Any) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        def sample(self, global_steps, partition_id, batch_size, *args, **kwargs):
            batch, metrics = original(self, global_steps, partition_id, batch_size, *args, **kwargs)
            if not batch.keys or getattr(self, _BUFFER_SEED, None) is None:
                return batch, metrics
            fields = tq_module.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                            select_fields=[PROMPT_KEY_FIELD, "session_id"])
            prompts, sessions = _values(fields[PROMPT_KEY_FIELD]), _values(fields["session_id"])
            order = sorted(range(len(batch.keys)), key=lambda i: _order_key(batch.keys[i], prompts[i], sessions[i]))
            ordered = dataclasses.replace(batch, keys=[batch.keys[i] for i in order], tags=[batch.tags[i] for i in order])
            return ordered, metrics

        return sample

    return make


def install_replay_buffer(module: Any) -> None:
    CORE.wrap(module, "ReplayBuffer.sample", wrap_replay_buffer_sample(module.tq))


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
                infos = [extra.get(GEC_INFO_KEY) if isinstance(extra, dict) else None for extra in extras]
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
                metrics.update(grader_metrics((extra.get(REWARD_EXTRA_INFO_FIELD) or {}).get(REWARD_GRADER_KEY) for extra in extras))
            if run.gec_enabled:
                uids = [str(uid) for uid in data.pop("uid").tolist()]
                padded = data.to_padded_tensor()
                infos = [extra.get(GEC_INFO_KEY) for extra in extras]
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
