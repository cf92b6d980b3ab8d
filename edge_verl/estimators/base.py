"""What every advantage estimator shares: its declaration and the table of them (the registry), the batch it
receives and what it gives back (pure torch, no verl import). The group arithmetic they compose is
``estimators/groups.py``, the step statistics ``estimators/statistics.py``.

**The registry.** An estimator is ONE module that declares everything about it once: its math (pure torch), its
options class (an ``EstimatorOptions``: the inputs it reads, its epsilon, the option that moves work into the actor
loss), ONE function from a ``GroupBatch`` to an ``EstimatorOutput`` (advantages, metrics, loss columns,
per-response values), its loss factor (``LossScale``) if any, its training state (created from its options, saved
with every checkpoint under ``state_key``), the fewest prompt groups a step must hold and the metrics the lab shows
(``Metric``). The module registers the
declaration (``register_estimator``) and is named by its registry key: the modules of ``edge_verl/estimators/``
(``edge_eda.py``, ``gepo.py``; ``edge_verl.estimators.names()`` lists them without importing them), or a module
outside the package named in ``EDGE_VERL_FEATURE_MODULES`` (``tests/e2e/toy_estimator.py``). Every consumer
(verl's registry and both trainers' adapters, the actor loss, the OpenRLHF coupling, the doctor, the options page
and the Hydra configs' sections, the methods and the demo) finds estimators by iterating over ``ESTIMATORS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional

import torch

from edge_verl.config import Options


@dataclass(frozen=True)
class MinGroups:
    """The fewest prompt groups one step must hold for an estimator to be itself (``count``), and ``why``."""

    count: int
    why: str

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1 or not self.why:
            raise ValueError(f"MinGroups({self.count!r}, {self.why!r}): a count >= 1 and its reason")

    def check(self, estimator: str, groups: int, key: str) -> None:
        """Refuse a step of ``groups`` groups (set by the trainer's option ``key``) below ``count``."""
        if groups < self.count:
            raise ValueError(f"{key}={groups}: {estimator} needs at least {self.count} prompt groups per step; {self.why}")


# --- the registry ---------------------------------------------------------------------------------------------

# verl's epsilon in GRPO's std normalisation (core_algos.compute_grpo_outcome_advantage), for estimators without one.
VERL_GRPO_EPSILON = 1e-6


@dataclass(frozen=True)
class TokenInput:
    """A per-token input (B, T) an estimator may read: what it is (error messages) and verl's names for it in a
    batch (the legacy trainer calls the old policy's entropy "entropys", the v1 trainer "entropy")."""

    description: str
    batch_keys: tuple[str, ...]


TOKEN_INPUTS = {
    "entropy": TokenInput("the old policy's per-token entropy", ("entropys", "entropy")),
    "old_log_probs": TokenInput("the old policy's log-probs (old_log_probs)", ("old_log_probs",)),
}
# verl's key in a batch -> the input's name
VERL_BATCH_KEYS = {key: name for name, spec in TOKEN_INPUTS.items() for key in spec.batch_keys}

def batch_token_inputs(batch: Any) -> dict[str, Any]:
    """The per-token inputs a verl batch (a TensorDict, a DataProto's ``batch``, a dict) carries, under their
    names (``TOKEN_INPUTS``)."""
    keys = set(batch.keys())
    return {name: batch[key] for key, name in VERL_BATCH_KEYS.items() if key in keys}


class EstimatorOptions(Options):
    """An estimator's options class (an ``edge_verl.config.Options``: fields with descriptions and declared bounds,
    ``section`` its registry key). Besides its own fields, what the plugin reads off it (``Estimator.inputs`` and the
    methods beside it), each optional, the default GRPO's (``ESTIMATOR_DEFAULTS``):

    token_inputs: the per-token inputs (B, T) the estimator reads with these options (``TOKEN_INPUTS``).
    std_epsilon: the epsilon of its GRPO normalisation (GEC's statistics of the responses as sampled use it).
    resume_without_state: a checkpoint without its training state is accepted (the state starts afresh)
        rather than an error.
    loss_option: the option that moves the estimator's work into the actor loss (e.g.
        "algorithm.edge_eda.entropy_gradient=True"), None when these options leave the loss to verl.
    """


ESTIMATOR_DEFAULTS = {"token_inputs": (), "std_epsilon": VERL_GRPO_EPSILON, "resume_without_state": False, "loss_option": None}


@dataclass(frozen=True)
class GroupBatch:
    """One advantage computation's batch, as every estimator receives it (B responses, T response tokens,
    P groups): ``scores`` (B,) float32 outcome rewards; ``response_mask`` (B, T); ``group_index`` (B,) int64
    in [0, P); ``num_groups`` P; ``valid`` (B,) bool, False on padding rows; ``tokens``: the inputs the
    estimator's options ask for (``Estimator.inputs``), each (B, T) on the scores' device; ``norm_by_std``:
    verl's ``algorithm.norm_adv_by_std_in_grpo``."""

    scores: torch.Tensor
    response_mask: torch.Tensor
    group_index: torch.Tensor
    num_groups: int
    valid: torch.Tensor
    tokens: Mapping[str, torch.Tensor]
    norm_by_std: bool = True


@dataclass
class EstimatorOutput:
    """What an estimator gives back: ``advantages`` (B, T), 0 off the response; ``metrics`` for the trainer's
    logger (unprefixed: verl's adapter logs them as ``edge_verl/<estimator>/<key>``); ``loss_columns`` (B, T) and
    ``loss_options`` for the actor loss (next to ``advantages`` in the actor's batch); ``per_response`` (B,)
    values for the per-source statistics (``per_source_statistics``); ``outcome`` (B,) each response's outcome
    advantage as trained and ``per_sample`` (B,) values a trainer that logs per sample keeps (OpenRLHF's
    ``Experience.info``, as ``<estimator>/<key>``); ``extras``: further values a dump of the computation keeps;
    ``result``: the math's own record."""

    advantages: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)
    loss_columns: dict[str, torch.Tensor] = field(default_factory=dict)
    loss_options: dict[str, Any] = field(default_factory=dict)
    per_response: dict[str, torch.Tensor] = field(default_factory=dict)
    outcome: Optional[torch.Tensor] = None
    per_sample: dict[str, torch.Tensor] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    result: Any = None


# The metrics the actor loss reports for an estimator's LossScale, as ``actor/<estimator>/<metric>``: the mean
# factor over the rows it scales, and of the loss gradient with respect to the policy's outputs, the share
# that reaches them through the entropy.
LOSS_SCALE_METRIC = "loss_scale_mean"
GRADIENT_SHARE_METRIC = "entropy_grad_share"


@dataclass(frozen=True)
class LossScale:
    """An estimator's work inside the actor loss (verl's ``ppo_loss``, any loss mode): per micro-batch,
    ``factor(columns, options, entropy)`` gives a factor (B,) for each row's advantage and the rows it
    applies to (B,) bool, from the loss columns the estimator's advantage step wrote (``columns``, padded
    (B, T), with ``response_mask``), the batch-level options it wrote under ``options_key`` and the current
    policy's per-token entropy (B, T, with gradient). The trainer's own policy loss then receives the advantages
    times the factor (``integration/actor_loss.py``)."""

    columns: tuple[str, ...]
    options_key: str
    factor: Callable[[Mapping[str, torch.Tensor], Mapping[str, Any], torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


# The diagnostics of a LossScale in the actor loss (and of GEC's per-origin gradient shares).


def loss_gradients(loss: torch.Tensor, log_prob: torch.Tensor, entropy: Optional[torch.Tensor]) -> Optional[tuple]:
    """(dL/dlogp, dL/dH) over the loss's elementwise ops (``retain_graph``: the trainer's backward follows);
    None without a graph (no_grad, or a loss that does not depend on the policy). A missing path gives None."""
    inputs = [tensor for tensor in (log_prob, entropy) if tensor is not None and tensor.requires_grad]
    if not (torch.is_grad_enabled() and loss.requires_grad and inputs):
        return None
    grads = iter(torch.autograd.grad(loss, inputs, retain_graph=True, allow_unused=True))
    return tuple(next(grads) if tensor is not None and tensor.requires_grad else None for tensor in (log_prob, entropy))


def entropy_gradient_share(grad_log_prob: Optional[torch.Tensor], grad_entropy: Optional[torch.Tensor]) -> float:
    """|dL/dH| / (|dL/dlogp| + |dL/dH|), norms over the micro-batch's response tokens: of the loss gradient
    with respect to the policy's outputs, the share that reaches them through the entropy (a cheap proxy for
    the share in parameter space, no second backward through the model); 0 without any gradient."""
    through_entropy = float(grad_entropy.norm()) if grad_entropy is not None else 0.0
    through_log_prob = float(grad_log_prob.norm()) if grad_log_prob is not None else 0.0
    total = through_log_prob + through_entropy
    return through_entropy / total if total > 0 else 0.0



# The demo plot's panels a declared metric may name (edge_verl_lab/demo/run.py: plot_metrics).
METRIC_PANELS = ("entropy", "statistics")


@dataclass(frozen=True)
class Metric:
    """A metric an estimator logs, declared with how the lab shows it. ``key``: its key as the estimator's
    ``compute`` returns it (logged as ``edge_verl/<estimator>/<key>``), or as the actor loss reports it
    (``actor=True``: ``actor/<estimator>/<key>``); ``label``: its row in the study report's table of each
    method's mechanism (empty: not there); ``short``: its column in the demo's printed summary (empty: not
    there); ``panel``: its panel of the demo's plot, one of ``METRIC_PANELS`` (empty: not plotted)."""

    key: str
    label: str = ""
    short: str = ""
    panel: str = ""
    actor: bool = False

    def __post_init__(self) -> None:
        if not self.key or self.key.startswith("/") or self.key.endswith("/"):
            raise ValueError(f"a metric's key is its estimator's own key (no leading or trailing '/'), not {self.key!r}")
        if self.panel and self.panel not in METRIC_PANELS:
            raise ValueError(f"metric {self.key}: panel={self.panel!r}; allowed: {', '.join(METRIC_PANELS)} or '' (not plotted)")


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator's declaration (see the module docstring). ``config``: its options class (an
    ``EstimatorOptions``, a pydantic model whose ``section`` is the estimator's name); ``compute(batch, options,
    state)``; ``state(options)`` creates the training state (an object with ``state_dict`` / ``load_state_dict``,
    restored on resume; None: it keeps none), saved under ``state_key`` and named ``state_label`` in messages;
    ``loss``: what the actor loss does with its loss columns when its options switch that on (their
    ``loss_option``); ``min_groups``: the fewest prompt
    groups a step must hold for the method to be itself (None: one), a run with fewer refused before it starts;
    ``source_statistics(per_response, rows, group_index, num_groups)``: its statistics of one data source's responses
    (``rows``, (B,) bool) from the ``per_response`` values its ``compute`` returned, {stat: value}, logged under
    ``edge_verl/by_source/<source>/`` with ``edge_metrics.per_source`` (None: it adds none); ``metrics``: the
    metrics the lab shows (``Metric``: the demo's summary and plot, the study report's mechanism table), which
    read them from here and name no estimator's keys."""

    name: str
    description: str
    config: type
    compute: Callable[[GroupBatch, Any, Any], EstimatorOutput]
    state: Optional[Callable[[Any], Any]] = None
    state_key: str = ""
    state_label: str = ""
    loss: Optional[LossScale] = None
    min_groups: Optional[MinGroups] = None
    source_statistics: Optional[Callable[[Mapping[str, torch.Tensor], torch.Tensor, torch.Tensor, int], dict[str, float]]] = None
    metrics: tuple[Metric, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ValueError(f"an estimator's name is a registry key without '/', not {self.name!r}")
        if not (isinstance(self.config, type) and issubclass(self.config, EstimatorOptions)):
            raise TypeError(f"estimator {self.name}: its config class needs to be an edge_verl.estimators.base.EstimatorOptions")
        if self.config.section != self.name:
            raise ValueError(f"estimator {self.name}: its options' section is its name (section = {self.name!r}), not {self.config.section!r}")
        if self.state is not None and not self.state_key:
            raise ValueError(f"estimator {self.name}: training state needs a state_key (its key in the checkpoint)")
        if not all(isinstance(metric, Metric) for metric in self.metrics):
            raise ValueError(f"estimator {self.name}: metrics must be Metric declarations, each key once; got {self.metrics!r}")
        keys = [self.logged(metric) for metric in self.metrics]
        if len(set(keys)) != len(keys):
            raise ValueError(f"estimator {self.name}: metrics must be Metric declarations, each key once; got {keys}")

    def logged(self, metric: Metric) -> str:
        """The key under which ``metric`` reaches the run's logger."""
        return f"{'actor' if metric.actor else 'edge_verl'}/{self.name}/{metric.key}"

    def check_groups(self, groups: int, key: str) -> None:
        """Refuse a step of ``groups`` prompt groups (the trainer's option ``key``) below ``min_groups``."""
        if self.min_groups is not None:
            self.min_groups.check(self.name, groups, key)

    def options(self, section: Optional[Mapping[str, Any]]) -> Any:
        """The validated options from ``algorithm.<name>`` (a plain mapping; None: the defaults)."""
        return self.config.from_mapping(section or {})

    def new_state(self, options: Any) -> Any:
        """A fresh training state for these options (None for an estimator without one)."""
        return self.state(options) if self.state is not None else None

    @staticmethod
    def read(options: Any, name: str) -> Any:
        """What the plugin reads off any estimator's options (``ESTIMATOR_DEFAULTS``), the default where they lack it."""
        return getattr(options, name, ESTIMATOR_DEFAULTS[name])

    def std_epsilon(self, options: Any) -> float:
        return float(self.read(options, "std_epsilon"))

    def resume_without_state(self, options: Any) -> bool:
        return bool(self.read(options, "resume_without_state"))

    def loss_option(self, options: Any) -> Optional[str]:
        """The option that moves its work into the actor loss, when it has a ``LossScale`` and these options ask."""
        return self.read(options, "loss_option") if self.loss is not None else None

    def loss_metric(self, options: Any) -> Optional[tuple[str, str]]:
        """(the actor metric the loss reports, without the trainer's "actor/"; the option that asks for it) when
        these options move work into the actor loss: an update without it means the plugin did not run there."""
        why = self.loss_option(options)
        return None if why is None else (f"{self.name}/{LOSS_SCALE_METRIC}", why)

    def loss_entropy(self, options: Any) -> Optional[str]:
        """Why the actor loss reads the current policy's entropy with these options (verl computes it there
        only with ``actor.calculate_entropy``); None when it does not."""
        why = self.loss_option(options)
        return None if why is None else f"{why} rescales the advantage inside the actor loss with the current policy's entropy"

    def inputs(self, options: Any) -> tuple[str, ...]:
        """The per-token inputs it reads with these options, each checked against ``TOKEN_INPUTS``."""
        wanted = tuple(self.read(options, "token_inputs"))
        unknown = [name for name in wanted if name not in TOKEN_INPUTS]
        if unknown:
            raise ValueError(f"estimator {self.name} asks for {unknown}; the inputs are {list(TOKEN_INPUTS)}")
        return wanted


class Registry(MappingABC):
    """The estimators by name: the modules of ``edge_verl/estimators/`` (imported on the first look-up, each
    registering itself) and every other module's ``register_estimator``, in that order."""

    def __init__(self) -> None:
        self._entries: dict[str, Estimator] = {}
        self._loading = False
        self._loaded = False

    def _table(self) -> dict[str, Estimator]:
        if not self._loaded and not self._loading:
            from edge_verl.estimators import PACKAGE, builtin_names

            self._loading = True
            try:
                for name in builtin_names():
                    importlib.import_module(f"{PACKAGE}.{name}")
                    if name not in self._entries:
                        raise RuntimeError(f"{PACKAGE}.{name} registers no estimator named {name!r} (a module of {PACKAGE} is named by its estimator)")
                builtin = {name: self._entries[name] for name in builtin_names()}
                self._entries = {**builtin, **self._entries}
                self._loaded = True
            finally:
                self._loading = False
        return self._entries

    def __getitem__(self, name: str) -> Estimator:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._table()))

    def __len__(self) -> int:
        return len(self._table())

    def register(self, entry: Estimator) -> Estimator:
        present = self._entries.get(entry.name)
        if present is not None and present is not entry:
            raise ValueError(f"an estimator named {entry.name!r} is already in the table")
        self._entries[entry.name] = entry
        return entry

    def registered_names(self) -> tuple[str, ...]:
        """The names registered so far, without loading this package's modules."""
        return tuple(self._entries)

    def unregister(self, name: str) -> None:
        """Remove an estimator registered from outside the package (tests)."""
        self._entries.pop(name, None)


ESTIMATORS = Registry()


def declared_metrics() -> list[tuple[str, Metric]]:
    """(the key it is logged under, its declaration) for every metric every estimator declares, in the registry's
    order: what the lab's demo and study report show of an estimator."""
    return [(entry.logged(metric), metric) for entry in ESTIMATORS.values() for metric in entry.metrics]


def register_estimator(entry: Estimator) -> Estimator:
    """Add ``entry`` to the table (the same entry again is a no-op; another under a taken name an error).
    verl's registry gets it when ``verl.trainer.ppo.core_algos`` is imported, or at once when it already was
    (``integration/actor_loss.py``)."""
    return ESTIMATORS.register(entry)


# The group arithmetic and the step statistics were this module's: an estimator that imports them from here still
# finds them (their homes: groups.py, statistics.py).
_MOVED = {"groups": ("PAD_UID_PREFIX", "group_index_from_uids", "response_valid", "masked_row_sum",
                     "masked_row_sum_and_count", "masked_response_mean", "group_sum", "group_mean_std", "grpo_outcome", "tied_group_fraction",
                     "zero_variance_group_fraction"),
          "statistics": ("CORRECT_THRESHOLD", "outcome_statistics", "advantage_statistics", "as_sampled_statistics",
                         "per_source_statistics", "on_host", "masked_variance", "masked_extreme", "masked_mean",
                         "advantage_variance_metrics")}


def __getattr__(name: str) -> Any:
    home = next((module for module, names in _MOVED.items() if name in names), None)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"edge_verl.estimators.{home}"), name)
