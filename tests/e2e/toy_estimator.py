"""A toy advantage estimator added from outside the package through the registry alone
(``edge_verl.estimators.base.register_estimator``), for the e2e test that trains it (imported in every verl
process by ``EDGE_VERL_FEATURE_MODULES``) and for tests/test_registry.py, which finds it in every consumer of the
registry. Nothing else of the plugin knows it.

``toy_sign``: each response's advantage is the sign of its reward minus its group's mean, spread over its
response tokens; it reads the old log-probs (to exercise the inputs), keeps a call counter as training state
(saved with every checkpoint) and reports the counter and the mean old log-prob, both declared (``metrics``): the
lab's demo summary and plot and the study report show them.
"""

from typing import ClassVar

import torch

from edge_verl.config import option
from edge_verl.estimators.base import Estimator, EstimatorOptions, EstimatorOutput, GroupBatch, Metric, register_estimator

NAME = "toy_sign"


class ToyConfig(EstimatorOptions):
    """The toy's options (``algorithm.toy_sign``)."""

    section: ClassVar[str] = NAME
    token_inputs: ClassVar[tuple[str, ...]] = ("old_log_probs",)  # to exercise the inputs
    scale: float = option(1.0, gt=0.0, description="the magnitude of every advantage (the sign of reward minus the group mean, times it).")


class Calls:
    def __init__(self) -> None:
        self.calls = 0

    def state_dict(self) -> dict:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.calls = int(state["calls"])


def toy_sign(batch: GroupBatch, options: ToyConfig, state: Calls) -> EstimatorOutput:
    state.calls += 1
    valid = batch.valid.to(torch.float32)
    totals = torch.zeros(batch.num_groups).index_add_(0, batch.group_index, batch.scores * valid)
    counts = torch.zeros(batch.num_groups).index_add_(0, batch.group_index, valid).clamp(min=1)
    sign = torch.sign(batch.scores - (totals / counts)[batch.group_index]) * valid
    mask = batch.response_mask.to(torch.float32)
    old = batch.tokens["old_log_probs"]
    return EstimatorOutput(
        advantages=options.scale * sign[:, None] * mask,
        metrics={"calls": float(state.calls), "old_logprob_mean": float((old * mask).sum() / mask.sum().clamp(min=1))},
    )


TOY = register_estimator(
    Estimator(
        name=NAME,
        description="a toy: the sign of reward minus the group mean",
        config=ToyConfig,
        compute=toy_sign,
        state=lambda options: Calls(),
        state_key="toy_calls",
        metrics=(
            Metric("calls", label="toy: calls so far", short="toy calls", panel="statistics"),
            Metric("old_logprob_mean", panel="entropy"),
        ),
    )
)
