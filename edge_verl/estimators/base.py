"""What every advantage estimator shares: its declaration and the table of them (the registry), the batch it
receives and what it gives back, and the group arithmetic over verl's ``uid`` groups (pure torch, no verl import).

**The registry.** An estimator is ONE module that declares everything about it once: its math (pure torch), its
options class (an ``EstimatorOptions``: the inputs it reads, its epsilon, the option that moves work into the actor
loss), ONE function from a ``GroupBatch`` to an ``EstimatorOutput`` (advantages, metrics, loss columns,
per-response values), its loss factor (``LossScale``) if any, its training state (created from its options, saved
with every checkpoint under ``state_key``) and the fewest prompt groups a step must hold. The module registers the
declaration (``register_estimator``) and is named by its registry key: the modules of ``edge_verl/estimators/``
(``edge_eda.py``, ``gepo.py``; ``edge_verl.estimators.names()`` lists them without importing them), or a module
outside the package named in ``EDGE_VERL_FEATURE_MODULES`` (``tests/e2e/toy_estimator.py``). Every consumer
(verl's registry and both trainers' adapters, the actor loss, the OpenRLHF coupling, the doctor, the options page
and the Hydra configs' sections, the methods and the demo) finds estimators by iterating over ``ESTIMATORS``.

**The group arithmetic.** Shape legend: B responses in the batch, T response tokens, P groups (prompts).
- ``group_index`` (B,) long in [0, P): which group each response belongs to.
- ``valid`` (B,) bool: rows that take part in statistics. verl's v1 batch balancing appends padding
  rows (uid "pad...", all-zero response_mask); they are excluded everywhere and get advantage 0.

Every reduction is a ``scatter_add``/``index_add`` over ``group_index``: no Python loop over samples or
groups, so cost is O(B*T) and runs on whatever device the tensors are on.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np
import torch

from edge_verl.config import Options

PAD_UID_PREFIX = "pad"
# masked_row_sum: CPU inputs above this many elements (2 MB of float32, where a fresh (B, T) temporary costs
# its page faults on every call) are reduced in blocks of ~_BLOCK_ELEMENTS (1 MB).
_BLOCKED_MIN_ELEMENTS = 1 << 19
_BLOCK_ELEMENTS = 1 << 18


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

# verl's actor loss as the plugin's loss hook (integration/actor_loss.py) relies on it, each checked in verl's source by
# ``integration/internals.py``'s CORE: ppo_loss passes exactly POLICY_LOSS_KEYWORDS to the policy loss by keyword
# (core_algos.PolicyLossFn), which clamps log(pi_theta / pi_old) to +-LOG_RATIO_CLAMP before exp; VANILLA_POLICY_LOSS
# is the ``policy_loss.loss_mode`` of plain PPO clipping (dual clip included), the only mode whose clipping GEC's
# per-origin ``vanilla_clip_frac`` recomputes; verl's trainers prefix the update's metrics with ACTOR_METRIC_PREFIX
# (``rename_dict``).
POLICY_LOSS_KEYWORDS = ("old_log_prob", "log_prob", "advantages", "response_mask", "loss_agg_mode", "config", "rollout_is_weights")
LOG_RATIO_CLAMP = 20.0
VANILLA_POLICY_LOSS = "vanilla"
ACTOR_METRIC_PREFIX = "actor"


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
    ``edge_verl/by_source/<source>/`` with ``edge_metrics.per_source`` (None: it adds none)."""

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

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ValueError(f"an estimator's name is a registry key without '/', not {self.name!r}")
        if not (isinstance(self.config, type) and issubclass(self.config, EstimatorOptions)):
            raise TypeError(f"estimator {self.name}: its config class needs to be an edge_verl.estimators.base.EstimatorOptions")
        if self.config.section != self.name:
            raise ValueError(f"estimator {self.name}: its options' section is its name (section = {self.name!r}), not {self.config.section!r}")
        if self.state is not None and not self.state_key:
            raise ValueError(f"estimator {self.name}: training state needs a state_key (its key in the checkpoint)")

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


def register_estimator(entry: Estimator) -> Estimator:
    """Add ``entry`` to the table (the same entry again is a no-op; another under a taken name an error).
    verl's registry gets it when ``verl.trainer.ppo.core_algos`` is imported, or at once when it already was
    (``integration/actor_loss.py``)."""
    return ESTIMATORS.register(entry)


# --- the group arithmetic -------------------------------------------------------------------------------------


def group_index_from_uids(uids: Sequence | np.ndarray) -> tuple[torch.Tensor, int, torch.Tensor]:
    """uids (B,) -> (group_index (B,) long, num_groups P, is_pad (B,) bool).

    Group ids follow first appearance, so a permutation of the batch permutes nothing but the rows. One
    dict pass over the rows (no sort), the codes handed to torch through numpy (``torch.tensor`` on a
    Python list of ints costs about as much as the dict pass itself): ~40 us for 256 rows, below numpy's
    ``unique`` on strings, which verl's grouping uses, at every size.
    """
    codes: dict[str, int] = {}
    rows = uids.tolist() if isinstance(uids, np.ndarray) else uids
    index = np.array([codes.setdefault(uid if type(uid) is str else str(uid), len(codes)) for uid in rows], dtype=np.int64)
    pad_groups = np.array([uid.startswith(PAD_UID_PREFIX) for uid in codes], dtype=bool)
    return torch.from_numpy(index), len(codes), torch.from_numpy(pad_groups[index])


def response_valid(response_mask: torch.Tensor, is_pad: torch.Tensor | None = None) -> torch.Tensor:
    """(B,) bool: rows with at least one response token that are not padding rows."""
    valid = response_mask.sum(dim=-1) > 0
    if is_pad is not None:
        valid = valid & ~is_pad.to(valid.device)
    return valid


def masked_row_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) values and mask -> (B,) sum of values over each row's mask, non-finite values counted as 0.

    One pass, no (B, T) temporary on a CPU: large CPU inputs are multiplied and summed in blocks of rows
    that fit in cache, because a fresh (B, T) product costs its page faults every call (measured at
    8192 x 4096: 22 ms in blocks vs 52 ms for ``(values * mask).sum(-1)`` and 57 ms for ``einsum``); small
    inputs, GPU inputs (cached allocator) and inputs that need a gradient take the plain product.
    Rows whose sum is not finite (NaN/inf anywhere in the row, masked or not) are recomputed exactly with
    the non-finite entries zeroed; one finite total over the rows proves there are none (one reduction and
    one host sync instead of a per-row check).
    """
    return _masked_row_sums(values, mask, with_count=False)[0]


def masked_row_sum_and_count(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``masked_row_sum`` and each row's number of mask tokens (B,) in values' dtype, from the same pass
    (on the blocked CPU path the mask block is counted while it is in cache)."""
    return _masked_row_sums(values, mask, with_count=True)


def _masked_row_sums(values: torch.Tensor, mask: torch.Tensor, with_count: bool) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    rows = max(1, _BLOCK_ELEMENTS // max(1, values.shape[-1]))
    blocked = values.device.type == "cpu" and values.numel() > _BLOCKED_MIN_ELEMENTS and not (
        torch.is_grad_enabled() and values.requires_grad
    )
    if not blocked:
        sums, counts = _block_sums(values, mask, with_count)
    else:
        sums = values.new_empty(values.shape[0])
        counts = values.new_empty(values.shape[0]) if with_count else None
        for start in range(0, values.shape[0], rows):
            block = slice(start, start + rows)
            block_sums, block_counts = _block_sums(values[block], mask[block], with_count)
            sums[block] = block_sums
            if counts is not None:
                counts[block] = block_counts
    if math.isfinite(float(sums.detach().sum())):
        return sums, counts
    bad = ~torch.isfinite(sums)
    if bool(bad.any()):
        clean = torch.nan_to_num(values[bad], nan=0.0, posinf=0.0, neginf=0.0)
        sums = sums.clone()
        sums[bad] = (clean * mask[bad].to(values.dtype)).sum(dim=-1)
    return torch.nan_to_num(sums, nan=0.0, posinf=0.0, neginf=0.0), counts


def _block_sums(values: torch.Tensor, mask: torch.Tensor, with_count: bool) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Row sums of values * mask (and of mask) over a block of rows. An integer mask (verl's response_mask
    is int64) is converted first, block by block in cache on the blocked path: a mixed-dtype product is
    ~3x slower on a CPU."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(dim=-1), mask.sum(dim=-1) if with_count else None


def masked_response_mean(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """values (B, T), response_mask (B, T) -> (B,) mean over each row's response tokens (0 for empty rows)."""
    sums, lengths = masked_row_sum_and_count(values, response_mask)
    return sums / lengths.clamp(min=1.0)


def group_sum(values: torch.Tensor, group_index: torch.Tensor, num_groups: int) -> torch.Tensor:
    """values (B,) -> (P,) per-group sums."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, group_index, values)


def group_mean_std(
    scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group mean and unbiased std of ``scores`` over valid rows, as verl's GRPO defines them.

    Returns (mean (P,), std (P,), count (P,)). A group with a single valid response has mean 0 and
    std 1 (verl's convention: its advantage is its raw score); an empty group has mean 0, std 1.
    verl's ``verl.utils.groupwise.group_mean_std`` with ``eps=0.0`` (its GRPO's call) gives the same numbers
    to the last bit on the valid rows (80 random float32 batches with singleton and tied groups,
    tests/integration/test_group_stats_equals_verls_on_cpu.py); this one exists because the estimators' math
    imports no verl (the OpenRLHF coupling runs it without verl) and it leaves padding rows out by ``valid``.
    """
    weights = valid.to(scores.dtype)
    count = group_sum(weights, group_index, num_groups)
    mean = group_sum(scores * weights, group_index, num_groups) / count.clamp(min=1.0)
    deviation = (scores - mean.index_select(0, group_index)) * weights
    variance = group_sum(deviation * deviation, group_index, num_groups) / (count - 1.0).clamp(min=1.0)
    single = count < 2
    return mean.masked_fill(single, 0.0), variance.sqrt().masked_fill(single, 1.0), count


def grpo_outcome(
    scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor,
    *, norm_by_std: bool = True, epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outcome-level GRPO advantage (B,): (r_i - mean_g) / (std_g + epsilon), 0 on invalid rows, and, from the
    same group statistics, the fraction of tied groups (a 0-d tensor, see ``tied_group_fraction``), so an
    estimator's metrics need no second pass over the groups.

    The advantage is identical to verl's ``compute_grpo_outcome_advantage`` (before broadcasting over tokens)
    for the same epsilon; ``norm_by_std=False`` is Dr.GRPO's mean-only variant.
    """
    mean, std, count = group_mean_std(scores, group_index, num_groups, valid)
    advantages = scores - mean.index_select(0, group_index)
    if norm_by_std:
        advantages = advantages / (std + epsilon).index_select(0, group_index)
    return torch.where(valid, advantages, 0.0), tied_group_fraction(std, count)


def tied_group_fraction(std: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """0-d tensor: of the groups with >= 2 valid responses (``group_mean_std``'s std and count), the fraction
    whose scores all tie (std 0): GRPO's advantage collapse. 0 without such groups. No host sync."""
    multi = count >= 2
    return ((std == 0) & multi).sum().to(std.dtype) / multi.sum().clamp(min=1)


def zero_variance_group_fraction(
    scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor
) -> float:
    """Fraction of groups (with >= 2 valid responses) whose scores all tie: GRPO's advantage collapse."""
    _, std, count = group_mean_std(scores, group_index, num_groups, valid)
    return float(tied_group_fraction(std, count))


# A response is correct when its score is above this (GEC's default correct_threshold; the papers' rewards are 0/1).
CORRECT_THRESHOLD = 0.5


def outcome_statistics(
    scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor, threshold: float = CORRECT_THRESHOLD
) -> dict[str, float]:
    """How a batch's groups were answered, over the valid responses (groups with none are left out):

    score_mean: mean score; correct_frac: fraction of responses scoring above ``threshold``;
    all_wrong_group_frac / all_right_group_frac: fraction of groups none / all of whose responses are
        correct (all-wrong groups are where GRPO's advantage collapses and GEC corrects).
    Zeros for a batch without valid responses.
    """
    valid = valid.to(torch.bool)
    scores = scores.to(torch.float32)
    correct = ((scores > threshold) & valid).to(torch.float32)
    count = group_sum(valid.to(torch.float32), group_index, num_groups)
    right = group_sum(correct, group_index, num_groups)
    present = count > 0
    groups = present.sum().clamp(min=1).to(torch.float32)
    responses = valid.sum().clamp(min=1).to(torch.float32)
    values = torch.stack((
        (scores * valid).sum() / responses,
        correct.sum() / responses,
        ((right == 0) & present).sum() / groups,
        ((right == count) & present).sum() / groups,
    )).tolist()
    return dict(zip(("score_mean", "correct_frac", "all_wrong_group_frac", "all_right_group_frac"), values))


def advantage_statistics(
    advantages: torch.Tensor, response_mask: torch.Tensor, scores: torch.Tensor, group_index: torch.Tensor, num_groups: int, valid: torch.Tensor
) -> dict[str, float]:
    """Statistics of any estimator's output, comparable across estimators (EDGE-GRPO Fig. 5):

    var: unbiased variance (ddof = 1, as the EDGE-GRPO reference logs it) over the valid responses of each
        response's advantage (its mean over response tokens; outcome estimators broadcast one value);
    zero_variance_group_frac: fraction of groups (>= 2 valid responses) whose scores all tie.
    """
    sums, lengths = masked_row_sum_and_count(advantages.to(torch.float32), response_mask)
    valid = valid & (lengths > 0)
    per_response = sums / lengths.clamp(min=1.0)
    _, std, count = group_mean_std(scores, group_index, num_groups, valid)
    tied = tied_group_fraction(std, count)
    per_response = per_response[valid]
    if per_response.numel() < 2:
        variance, tied_frac = 0.0, float(tied)
    else:  # one host sync for both
        variance, tied_frac = torch.stack((per_response.var(unbiased=True).to(tied.dtype), tied)).tolist()
    return {"var": variance if math.isfinite(variance) else 0.0, "zero_variance_group_frac": tied_frac}


def as_sampled_statistics(
    sampled_scores: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    uncorrected: torch.Tensor,
    *,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> dict[str, float]:
    """The advantage statistics of a batch whose rewards were changed after sampling (GEC), on the
    responses as the policy sampled them (EDGE-GRPO Fig. 5's variance rises by construction when corrected,
    rewarded responses are inserted):

    adv_var, zero_variance_group_frac: ``advantage_statistics`` of the GRPO advantages of the rewards as
        sampled (``sampled_scores``, before any correction), grouped as trained;
    adv_var_uncorrected: the variance of the advantages as trained (``advantages`` (B, T)) over the responses
        left as sampled (``uncorrected`` (B,)) only;
    score_mean, correct_frac, all_wrong_group_frac, all_right_group_frac: ``outcome_statistics`` of the
        rewards as sampled (the logged reward of a GEC run is the corrected one).
    """
    outcome, _ = grpo_outcome(sampled_scores, group_index, num_groups, valid, norm_by_std=norm_by_std, epsilon=epsilon)
    mask = response_mask.to(torch.float32)
    stats = advantage_statistics(outcome[:, None] * mask, mask, sampled_scores, group_index, num_groups, valid)
    kept = advantage_statistics(advantages, mask, sampled_scores, group_index, num_groups, valid & uncorrected)
    return {
        "adv_var": stats["var"],
        "zero_variance_group_frac": stats["zero_variance_group_frac"],
        "adv_var_uncorrected": kept["var"],
        **outcome_statistics(sampled_scores, group_index, num_groups, valid),
    }


def per_source_statistics(
    sources: Sequence,
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_probs: Optional[torch.Tensor],
    group_index: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor,
    per_response: Optional[Mapping[str, torch.Tensor]] = None,
    estimator: Optional["Estimator"] = None,
) -> dict[str, dict[str, float]]:
    """Every training statistic of one step split by the responses' data source (a task of a mixture):
    {source: {stat: value}} over the valid responses of that source (a source with none is left out).

    score_mean, correct_frac, all_wrong_group_frac, all_right_group_frac: ``outcome_statistics``;
    zero_variance_group_frac: groups (>= 2 valid responses) whose scores all tie; response_length: mean
    number of response tokens; sampled_entropy: the token-pooled mean of -log pi_old over the sampled tokens
    (``old_log_probs``; left out when None), GEPO's Monte-Carlo entropy estimate (its Eq. 4) over the
    source's responses; responses: how many. With ``estimator`` (the step's) and the ``per_response`` values its
    ``compute`` returned: the estimator's own statistics of the source (its ``source_statistics``; GEPO's group
    entropy and attenuated fractions). A group's responses share one source (verl repeats a prompt's row, its data source included).
    """
    names = [str(value) for value in (sources.tolist() if hasattr(sources, "tolist") else sources)]
    if len(names) != scores.shape[0]:
        raise ValueError(f"per_source_statistics: {len(names)} sources for {scores.shape[0]} responses")
    labels, codes = np.unique(np.array(names, dtype=str), return_inverse=True)
    codes = torch.as_tensor(codes.reshape(-1), device=valid.device)
    mask = response_mask.to(torch.float32)
    lengths = mask.sum(dim=-1)
    nll = None if old_log_probs is None else -(old_log_probs.to(torch.float32) * mask).sum(dim=-1)
    valid = valid.to(torch.bool) & (lengths > 0)
    found: dict[str, dict[str, float]] = {}
    for code, source in enumerate(labels.tolist()):
        rows = valid & (codes == code)
        count = int(rows.sum())
        if not count:
            continue
        stats = outcome_statistics(scores, group_index, num_groups, rows)
        _, std, group_count = group_mean_std(scores.to(torch.float32), group_index, num_groups, rows)
        stats["zero_variance_group_frac"] = float(tied_group_fraction(std, group_count))
        stats["response_length"] = float(lengths[rows].mean())
        stats["responses"] = float(count)
        if nll is not None:
            stats["sampled_entropy"] = float(nll[rows].sum() / lengths[rows].sum())
        if estimator is not None and estimator.source_statistics is not None and per_response:
            stats.update(estimator.source_statistics(per_response, rows, group_index, num_groups))
        found[source] = stats
    return found


# --- step metrics: (B,) results reduced on the host ---------------------------------------------------------
# The estimators' step metrics (``edge_eda.eda_step_metrics``, ``gepo.gepo_step_metrics``) read their result's (B,)
# vectors off the device ONCE (``on_host``) and reduce them in numpy: a few dozen reductions over (B,) vectors,
# cheaper there than as small torch ops, and none of them a host sync of its own.

# EDA's stability per step (EDGE-GRPO's reviewers: the normalised entropy in the denominator has no stated
# bound): these quantiles of |advantage| and of the entropy ratio P_hat, next to verl's actor/grad_norm.
QUANTILES = {"p1": 0.01, "p50": 0.5, "p99": 0.99}


def on_host(*tensors: torch.Tensor) -> list[np.ndarray]:
    """The tensors, flattened, as float64 numpy arrays, with ONE device-to-host copy for all of them.

    float32, float64 and bool tensors only (the pure functions' outputs). CPU tensors are read in place
    (numpy views, widened); others go through one ``torch.cat``, which promotes them to their widest float
    type (each value exact, as in float64).
    """
    if all(tensor.device.type == "cpu" for tensor in tensors):
        arrays = [(tensor.detach() if tensor.requires_grad else tensor).numpy() for tensor in tensors]
        return [array.reshape(-1).astype(np.float64) for array in arrays]
    flat = torch.cat([tensor.reshape(-1) for tensor in tensors]).detach().cpu().numpy().astype(np.float64)
    return np.split(flat, np.cumsum([tensor.numel() for tensor in tensors])[:-1])


def masked_variance(values: np.ndarray, rows: np.ndarray, ddof: int = 1) -> float:
    """Variance (unbiased with the default ``ddof=1``) of ``values`` over ``rows`` (bool); 0 with ``ddof``
    rows or fewer. numpy's own ``var`` algorithm (pairwise sums, the same value to the last bit) without its
    per-call overhead, which is most of the cost on (B,) vectors."""
    picked = values[rows]
    if picked.size <= ddof:
        return 0.0
    deviation = picked - np.add.reduce(picked) / picked.size
    return float(np.add.reduce(deviation * deviation) / (picked.size - ddof))


def masked_extreme(values: np.ndarray, rows: np.ndarray, largest: bool, empty: float) -> float:
    """Max (``largest``) or min of ``values`` over ``rows``; ``empty`` when no row is selected."""
    picked = values[rows]
    if not picked.size:
        return empty
    return float(picked.max() if largest else picked.min())


def masked_quantiles(values: np.ndarray, rows: np.ndarray, name: str, empty: float) -> dict[str, float]:
    """``<name>_p1``, ``_p50``, ``_p99`` of ``values`` over ``rows`` (numpy's linear interpolation);
    ``empty`` for each when no row is selected."""
    picked = values[rows]
    if not picked.size:
        return {f"{name}_{label}": empty for label in QUANTILES}
    points = np.quantile(picked, list(QUANTILES.values()))
    return {f"{name}_{label}": float(point) for label, point in zip(QUANTILES, points)}


def masked_mean(values: np.ndarray, rows: np.ndarray, empty: float = 0.0) -> float:
    picked = values[rows]
    return float(picked.mean()) if picked.size else empty


def advantage_variance_metrics(before: np.ndarray, after: np.ndarray, valid: np.ndarray, tied_group_frac: float) -> dict[str, float]:
    """The step metrics every estimator of the plugin reports: tied groups, the advantage variance before and
    after its change to GRPO's advantage."""
    return {
        "zero_variance_group_frac": float(tied_group_frac),
        # unbiased (ddof = 1), as the EDGE-GRPO reference logs it and as edge_verl/adv/var
        "adv_var_before": masked_variance(before, valid),
        "adv_var_after": masked_variance(after, valid),
    }
