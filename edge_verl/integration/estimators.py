"""The plugin's advantage estimators as a table: what each estimator needs and gives.

The table (``ESTIMATORS``; ``register_estimator`` adds to it) says what each estimator needs and gives, the way
``methods.py`` says what each method is: its name (verl's registry key and the ``algorithm.<name>`` section
of its options), its options class (``config.py``, an ``EstimatorOptions``: the per-token inputs it reads,
its epsilon, its loss option), the training state it keeps (created from its options, saved with every
checkpoint under ``state_key``), ONE function from a ``GroupBatch`` to an ``EstimatorOutput`` (advantages,
metrics, loss columns and options for the actor loss, per-response values for the per-source statistics),
and what the actor loss does with the columns it hands verl (``LossScale``). The entries are EDA and GEPO;
``tests/e2e/toy_estimator.py`` adds a third through ``EDGE_VERL_FEATURE_MODULES`` (ARCHITECTURE.md).

The table knows nothing of a training run: the run (``integration/run.py``) reads it to parse an estimator's
options and create its state, and the one verl adapter that serves every entry
(``integration/estimator_adapter.py``) reads both. No verl import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch

from edge_verl.algorithms.eda import compute_eda_advantages, eda_step_metrics, entropy_gradient_scale
from edge_verl.algorithms.gepo import MIN_GROUPS as GEPO_MIN_GROUPS, GepoThresholds, compute_gepo_advantages, gepo_step_metrics
from edge_verl.algorithms.group_stats import MinGroups, masked_response_mean
from edge_verl import names
from edge_verl.config import EdaConfig, EstimatorOptions, GepoConfig

# The per-token inputs an estimator may read, (B, T) on the response tokens, and what they are (error messages).
TOKEN_INPUTS = {
    "entropy": "the old policy's per-token entropy",
    "old_log_probs": "the old policy's log-probs (old_log_probs)",
}


@dataclass(frozen=True)
class GroupBatch:
    """One advantage computation's batch, as every estimator receives it (B responses, T response tokens,
    P groups): ``scores`` (B,) float32 outcome rewards; ``response_mask`` (B, T); ``group_index`` (B,) int64
    in [0, P); ``num_groups`` P; ``valid`` (B,) bool, False on padding rows; ``tokens``: the inputs the entry
    asked for (``Estimator.token_inputs``), each (B, T) on the scores' device; ``norm_by_std``: verl's
    ``algorithm.norm_adv_by_std_in_grpo``."""

    scores: torch.Tensor
    response_mask: torch.Tensor
    group_index: torch.Tensor
    num_groups: int
    valid: torch.Tensor
    tokens: Mapping[str, torch.Tensor]
    norm_by_std: bool = True


@dataclass
class EstimatorOutput:
    """What an estimator gives back: ``advantages`` (B, T), 0 off the response; ``metrics`` for verl's logger
    (unprefixed: the adapter logs them as ``edge_verl/<estimator>/<key>``); ``loss_columns`` (B, T) and
    ``loss_options`` for the actor loss (next to ``advantages`` in the actor's batch); ``per_response`` (B,)
    values for the per-source statistics (``group_stats.per_source_statistics``)."""

    advantages: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    loss_columns: dict[str, torch.Tensor] = field(default_factory=dict)
    loss_options: dict[str, Any] = field(default_factory=dict)
    per_response: dict[str, torch.Tensor] = field(default_factory=dict)


# The metrics the actor loss reports for an estimator's LossScale, as ``actor/<estimator>/<metric>``: the mean
# factor over the rows it scales, and of the loss gradient with respect to the policy's outputs, the share
# that reaches them through the entropy (``eda.entropy_gradient_share``).
LOSS_SCALE_METRIC = "loss_scale_mean"
GRADIENT_SHARE_METRIC = "entropy_grad_share"


@dataclass(frozen=True)
class LossScale:
    """An estimator's work inside the actor loss (verl's ``ppo_loss``, any loss mode): per micro-batch,
    ``factor(columns, options, entropy)`` gives a factor (B,) for each row's advantage and the rows it
    applies to (B,) bool, from the loss columns the estimator's advantage step wrote (``columns``, padded
    (B, T), with ``response_mask``), the batch-level options it wrote under ``options_key`` and the current
    policy's per-token entropy (B, T, with gradient). verl's own policy loss then receives the advantages
    times the factor (``integration/actor_loss.py``)."""

    columns: tuple[str, ...]
    options_key: str
    factor: Callable[[Mapping[str, torch.Tensor], Mapping[str, Any], torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator (see module docstring). ``config``: its options class (an
    ``EstimatorOptions``: the inputs it reads, its epsilon, its loss option, whether a resume may lack its
    state); ``compute(batch, options, state)``; ``state(options)`` creates the training state (an object with
    ``state_dict`` / ``load_state_dict``, restored on resume; None: the estimator keeps none); ``loss``: what
    the actor loss does with its loss columns when its options switch that on (``options.loss_option``);
    ``min_groups``: the fewest prompt groups a step must hold for the method to be itself (None: one), a run
    with fewer refused before it starts."""

    name: str
    description: str
    config: type
    compute: Callable[[GroupBatch, Any, Any], EstimatorOutput]
    state: Optional[Callable[[Any], Any]] = None
    state_key: str = ""
    loss: Optional["LossScale"] = None
    min_groups: Optional[MinGroups] = None

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ValueError(f"an estimator's name is a registry key without '/', not {self.name!r}")
        if not (isinstance(self.config, type) and issubclass(self.config, EstimatorOptions)) or not callable(getattr(self.config, "from_mapping", None)):
            raise TypeError(f"estimator {self.name}: its config class needs to be an edge_verl.config.EstimatorOptions with from_mapping(mapping)")
        if self.state is not None and not self.state_key:
            raise ValueError(f"estimator {self.name}: training state needs a state_key (its key in the checkpoint)")

    def check_groups(self, groups: int, key: str) -> None:
        """Refuse a step of ``groups`` prompt groups (the trainer's option ``key``) below ``min_groups``."""
        if self.min_groups is not None:
            self.min_groups.check(self.name, groups, key)

    def options(self, section: Mapping[str, Any]) -> Any:
        """The validated options from ``algorithm.<name>`` (a plain mapping)."""
        return self.config.from_mapping(section)

    def loss_metric(self, options: Any) -> Optional[tuple[str, str]]:
        """(the actor metric the loss reports, without verl's "actor/"; the option that asks for it) when these
        options move work into the actor loss: an update without it means the plugin did not run there."""
        why = options.loss_option if self.loss is not None else None
        return None if why is None else (f"{self.name}/{LOSS_SCALE_METRIC}", why)

    def loss_entropy(self, options: Any) -> Optional[str]:
        """Why the actor loss reads the current policy's entropy with these options (verl computes it there
        only with ``actor.calculate_entropy``); None when it does not."""
        why = options.loss_option if self.loss is not None else None
        return None if why is None else f"{why} rescales the advantage inside the actor loss with the current policy's entropy"

    def inputs(self, options: Any) -> tuple[str, ...]:
        """The per-token inputs it reads with these options, each checked against ``TOKEN_INPUTS``."""
        wanted = tuple(options.token_inputs)
        unknown = [name for name in wanted if name not in TOKEN_INPUTS]
        if unknown:
            raise ValueError(f"estimator {self.name} asks for {unknown}; the inputs are {list(TOKEN_INPUTS)}")
        return wanted


ESTIMATORS: dict[str, Estimator] = {}


def register_estimator(entry: Estimator) -> Estimator:
    """Add ``entry`` to the table (the same entry again is a no-op; another under a taken name an error).
    verl's registry gets it when ``verl.trainer.ppo.core_algos`` is imported, or at once when it already was
    (``integration/estimator_adapter.py``)."""
    present = ESTIMATORS.get(entry.name)
    if present is not None and present is not entry:
        raise ValueError(f"an estimator named {entry.name!r} is already in the table")
    ESTIMATORS[entry.name] = entry
    return entry


# --- EDGE-GRPO's Entropy-Driven Advantage ---------------------------------------------------------------------

# The gradient form (``EdaConfig.entropy_gradient``; the method in ``algorithms/eda.py``): per-token columns the
# estimator writes next to ``advantages`` for the actor loss (the detached normaliser, the old policy's group
# mean response entropy, 0 on rows left unscaled; the old P_hat) and the batch-level guard options they were
# computed with.
EDA_GROUP_ENTROPY_COLUMN = "edge_eda_group_entropy"
EDA_RATIO_COLUMN = "edge_eda_entropy_ratio"
EDA_OPTIONS_KEY = "edge_eda_loss_options"


def _eda(batch: GroupBatch, options: EdaConfig, state: None) -> EstimatorOutput:
    result = compute_eda_advantages(
        batch.scores,
        batch.tokens["entropy"],
        batch.response_mask,
        batch.group_index,
        batch.num_groups,
        batch.valid,
        norm_by_std=batch.norm_by_std,
        std_epsilon=options.std_epsilon,
        entropy_epsilon=options.entropy_epsilon,
        ratio_clamp=options.ratio_clamp,
    )
    output = EstimatorOutput(result.advantages, eda_step_metrics(result, batch.valid))
    if options.entropy_gradient:
        # the gradient form: what the actor loss needs to rescale the advantages (integration/actor_loss.py),
        # laid on each row's response tokens
        mask = batch.response_mask.to(torch.float32)
        output.loss_columns = {
            EDA_GROUP_ENTROPY_COLUMN: result.group_entropy[:, None] * mask,
            EDA_RATIO_COLUMN: result.entropy_ratio[:, None] * mask,
        }
        output.loss_options = {
            EDA_OPTIONS_KEY: {
                "entropy_epsilon": options.entropy_epsilon,
                "ratio_clamp": list(options.ratio_clamp) if options.ratio_clamp is not None else None,
            }
        }
    return output


def _eda_loss_factor(
    columns: Mapping[str, torch.Tensor], options: Mapping[str, Any], entropy: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """EDA's gradient form in the loss: s_i = P_hat_i^old / P_hat_i(theta) (``eda.entropy_gradient_scale``),
    with P_i(theta) the masked mean of the current entropy over the response, the normaliser and P_hat^old
    from the columns, and the guards the estimator used; the rows with a normaliser above entropy_epsilon."""
    mask = columns["response_mask"].to(torch.bool)
    group_entropy = masked_response_mean(columns[EDA_GROUP_ENTROPY_COLUMN].to(torch.float32), mask)
    old_ratio = masked_response_mean(columns[EDA_RATIO_COLUMN].to(torch.float32), mask)
    epsilon = float(options["entropy_epsilon"])
    clamp = options.get("ratio_clamp")
    scale = entropy_gradient_scale(
        masked_response_mean(entropy.to(torch.float32), mask),
        group_entropy,
        old_ratio,
        entropy_epsilon=epsilon,
        ratio_clamp=(float(clamp[0]), float(clamp[1])) if clamp is not None else None,
    )
    return scale, group_entropy > epsilon


EDA = register_estimator(
    Estimator(
        name=names.EDA_ESTIMATOR,
        description="EDGE-GRPO's Entropy-Driven Advantage (algorithms/eda.py)",
        config=EdaConfig,
        compute=_eda,
        # the gradient form: the actor loss rescales the advantages with the current entropy
        loss=LossScale((EDA_GROUP_ENTROPY_COLUMN, EDA_RATIO_COLUMN), EDA_OPTIONS_KEY, _eda_loss_factor),
    )
)


# --- GEPO's group-entropy-conditioned asymmetric scaling ------------------------------------------------------


def _gepo(batch: GroupBatch, options: GepoConfig, thresholds: GepoThresholds) -> EstimatorOutput:
    source = batch.tokens["entropy" if options.group_entropy == "token_entropy" else "old_log_probs"]
    # verl computes advantages for training batches only, so every call updates the EMA once; validation
    # never reaches an estimator (tested end to end: num_updates == training steps).
    result = compute_gepo_advantages(
        batch.scores,
        source,
        batch.response_mask,
        batch.group_index,
        batch.num_groups,
        batch.valid,
        thresholds,
        norm_by_std=batch.norm_by_std,
        std_epsilon=options.std_epsilon,
        alpha_low=options.alpha_low,
        alpha_high=options.alpha_high,
        beta_low=options.beta_low,
        beta_high=options.beta_high,
        estimator=options.group_entropy,
        order=options.ema_order,
    )
    return EstimatorOutput(
        result.advantages,
        gepo_step_metrics(result, batch.valid, thresholds.num_updates),
        per_response={
            "group_entropy": result.group_entropy.index_select(0, batch.group_index),
            "outcome": result.outcome_advantages,
            "positive_attenuated": result.positive_attenuated,
            "negative_attenuated": result.negative_attenuated,
        },
    )


GEPO = register_estimator(
    Estimator(
        name=names.GEPO_ESTIMATOR,
        description="GEPO's group-entropy-conditioned asymmetric advantage scaling (algorithms/gepo.py)",
        config=GepoConfig,
        compute=_gepo,
        state=lambda options: GepoThresholds(gamma=options.gamma, init=options.ema_init),
        state_key="gepo_thresholds",
        min_groups=GEPO_MIN_GROUPS,
    )
)
