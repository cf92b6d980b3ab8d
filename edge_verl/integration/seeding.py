"""Reproducible runs in verl 0.9.1 (``algorithm.edge_seeding``, ``config.SeedingConfig``): the two places where
verl's sampling and batch order depend on timing, made functions of the run's command.

- ``AgentLoopWorker._run_agent_loop`` (both trainers; every agent loop, GEC's included) starts one response.
  For a seeded run the wrapper gives it the request's ``seed`` sampling parameter, ``algorithms.seeds``'
  ``response_seed`` of (``rollout.seed``, validation or training, the global step, the prompt's identity,
  the response's index in its group), and hands the prompt's key to the loop (``names.PROMPT_KEY_FIELD``),
  which v1 stores with the sample. The prompt's identity is verl's own row identity, ``data_source`` and
  ``extra_info.index`` (verl's ``index`` column), with the prompt's messages, so that rows without an
  index still differ. The response's index is v1's ``session_id`` or, on the legacy trainer, the column
  ``LegacyAdapter.generate_sequences`` adds before verl splits the batch over agent-loop workers.
- ``ReplayBuffer.sample`` (v1, sync mode) returns the step's samples in TransferQueue insertion order, i.e.
  completion order; the wrapper sorts them by (prompt key, session, output index) before verl balances the
  batch and cuts mini-batches. The legacy trainer keeps the dataloader's order already.

A run that does not ask for it (``run.sampling_seed`` is None) gets verl's functions untouched.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Optional

from edge_verl import names
from edge_verl.algorithms.seeds import derived_seed, prompt_key, response_seed
from edge_verl.integration.internals import CORE
from edge_verl.integration.run import sampling_seed


def sample_index(kwargs: dict) -> Optional[int]:
    """The response's index within its group: v1's ``session_id``, or the legacy trainer's column (None: neither)."""
    for key in ("session_id", names.SAMPLE_INDEX_COLUMN):
        if kwargs.get(key) is not None:
            return int(kwargs[key])
    return None


def _plain(value: Any) -> Any:
    """A row value as JSON-able Python (numpy arrays and scalars, tensors, nested containers)."""
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def seeded_response(run_seed: int, *, validate: bool, step: int, kwargs: dict) -> tuple[int, int]:
    """(prompt key, the response's sampling seed) of the response verl is about to start with ``kwargs`` (the
    row's columns, and its index in the group)."""
    index = sample_index(kwargs)
    if index is None:
        raise RuntimeError(
            "algorithm.edge_seeding: a response reached the agent loop with neither session_id (v1 trainer) nor "
            f"{names.SAMPLE_INDEX_COLUMN} (legacy trainer, added by the plugin before the batch is split): its seed "
            "would not be a function of its identity."
        )
    key = prompt_key(run_seed, validate=validate, step=step, data_source=str(kwargs.get("data_source")),
                     index=_plain(kwargs.get("index")), prompt=json.dumps(_plain(kwargs.get("raw_prompt")), sort_keys=True))
    return key, response_seed(key, index)


# GEC's regenerate branch continues a response with a request of its own (``gec_agent_loop.py``).
CONTINUATION_SALT = "gec_continuation"


def continuation_seed(sampling_params: dict, salt: str) -> Optional[int]:
    """The seed of a further request made for the same response (GEC's continuation), or None when the
    response itself carries no seed."""
    seed = sampling_params.get("seed")
    return None if seed is None else derived_seed(int(seed), salt)


_RUN_SEEDS: dict[int, Optional[int]] = {}


def _run_seed_of(worker: Any) -> Optional[int]:
    """The worker's run's sampling seed, parsed once per config object (a worker keeps its config for life)."""
    config = worker.config
    if id(config) not in _RUN_SEEDS:
        _RUN_SEEDS.clear()
        _RUN_SEEDS[id(config)] = sampling_seed(config)
    return _RUN_SEEDS[id(config)]


def wrap_run_agent_loop(original: Callable) -> Callable:
    def _run_agent_loop(self, sampling_params, trajectory, *args, **kwargs):
        run_seed = _run_seed_of(self)
        if run_seed is None:
            return original(self, sampling_params, trajectory, *args, **kwargs)
        key, seed = seeded_response(run_seed, validate=bool(trajectory["validate"]), step=int(trajectory["step"]), kwargs=kwargs)
        return original(self, {**sampling_params, "seed": seed}, trajectory, *args, **{**kwargs, names.PROMPT_KEY_FIELD: key})

    return _run_agent_loop


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
                                            select_fields=[names.PROMPT_KEY_FIELD, "session_id"])
            prompts, sessions = _values(fields[names.PROMPT_KEY_FIELD]), _values(fields["session_id"])
            order = sorted(range(len(batch.keys)), key=lambda i: _order_key(batch.keys[i], prompts[i], sessions[i]))
            ordered = dataclasses.replace(batch, keys=[batch.keys[i] for i in order], tags=[batch.tags[i] for i in order])
            return ordered, metrics

        return sample

    return make


def install_agent_loop(module: Any) -> None:
    CORE.wrap(module, "AgentLoopWorker._run_agent_loop", wrap_run_agent_loop)


def install_replay_buffer(module: Any) -> None:
    CORE.wrap(module, "ReplayBuffer.sample", wrap_replay_buffer_sample(module.tq))
