"""One training run as the plugin sees it, and its advantage steps (no verl import at module level: the preflight
runs in processes that never import verl).

- **``TrainingRun``**: one per verl trainer that uses the plugin (``plugin_in_use``), created when the trainer
  loads its checkpoint (before the first rollout, ``start_run``) and attached to the trainer object. It holds the
  run's options parsed and validated ONCE (which estimator, its registry entry and options, whether GEC is on, the
  extra metrics, the seeding) and the estimator's training state (GEPO's EMA thresholds; with every checkpoint,
  ``checkpoint.py``). ``check_run_config`` checks what one option section cannot (EDA's gradient form and its
  prerequisite, GEC's rollout settings and token budgets, a placebo's reward settings, the estimator's fewest
  groups); the preflight (``preflight.py``) runs it before Ray, with the data files' checks. A plain verl run gets
  no run, and every trainer adapter passes it straight through.
- **``AdvantageStep``**: one per advantage computation, opened by the trainer's adapter with ``with
  advantage_step(run, entropy=...) as step:`` around verl's own code. Steps do not nest (a second one is an
  error), and every path, exceptions included, closes the step.
- **The estimator adapter** (``verl_estimator``): the ONE function verl's registry calls for every estimator of
  the registry (``edge_verl/estimators/``). verl 0.9.1 calls a registered estimator with token_level_rewards,
  response_mask, index (uid) and config (= ``config.algorithm``) only; the per-token inputs an estimator reads come
  from the open step (filled by the trainer adapter) or from ``batch=`` (the signature of upstream PR #7473, verl's
  own key names). It unpacks into a ``GroupBatch``, calls the estimator's function, hands its metrics, loss
  columns and per-response values to the step, and packs. Options and state come parsed once from the current
  run. Missing inputs raise; there is no silent fallback to GRPO. ``register_estimators`` puts it in verl's
  registry when verl imports ``core_algos`` (``plugin.py``).

``active_run`` makes a run current for the legacy trainer's ``fit`` (its advantage function and agent-loop
manager have no reference to the trainer). Both "current" slots are ``contextvars.ContextVar``s: scoped,
reset by the ``with`` blocks, and private to the thread. They, and the other values that travel by a
channel verl's signatures do not show, are listed with their reasons in ARCHITECTURE.md ("How values
travel").
"""

from __future__ import annotations

import contextlib
import warnings
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import torch
from omegaconf import OmegaConf

from edge_verl import names
from edge_verl.algorithms.gec import GecConfig
from edge_verl.algorithms.seeds import keyed_seed, seed_global_generators
from edge_verl.config import MetricsConfig, SeedingConfig
from edge_verl.estimators.base import (
    ESTIMATORS, TOKEN_INPUTS, VERL_BATCH_KEYS, VERL_GRPO_EPSILON, Estimator, GroupBatch, group_index_from_uids,
)


# --- the run's options, parsed once -----------------------------------------------------------------------------


def config_section(config: Any, name: str) -> dict:
    """``config.<name>`` (a DictConfig, a dict, or absent) as a plain dict."""
    if config is None:
        return {}
    section = config.get(name, None) if hasattr(config, "get") else getattr(config, name, None)
    if section is None:
        return {}
    if OmegaConf.is_config(section):
        return OmegaConf.to_container(section, resolve=True)
    return dict(section)

def bypass_mode_enabled(algorithm_config: Any) -> bool:
    """verl's bypass mode skips the old-policy pass (no entropy, old_log_probs := rollout log-probs)."""
    return bool(config_section(algorithm_config, "rollout_correction").get("bypass_mode", False))

def norm_adv_by_std(algorithm_config: Any) -> bool:
    """verl's ``algorithm.norm_adv_by_std_in_grpo`` (default True), honoured by both estimators."""
    return bool(algorithm_config.get("norm_adv_by_std_in_grpo", True)) if hasattr(algorithm_config, "get") else True

def estimator_options(algorithm_config: Any, estimator: str) -> Any:
    """The validated options of one of the plugin's estimators (``estimators.ESTIMATORS``) from
    ``algorithm.<estimator>``."""
    if bypass_mode_enabled(algorithm_config):
        raise ValueError(
            f"algorithm.adv_estimator={estimator} needs the old-policy forward pass (per-token entropy / "
            "old_log_probs), which algorithm.rollout_correction.bypass_mode=True skips; set it to False."
        )
    return ESTIMATORS[estimator].options(config_section(algorithm_config, estimator))

def plugin_in_use(algorithm_config: Any) -> bool:
    """The run asks for something of the plugin: one of its estimators, or options under
    ``algorithm.edge_gec`` / ``algorithm.edge_metrics`` / ``algorithm.edge_seeding`` (which are then validated,
    even when they switch nothing on). Plain look-ups, nothing parsed: a plain verl run pays nothing."""
    if not hasattr(algorithm_config, "get"):
        return False
    if str(algorithm_config.get("adv_estimator", "")) in ESTIMATORS:
        return True
    sections = (names.GEC_SECTION, names.METRICS_SECTION, names.SEEDING_SECTION)
    return any((section := algorithm_config.get(name, None)) is not None and len(section) > 0 for name in sections)

def seeding_options(algorithm_config: Any) -> Optional[SeedingConfig]:
    """The validated ``algorithm.edge_seeding`` options of a run that uses the plugin, None for a plain run
    (whose sampling stays verl's)."""
    if not plugin_in_use(algorithm_config):
        return None
    return SeedingConfig.from_mapping(config_section(algorithm_config, names.SEEDING_SECTION))

def sampling_seed(config: Any) -> Optional[int]:
    """The run's sampling seed (``actor_rollout_ref.rollout.seed``) when its responses are seeded one by one
    (``algorithm.edge_seeding.enable`` in a run that uses the plugin), else None. ``config``: verl's whole config."""
    options = seeding_options(config.get("algorithm", None))
    if options is None or not options.enable:
        return None
    return int(config.actor_rollout_ref.rollout.get("seed", 0) or 0)

def gec_options(algorithm_config: Any) -> GecConfig:
    """The validated ``algorithm.edge_gec`` options (``enable`` is GEC's one switch)."""
    return GecConfig.from_mapping(config_section(algorithm_config, names.GEC_SECTION))


@dataclass
class TrainingRun:
    """The plugin's view of one verl training run (see module docstring).

    estimator: ``algorithm.adv_estimator``; entry: its ``estimators.Estimator`` when it is one of ours, and
    options its validated config; gec: the validated GEC options (``gec.enable`` says whether GEC is on);
    metrics: the extra metrics asked for (``algorithm.edge_metrics``); seeding: whether responses are seeded one
    by one and the update batch ordered (``algorithm.edge_seeding``); state: the estimator's training state
    (GEPO's thresholds; saved with every checkpoint under ``entry.state_key``); grader_metrics: the run
    grades with edge_verl's reward (log ``edge_verl/grader/*``).
    """

    estimator: str
    options: Any
    gec: GecConfig
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    seeding: SeedingConfig = field(default_factory=SeedingConfig)
    state: Any = None
    grader_metrics: bool = False
    norm_adv_by_std: bool = True  # verl's algorithm.norm_adv_by_std_in_grpo

    @classmethod
    def from_config(cls, algorithm_config: Any) -> "TrainingRun":
        """Parse and validate ``config.algorithm`` once; errors name the key and the allowed values."""
        estimator = str(algorithm_config.get("adv_estimator", "") if hasattr(algorithm_config, "get") else "")
        entry = ESTIMATORS.get(estimator)
        options = estimator_options(algorithm_config, estimator) if entry is not None else None
        return cls(
            estimator=estimator,
            options=options,
            gec=gec_options(algorithm_config),
            metrics=MetricsConfig.from_mapping(config_section(algorithm_config, names.METRICS_SECTION)),
            seeding=SeedingConfig.from_mapping(config_section(algorithm_config, names.SEEDING_SECTION)),
            state=entry.new_state(options) if entry is not None else None,
            norm_adv_by_std=norm_adv_by_std(algorithm_config),
        )

    @property
    def entry(self) -> Optional[Estimator]:
        """The estimator's table entry (None for verl's own estimators)."""
        return ESTIMATORS.get(self.estimator) if self.options is not None else None

    @property
    def std_epsilon(self) -> float:
        """The epsilon of the estimator's GRPO normalisation (verl's for verl's estimators)."""
        return self.entry.std_epsilon(self.options) if self.entry is not None else VERL_GRPO_EPSILON

    @property
    def uses_plugin_estimator(self) -> bool:
        return self.options is not None

    @property
    def gec_enabled(self) -> bool:
        return self.gec.enable

    @property
    def advantage_stats(self) -> bool:
        return self.metrics.advantage_stats

    @property
    def per_source(self) -> bool:
        return self.metrics.per_source

    @property
    def opens_advantage_step(self) -> bool:
        """The advantage step has work for the plugin: its estimator, statistics of verl's (per data source
        too), or GEC's token origins for the actor loss."""
        return self.uses_plugin_estimator or self.advantage_stats or self.per_source or self.gec_enabled

    @property
    def token_inputs(self) -> tuple[str, ...]:
        """The per-token inputs the estimator reads with its options (``estimators.TOKEN_INPUTS``)."""
        return self.entry.inputs(self.options) if self.entry is not None else ()

    @property
    def needs_entropy(self) -> bool:
        """The estimator reads the old policy's per-token entropy (EDA; GEPO with token_entropy)."""
        return "entropy" in self.token_inputs

    @property
    def loss_metrics(self) -> tuple[tuple[str, str], ...]:
        """(actor metric key, or key prefix ending in "/", without verl's "actor/"; the option that asks for
        it) for each feature whose work these options move into the actor loss (EDA's gradient form, GEC's
        masked / sft): an update must report it."""
        wanted = [self.entry.loss_metric(self.options) if self.entry is not None else None]
        if self.gec.enable and self.gec.injected_loss != "surrogate":
            wanted.append((f"{names.GEC_LOSS_SCOPE}/", f"algorithm.{names.GEC_SECTION}.injected_loss={self.gec.injected_loss}"))
        return tuple(key for key in wanted if key is not None)

    def state_dict(self) -> dict:
        """The estimator's state under its ``state_key`` ({} without state)."""
        return {self.entry.state_key: self.state.state_dict()} if self.state is not None else {}


# --- the run's options, checked together (before Ray, ``preflight.py``; and again in the trainer, ``start_run``) ---


def check_gec_rows(
    enabled: bool, default_agent_loop: Optional[str], train_agent_names: Optional[Iterable], val_agent_names: Optional[Iterable]
) -> None:
    """GEC's one switch (``algorithm.edge_gec.enable``) must agree with the data; errors say what to change.

    ``*_agent_names``: the data's ``agent_name`` column ([] without one; None when it cannot be read)."""
    loop = names.GEC_AGENT_LOOP
    if default_agent_loop == loop:
        raise ValueError(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={loop} would correct validation responses too; "
            f"keep verl's default loop, set algorithm.edge_gec.enable=True and mark TRAINING rows with agent_name={loop}."
        )
    if val_agent_names is not None and loop in set(val_agent_names):
        raise ValueError(f"The validation data marks rows with agent_name={loop}: validation must never be corrected.")
    if train_agent_names is None:
        return
    has_gec_rows = loop in set(train_agent_names)
    if enabled and not has_gec_rows:
        raise ValueError(
            f"algorithm.edge_gec.enable=True but no training row has agent_name={loop}, so GEC would never run: "
            "train on the *_gec.parquet files of scripts/prepare_data.py (or add that column)."
        )
    if has_gec_rows and not enabled:
        raise ValueError(
            f"The training data marks rows with agent_name={loop} but GEC is off: set algorithm.edge_gec.enable=True "
            "(EDGE-GRPO), or train on data without that column."
        )

def check_gec_supported(config: Any) -> GecConfig:
    """Refuse settings under which GEC's injected tokens would corrupt verl's bookkeeping; the options."""
    options = gec_options(config.algorithm)
    rollout = config.actor_rollout_ref.rollout
    if rollout.get("calculate_log_probs", False):
        raise ValueError(
            "The edge_gec agent loop injects tokens the rollout never sampled, which have no rollout log-probs; "
            "set actor_rollout_ref.rollout.calculate_log_probs=False (rollout-correction IS/RS then stays off)."
        )
    if bypass_mode_enabled(config.algorithm):
        raise ValueError("edge_gec needs recomputed old log-probs; set algorithm.rollout_correction.bypass_mode=False.")
    if options.first_sample_tokens is not None:
        check_budget(options, int(rollout.response_length))
    check_token_budgets(config)
    check_placebo_reward(config, options)
    return options

def check_token_budgets(config: Any) -> None:
    """With dynamic batch sizes, each pass packs micro-batches up to a token budget per GPU (times the
    Ulysses sequence-parallel size), and verl's ``rearrange_micro_batches`` asserts that one whole sequence,
    prompt + response at the padded length, fits: a GEC run's responses are the longest a corrected response
    may be (first sample + phrase + continuation, or a whole solution; one that does not fit is skipped). Refuse
    here, before Ray starts, rather than at the first update after a whole rollout."""
    actor_rollout_ref = config.actor_rollout_ref
    passes = (
        ("actor", "use_dynamic_bsz", "ppo_max_token_len_per_gpu"),
        ("rollout", "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"),
        ("ref", "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"),
    )
    for section, switch, key in passes:
        part = actor_rollout_ref.get(section, None) or {}
        if not part.get(switch, False) or part.get(key, None) is None:
            continue
        sequence = int(actor_rollout_ref.rollout.prompt_length) + int(actor_rollout_ref.rollout.response_length)
        # the rollout's old-log-prob pass runs on the actor, under the actor's sequence parallel
        parallel = int((actor_rollout_ref.actor if section == "rollout" else part).get("ulysses_sequence_parallel_size", 1) or 1)
        budget = int(part[key]) * parallel
        if budget < sequence:
            raise ValueError(
                f"actor_rollout_ref.{section}.{key}={part[key]}{f' x ulysses_sequence_parallel_size={parallel}' if parallel > 1 else ''} "
                f"= {budget} tokens cannot hold one GEC-corrected sequence: data.max_prompt_length + data.max_response_length "
                f"= {sequence} (the response holds the first sample, the reflection phrase and the continuation). Raise "
                f"{key} to at least {-(-sequence // parallel)}, or set actor_rollout_ref.{section}.{switch}=False."
            )

def check_placebo_reward(config: Any, options: GecConfig) -> None:
    """``placebo_reward=as_gold`` rewards a placebo response in the agent loop, as verl's naive reward manager
    rewards its gold twin (``gec_agent_loop``); verl keeps that reward, and the batch its extra-info keys,
    only when the naive manager scores every response inside the agent loop (no reward model: verl's
    ``enable_agent_reward_loop``, ray_trainer.py:949). Defaults are verl's where a key is absent."""
    if options.answer_source != "placebo" or options.placebo_reward != "as_gold":
        return
    reward = config.get("reward", None) or {}
    manager = reward.get("reward_manager", None) or {}
    source, name = manager.get("source", "register"), manager.get("name", "naive")
    fix = "or set algorithm.edge_gec.placebo_reward=graded (the placebo graded against the row's gold)"
    if (source, name) != ("register", "naive"):
        raise ValueError(
            f"algorithm.edge_gec.placebo_reward=as_gold rewards a placebo response as verl's naive reward manager "
            f"rewards its gold twin, but reward.reward_manager is source={source!r}, name={name!r}, whose rewards and "
            f"extra-info keys may differ: the placebo would not share EDGE's rewards. Use reward.reward_manager.name=naive "
            f"(source=register), {fix}."
        )
    model = reward.get("reward_model", None) or {}
    if model.get("enable", False):
        why = (
            "with enable_resource_pool the naive manager hands the reward function the reward model's router, which "
            "GEC's grading in the agent loop does not, so the twin's reward would not be the reward loop's"
            if model.get("enable_resource_pool", False)
            else "without enable_resource_pool verl scores rewards after the rollout, not in the agent loop, so the "
            "twin's reward would be overwritten or break the batch's reward extra info"
        )
        raise ValueError(
            f"algorithm.edge_gec.placebo_reward=as_gold needs every reward scored by the run's reward function in "
            f"verl's agent loop, but reward.reward_model.enable=True: {why}. Run without a reward model, {fix}."
        )

def check_budget(options: GecConfig, response_length: int, phrase_tokens: int = 0) -> None:
    """With a first-sample cap, a regenerated response (first sample + phrase + continuation) must fit in
    rollout.response_length, or the truncated responses GEC targets would lose their continuation."""
    first = options.first_sample_tokens
    if first is None:
        return
    needed = first + phrase_tokens + options.continuation_tokens
    if needed > response_length:
        raise ValueError(
            f"algorithm.edge_gec.first_sample_tokens={first} + the reflection phrase ({phrase_tokens} tokens) + "
            f"continuation_tokens={options.continuation_tokens} = {needed} exceeds actor_rollout_ref.rollout.response_length="
            f"{response_length}: raise response_length to at least {needed} (data.max_response_length) or lower first_sample_tokens."
        )

def uses_edge_reward(config: Any) -> bool:
    """verl's config grades with edge_verl's reward (``reward.custom_reward_function`` or the legacy
    top-level ``custom_reward_function``)."""
    sections = [config.get("reward", {}) or {}, config]
    for section in sections:
        function = section.get("custom_reward_function", None) or {}
        path = str(function.get("path", "") or "")
        if names.REWARD_MODULE in path.replace("/", "."):
            return True
    return False

def check_run_config(config: Any) -> TrainingRun:
    """The run's ``TrainingRun`` from verl's full config: options validated, GEC's settings checked."""
    run = TrainingRun.from_config(config.algorithm)
    run.grader_metrics = uses_edge_reward(config)
    prompts = (config.get("data", None) or {}).get("train_batch_size", None)
    if run.entry is not None and prompts is not None:  # verl's config always has it
        run.entry.check_groups(int(prompts), "data.train_batch_size")
    why = run.entry.loss_entropy(run.options) if run.entry is not None else None
    if why is not None:
        actor = config.actor_rollout_ref.actor
        if not (actor.get("calculate_entropy", False) or float(actor.get("entropy_coeff", 0.0) or 0.0) != 0.0):
            raise ValueError(f"{why}; verl computes that entropy only when asked: set actor_rollout_ref.actor.calculate_entropy=True.")
    if run.gec_enabled:
        check_gec_supported(config)
    return run


# --- attached to verl's trainer -------------------------------------------------------------------------------

_RUN_ATTRIBUTE = "_edge_verl_run"


def agent_names(dataset: Any) -> Optional[list]:
    """The ``agent_name`` column of a verl RL dataset ([] without the column; None when unreadable)."""
    frame = getattr(dataset, "dataframe", None)
    if frame is None or not hasattr(frame, "column_names"):
        return None
    return list(frame["agent_name"]) if "agent_name" in frame.column_names else []

def start_run(trainer: Any) -> Optional[TrainingRun]:
    """The run's ``TrainingRun`` (None for a run that does not use the plugin), checked against its data;
    attached to the trainer. A seeded run also seeds the trainer process's global generators from its seed (verl
    shuffles its validation loader with torch's global generator)."""
    config = trainer.config
    run = check_run_config(config) if plugin_in_use(config.algorithm) else None
    if run is not None:
        agent = config.actor_rollout_ref.rollout.get("agent", None) or {}
        check_gec_rows(
            run.gec_enabled,
            agent.get("default_agent_loop", None),
            agent_names(getattr(trainer, "train_dataset", None)),
            agent_names(getattr(trainer, "val_dataset", None)),
        )
    if run is not None and run.seeding.enable:  # before the first rollout, validation and dataloader iteration
        seed_global_generators(keyed_seed("trainer", sampling_seed(config)))
    setattr(trainer, _RUN_ATTRIBUTE, run)
    return run

def run_of(trainer: Any) -> Optional[TrainingRun]:
    return getattr(trainer, _RUN_ATTRIBUTE) if hasattr(trainer, _RUN_ATTRIBUTE) else start_run(trainer)


_NOT_IN_WORKERS = "the edge_verl plugin did not run in the actor workers (check VERL_USE_EXTERNAL_PLUGINS and `edge-verl doctor`)."


def check_loss_hook_ran(run: Optional[TrainingRun], metric_keys: Iterable[str]) -> None:
    """Work a feature moves into the actor workers' loss (EDA's gradient form, GEC's masked / sft controls;
    ``TrainingRun.loss_metrics``) reports a metric there: an update without it means the plugin was not
    loaded in the workers (the paper's surrogate, or the detached form, would train silently)."""
    if run is None:
        return
    keys = set(metric_keys)
    for metric, option in run.loss_metrics:
        wanted = f"{names.ACTOR_METRIC_PREFIX}/{metric}"
        found = any(key.startswith(wanted) for key in keys) if wanted.endswith("/") else wanted in keys
        if not found:
            shown = wanted + "*" if wanted.endswith("/") else wanted
            raise RuntimeError(f"{option} but the actor update reported no {shown} metric: {_NOT_IN_WORKERS}")


# --- the advantage step ---------------------------------------------------------------------------------------


@dataclass
class AdvantageStep:
    """Inputs handed to the estimator for one advantage computation, and what it hands back.

    inputs: per-token tensors (B, T) under the plugin's names: "entropy" (old policy's token entropy),
    "old_log_probs". metrics: the step's metrics, already prefixed for verl's logger. loss_columns:
    per-token tensors (B, T) the estimator wants next to ``advantages`` in the actor's batch (EDA's
    gradient form, ``names.EDA_*_COLUMN``), 0 off the response tokens; loss_options: batch-level values
    for the actor loss (``names.EDA_OPTIONS_KEY``). The trainer adapters return all three to verl.
    sources: the responses' ``data_source`` (B,), when the run logs per-source statistics and the adapter's
    batch carries them; per_response: per-response (B,) values an estimator hands to those statistics
    (GEPO: ``estimators.base.per_source_statistics``'s ``gepo`` fields).
    """

    run: Optional[TrainingRun]  # None: verl's compute_advantage called outside a trainer
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    loss_columns: dict[str, torch.Tensor] = field(default_factory=dict)
    loss_options: dict[str, Any] = field(default_factory=dict)
    sources: Optional[Any] = None
    per_response: dict[str, torch.Tensor] = field(default_factory=dict)
    _groupings: dict[int, tuple[Any, tuple]] = field(default_factory=dict, repr=False)

    def grouping(self, uids: Any) -> tuple[torch.Tensor, int, torch.Tensor]:
        """``group_index_from_uids(uids)``, computed once per uid array in this step: the estimator and the
        step's advantage statistics share it (verl hands both the same ``uid`` array)."""
        cached = self._groupings.get(id(uids))
        if cached is None or cached[0] is not uids:
            cached = self._groupings[id(uids)] = (uids, group_index_from_uids(uids))
        return cached[1]


_CURRENT_RUN: ContextVar[Optional[TrainingRun]] = ContextVar("edge_verl_run", default=None)
_CURRENT_STEP: ContextVar[Optional[AdvantageStep]] = ContextVar("edge_verl_step", default=None)


def current_run() -> Optional[TrainingRun]:
    return _CURRENT_RUN.get()

def current_step() -> Optional[AdvantageStep]:
    return _CURRENT_STEP.get()

@contextlib.contextmanager
def active_run(run: TrainingRun) -> Iterator[TrainingRun]:
    """Make ``run`` the current training run for the block (the legacy trainer's ``fit``)."""
    token = _CURRENT_RUN.set(run)
    try:
        yield run
    finally:
        _CURRENT_RUN.reset(token)

@contextlib.contextmanager
def advantage_step(run: Optional[TrainingRun], **inputs: Optional[torch.Tensor]) -> Iterator[AdvantageStep]:
    """One advantage computation of ``run``: hand ``inputs`` (None values are skipped) to the estimator."""
    if _CURRENT_STEP.get() is not None:
        raise RuntimeError("an advantage step is already open: each trainer adapter opens exactly one per step")
    step = AdvantageStep(run=run, inputs={key: value for key, value in inputs.items() if value is not None})
    token = _CURRENT_STEP.set(step)
    try:
        yield step
    finally:
        _CURRENT_STEP.reset(token)

def prefixed(metrics: Mapping[str, float], *scope: str) -> dict[str, float]:
    """``{"x": 1}`` -> ``{"edge_verl/<scope>/x": 1}`` (verl's logger groups by the prefix)."""
    prefix = "/".join((names.METRIC_PREFIX, *scope))
    return {f"{prefix}/{key}": value for key, value in metrics.items()}


# --- the estimator adapter: what verl's registry calls for every estimator of the registry -------------------


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
    compute_advantage.__doc__ = f"verl estimator ``{entry.name}``: {entry.description} (edge_verl.integration.run)."
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
