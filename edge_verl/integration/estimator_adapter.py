"""The estimator adapter: the ONE function verl's registry calls for every estimator of the plugin's registry
(``edge_verl/estimators/``), in the trainer's process. verl calls a registered estimator with token_level_rewards,
response_mask, index (uid) and config (= ``config.algorithm``) only; the per-token inputs an estimator reads come from
the open step (``run.AdvantageStep``, filled by the trainer adapter) or from ``batch=`` (the signature of upstream PR
#7473, verl's own key names). It unpacks into a ``GroupBatch``, calls the estimator's function, hands its metrics,
loss columns and per-response values to the step, and packs. Missing inputs raise; there is no silent fallback to
GRPO. ``register_estimators`` puts it in verl's registry when verl imports ``core_algos`` (``plugin.py``).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping, Optional

import torch

from edge_verl.estimators.base import ESTIMATORS, TOKEN_INPUTS, VERL_BATCH_KEYS, Estimator, GroupBatch
from edge_verl.estimators.groups import group_index_from_uids
from edge_verl.integration.run import (
    AdvantageStep, TrainingRun, current_run, current_step, estimator_options, norm_adv_by_std, prefixed,
)

_HINT = (
    "Run verl through the edge_verl plugin (edge-verl doctor), inside one of verl's trainers, and keep "
    "algorithm.rollout_correction.bypass_mode=False."
)


def _token_input(name: str, step: Optional[AdvantageStep], batch: Optional[Mapping], estimator: str, shape) -> torch.Tensor:
    """Input ``name`` (B, T) from ``batch`` (verl's names) or the open step; errors say what to change."""
    tensor = None
    if batch is not None:
        tensor = next((batch[key] for key, ours in VERL_BATCH_KEYS.items() if ours == name and key in batch.keys()), None)
    if tensor is None and step is not None:
        tensor = step.inputs.get(name)
    if tensor is None:
        raise KeyError(f"algorithm.adv_estimator={estimator} needs {TOKEN_INPUTS[name].description}, which this batch does not carry. {_HINT}")
    if tensor.shape != shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)}, response_mask {tuple(shape)}")
    return tensor


def _context(entry: Estimator, config: Any) -> tuple[Optional[AdvantageStep], Optional[TrainingRun], Any, bool]:
    """The open step, the current run, the entry's options and ``norm_adv_by_std_in_grpo``, all parsed once
    per run; outside a run, parsed from ``config``."""
    step = current_step()
    run = step.run if step is not None else current_run()
    if run is not None and run.estimator == entry.name:
        return step, run, run.options, run.norm_adv_by_std
    return step, None, estimator_options(config, entry.name), norm_adv_by_std(config)


class _Batch:
    """The common unpacking: uid groups (shared with the step's other metrics) and outcome scores on the
    rewards' device."""

    def __init__(self, estimator: str, token_level_rewards: torch.Tensor, index: Any, step: Optional[AdvantageStep]):
        if index is None:
            raise KeyError(f"algorithm.adv_estimator={estimator} needs uid groups (index); verl passes them when the batch has 'uid'.")
        group_index, self.num_groups, is_pad = step.grouping(index) if step is not None else group_index_from_uids(index)
        device = token_level_rewards.device
        self.group_index = group_index.to(device)
        self.valid = ~is_pad.to(device)
        self.scores = token_level_rewards.sum(dim=-1).to(torch.float32)


def _state(entry: Estimator, run: Optional[TrainingRun]) -> Any:
    """The entry's training state, which belongs to a training run (None for an estimator without one)."""
    if entry.state is None:
        return None
    if run is None or run.state is None:
        raise RuntimeError(
            f"algorithm.adv_estimator={entry.name} keeps training state across steps, which belongs to a training "
            "run: verl's trainers provide one through the edge_verl plugin; elsewhere call the estimator inside "
            "`with edge_verl.integration.run.active_run(TrainingRun.from_config(config.algorithm))`."
        )
    return run.state


def verl_estimator(entry: Estimator) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The function verl's registry calls for ``entry``: unpack verl's arguments and the open step into a
    ``GroupBatch``, call the entry's ONE function, hand its metrics, loss columns and per-response values to
    the step, and return verl's (advantages, returns)."""

    def compute_advantage(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        batch: Optional[Mapping] = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        step, run, options, norm_by_std = _context(entry, config)
        state = _state(entry, run)
        device = token_level_rewards.device
        tokens = {name: _token_input(name, step, batch, entry.name, response_mask.shape).to(device) for name in entry.inputs(options)}
        data = _Batch(entry.name, token_level_rewards, index, step)
        group_batch = GroupBatch(
            scores=data.scores, response_mask=response_mask, group_index=data.group_index, num_groups=data.num_groups,
            valid=data.valid, tokens=tokens, norm_by_std=norm_by_std,
        )
        output = entry.compute(group_batch, options, state)
        if step is not None:
            step.metrics.update(prefixed(output.metrics, entry.name))
            step.loss_columns.update(output.loss_columns)
            step.loss_options.update(output.loss_options)
            if run is not None and run.per_source:
                step.per_response.update(output.per_response)
        advantages = output.advantages.to(token_level_rewards.dtype)
        return advantages, advantages

    compute_advantage.__name__ = compute_advantage.__qualname__ = f"compute_{entry.name}_advantage"
    compute_advantage.__doc__ = f"verl estimator ``{entry.name}``: {entry.description} (edge_verl.integration.estimator_adapter)."
    return compute_advantage


_ADAPTERS: dict[str, Callable] = {}


def adapter_of(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The one verl function of the table's entry ``name`` (built once, so registration is idempotent)."""
    function = _ADAPTERS.get(name)
    if function is None:
        function = _ADAPTERS[name] = verl_estimator(ESTIMATORS[name])
    return function


def register_estimators(core_algos_module: Any) -> None:
    """Register every estimator of the table in verl's registry (idempotent): verl's import of
    ``core_algos`` calls it, so an entry added before (by a module in ``EDGE_VERL_FEATURE_MODULES``, which
    the plugin imports first, ``integration/plugin.py``) is registered with the paper's two.

    Decided by feature, not by version: a verl that ships its own estimator under one of these names (the
    upstream series in upstream/verl/) keeps it, and importing verl must not fail over the name; the
    plugin's one is then not registered, and a warning says so.
    """
    for name in ESTIMATORS:
        function = adapter_of(name)
        present = core_algos_module.ADV_ESTIMATOR_REGISTRY.get(name)  # in VERL_INTERNALS
        if present is not None and present is not function:
            warnings.warn(
                f"verl already registers the advantage estimator {name!r} ({getattr(present, '__module__', present)}); "
                "edge_verl's is not registered and verl's own is used.",
                stacklevel=2,
            )
            continue
        core_algos_module.register_adv_est(name)(function)
