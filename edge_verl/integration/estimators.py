"""The plugin's advantage estimators as a table, and the one verl adapter that serves every entry.

The table (``ESTIMATORS``; ``register_estimator`` adds to it) says what each estimator needs and gives, the way
``methods.py`` says what each method is: its name (verl's registry key and the ``algorithm.<name>`` section
of its options), its options class (``config.py``, an ``EstimatorOptions``: the per-token inputs it reads,
its epsilon, its loss option), the training state it keeps (created from its options, saved with every
checkpoint under ``state_key``), ONE function from a ``GroupBatch`` to an ``EstimatorOutput`` (advantages,
metrics, loss columns and options for the actor loss, per-response values for the per-source statistics),
and what the actor loss does with the columns it hands verl (``LossScale``). The entries are EDA and GEPO;
``tests/e2e/toy_estimator.py`` adds a third through ``EDGE_VERL_FEATURE_MODULES`` (ARCHITECTURE.md).

verl 0.9.1 calls a registered estimator with token_level_rewards, response_mask, index (uid) and config
(= ``config.algorithm``) only. The per-token inputs an entry reads (EDA the old policy's entropy, GEPO the
old log-probs) come from the open ``AdvantageStep`` (``integration/run.py``, filled by the trainer adapter)
or from ``batch=`` (the signature of upstream PR #7473, verl's own key names). One adapter
(``verl_estimator``) serves every entry: it unpacks into a ``GroupBatch``, calls the entry's function,
hands its metrics, loss columns and per-response values to the step, and packs. Options and state come
parsed once from the current ``TrainingRun``. Missing inputs raise; there is no silent fallback to GRPO.
No verl import: verl's registry arrives as the module ``register_estimators`` is called with.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch

from edge_verl.algorithms.eda import compute_eda_advantages, eda_step_metrics, entropy_gradient_scale
from edge_verl.algorithms.gepo import MIN_GROUPS as GEPO_MIN_GROUPS, GepoThresholds, compute_gepo_advantages, gepo_step_metrics
from edge_verl.algorithms.group_stats import MinGroups, group_index_from_uids, masked_response_mean
from edge_verl import names
from edge_verl.config import EdaConfig, EstimatorOptions, GepoConfig
from edge_verl.integration.run import AdvantageStep, TrainingRun, current_run, current_step, estimator_options, norm_adv_by_std, prefixed

# verl's epsilon (core_algos.compute_grpo_outcome_advantage), for estimators without one.
VERL_GRPO_EPSILON = 1e-6
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
    (``integration/estimators.py``)."""
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


# --- the verl adapter ----------------------------------------------------------------------------------------

_HINT = (
    "Run verl through the edge_verl plugin (edge-verl doctor), inside one of verl's trainers, and keep "
    "algorithm.rollout_correction.bypass_mode=False."
)


def _token_input(name: str, step: Optional[AdvantageStep], batch: Optional[Mapping], estimator: str, shape) -> torch.Tensor:
    """Input ``name`` (B, T) from ``batch`` (verl's names) or the open step; errors say what to change."""
    tensor = None
    if batch is not None:
        tensor = next((batch[key] for key, ours in names.BATCH_KEYS.items() if ours == name and key in batch.keys()), None)
    if tensor is None and step is not None:
        tensor = step.inputs.get(name)
    if tensor is None:
        raise KeyError(f"algorithm.adv_estimator={estimator} needs {TOKEN_INPUTS[name]}, which this batch does not carry. {_HINT}")
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
    compute_advantage.__doc__ = f"verl estimator ``{entry.name}``: {entry.description} (edge_verl.integration.estimators)."
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
