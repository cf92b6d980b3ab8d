"""One training run's lifecycle as the plugin sees it, in the order it happens, and the advantage step.

- **Before Ray** (``preflight``): every check of the plugin's options that needs only verl's composed config
  and the data files, in the driver (seconds instead of minutes after worker spawn and model load). A plain
  ``python -m verl.trainer.main_ppo ...`` runs it right after verl's own ``validate_config`` (``plugin.py``
  wraps it), where a failure ends the process with the message as its last lines (``PreflightFailed`` ->
  exit code 2); ``edge-verl preflight`` runs the same checks on the config composed from the recipes'
  overrides without importing verl. Checked: the estimator's options (``config.py``), EDA's gradient form and
  its prerequisite (``actor.calculate_entropy``), GEC's switch, rollout settings, token budgets and, for a
  placebo rewarded as gold, verl's reward settings; the data files (exist; a GEC run's training rows carry
  ``agent_name`` and the ground truth GEC grades with; no validation row is marked for GEC). The reflection
  phrase's token count, which needs the tokenizer, is checked when the agent loop starts.
- **``TrainingRun``**: one per verl trainer that uses the plugin (``plugin_in_use``), created when the
  trainer loads its checkpoint (before the first rollout, ``start_run``) and attached to the trainer object.
  It holds the run's options parsed and validated ONCE (which estimator, its options, whether GEC is on)
  and the estimator's training state (GEPO's EMA thresholds). A plain verl run gets none, and every trainer
  adapter passes it straight through.
- **Its state on disk**: ``edge_verl_state.json`` in each of verl's ``global_step_N`` checkpoint folders,
  written after verl's own checkpoint and read back on resume (an estimator without state has no file).
- **``AdvantageStep``**: one per advantage computation, opened by the trainer's adapter with ``with
  advantage_step(run, entropy=...) as step:`` around verl's own code. The estimator, called by verl, reads
  its inputs from ``current_step()`` and writes its metrics and loss columns into the step; the adapter
  returns them to verl after the block. Steps do not nest (a second one is an error), and every path,
  exceptions included, closes the step.

``active_run`` makes a run current for the legacy trainer's ``fit`` (its advantage function and agent-loop
manager have no reference to the trainer). Both "current" slots are ``contextvars.ContextVar``s: scoped,
reset by the ``with`` blocks, and private to the thread. They, and the other values that travel by a
channel verl's signatures do not show, are listed with their reasons in ARCHITECTURE.md ("How values
travel"). No verl import at module level: the preflight runs in processes that never import verl.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import torch
from omegaconf import OmegaConf

from edge_verl import names
from edge_verl.algorithms.gec import GecConfig, PlaceboProblem
from edge_verl.algorithms.seeds import keyed_seed, seed_global_generators
from edge_verl.config import MetricsConfig, SeedingConfig
from edge_verl.estimators.base import ESTIMATORS, VERL_GRPO_EPSILON, Estimator

STATE_FILE = "edge_verl_state.json"
EXIT_CODE = 2
PREFIX = "edge-verl preflight"


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
        return self.options.std_epsilon if self.entry is not None else VERL_GRPO_EPSILON

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
        from edge_verl.estimators.base import group_index_from_uids

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


# === before Ray: the preflight =================================================================================


class PreflightFailed(SystemExit):
    """A preflight error. A ``SystemExit`` so that Hydra's error reporting does not bury the message under
    a traceback: the process ends with ``EXIT_CODE`` and the message is the last thing printed."""

    def __init__(self, message: str):
        super().__init__(EXIT_CODE)
        self.message = message

    def __str__(self) -> str:
        return self.message


# --- GEC's switch against the data -------------------------------------------------------------------------


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


# --- the config ----------------------------------------------------------------------------------------------


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


# --- the data files ------------------------------------------------------------------------------------------


def data_paths(value: Any) -> list[str]:
    """``data.train_files`` / ``data.val_files`` (one path, or a list) as a list of strings."""
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return [str(value)]
    return [str(item) for item in value]


def _is_local(path: str) -> bool:
    return "://" not in path  # hdfs://, s3://, ...: verl copies those itself; nothing to check here


def check_files_exist(key: str, paths: Sequence[str]) -> list[Path]:
    """The local files of ``data.<key>``; a missing one is an error naming the key and how to make it."""
    local = [Path(path).expanduser() for path in paths if _is_local(path)]
    missing = [str(path) for path in local if not path.is_file()]
    if missing:
        raise FileNotFoundError(
            f"data.{key}: {', '.join(missing)} not found (relative paths are relative to {Path.cwd()}); write the "
            "papers' sets with `python scripts/prepare_data.py --out DIR` and point DATA_DIR / TRAIN_FILE there."
        )
    return local


def parquet_column(path: Path, column: str) -> Optional[list]:
    """One column of a parquet file ([] when it has no such column; None when the file is not parquet)."""
    if path.suffix != ".parquet":
        return None
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    if column not in schema.names:
        return []
    return pq.read_table(path, columns=[column]).column(column).to_pylist()


def _column_of(paths: Sequence[Path], column: str) -> Optional[list]:
    values: list = []
    for path in paths:
        found = parquet_column(path, column)
        if found is None:
            return None
        values += found
    return values


def check_gec_ground_truth(paths: Sequence[Path]) -> None:
    """GEC grades each response and injects the answer: its training rows need ``reward_model.ground_truth``."""
    import pyarrow.parquet as pq

    for path in paths:
        if path.suffix != ".parquet":
            continue
        schema = pq.read_schema(path)
        field = schema.field("reward_model") if "reward_model" in schema.names else None
        subfields = {field.type.field(i).name for i in range(field.type.num_fields)} if field is not None and hasattr(field.type, "num_fields") else set()
        if "ground_truth" not in subfields:
            raise ValueError(
                f"{path}: GEC grades responses against reward_model.ground_truth, which this file lacks; "
                "write the training set with scripts/prepare_data.py (train_*_gec.parquet)."
            )


def read_placebo_pool(train_files: Any) -> tuple[PlaceboProblem, ...]:
    """Every training problem with an answer, for answer_source=placebo (see the module docstring).

    ``train_files`` is verl's ``data.train_files``: one parquet path or a list of them (hdfs paths are
    copied as verl's RLHFDataset copies them), read in order, their rows numbered across the files as
    verl concatenates them. Columns as scripts/prepare_data.py writes them: the answer is
    ``extra_info.answer``, else the first of ``reward_model.ground_truth``; the solution
    ``extra_info.solution`` ("" when absent: such a problem lends no solution). A row with no answer lends
    nothing. Every row of the files counts: ``data.max_samples`` and verl's prompt-length filter do not
    apply here. A file that cannot be read as parquet or has neither column, or fewer than 2 problems
    with an answer in all, is an error.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from edge_verl.reward.normalize import normalise_answer
    from edge_verl.reward.score import gold_answers

    paths = [train_files] if isinstance(train_files, str) else list(train_files or ())
    pool: list[PlaceboProblem] = []
    row = 0
    for path in paths:
        try:
            local = str(path)
            if not _is_local(local):  # hdfs: copied as verl's RLHFDataset copies it (verl imported only then)
                from verl.utils.fs import copy_to_local

                local = copy_to_local(local)
            present = [name for name in ("extra_info", "reward_model") if name in pq.read_schema(local).names]
            table = pq.read_table(local, columns=present)
        except (OSError, pa.ArrowException) as error:
            raise ValueError(
                f"edge_gec.answer_source=placebo reads its answers from data.train_files, but {path!r} cannot be "
                f"read as parquet ({error}); list parquet files this worker can open, or use answer_source=gold."
            ) from error
        if not present:
            raise ValueError(
                f"edge_gec.answer_source=placebo: the training file {path!r} has neither an extra_info nor a "
                "reward_model column, so it holds no answers (write it with scripts/prepare_data.py)."
            )
        empty = [None] * table.num_rows
        extras = table.column("extra_info").to_pylist() if "extra_info" in present else empty
        rewards = table.column("reward_model").to_pylist() if "reward_model" in present else empty
        for extra_info, reward_model in zip(extras, rewards):
            extra_info = extra_info or {}
            answer = str(extra_info.get("answer") or "").strip()
            answer = answer or next(iter(gold_answers((reward_model or {}).get("ground_truth"))), "")
            if answer:
                solution = str(extra_info.get("solution") or "")
                pool.append(PlaceboProblem(row, answer, solution, normalise_answer(answer)))
            row += 1
    if len(pool) < 2:
        raise ValueError(
            f"edge_gec.answer_source=placebo lends one training problem's answer to another, but "
            f"data.train_files={paths} hold {len(pool)} problem(s) with an answer (extra_info.answer or "
            "reward_model.ground_truth); at least 2 are needed."
        )
    return tuple(pool)


def check_data(config: Any, run: TrainingRun) -> None:
    """The data files exist, GEC's switch agrees with their ``agent_name`` column, and a placebo run's
    training files lend answers (``read_placebo_pool``)."""
    data = config.get("data", None) or {}
    train = check_files_exist("train_files", data_paths(data.get("train_files", None)))
    val = check_files_exist("val_files", data_paths(data.get("val_files", None)))
    agent = config.actor_rollout_ref.rollout.get("agent", None) or {}
    check_gec_rows(
        run.gec_enabled, agent.get("default_agent_loop", None), _column_of(train, "agent_name"), _column_of(val, "agent_name")
    )
    if run.gec_enabled:
        check_gec_ground_truth(train)
        if run.gec.answer_source == "placebo":
            read_placebo_pool(data_paths(data.get("train_files", None)))


def preflight(config: Any) -> TrainingRun:
    """All of the above on verl's composed config; raises ``ValueError`` / ``FileNotFoundError`` with the
    message a user acts on. Returns the validated ``TrainingRun``."""
    run = check_run_config(config)
    check_data(config, run)
    return run


def preflight_or_exit(config: Any) -> TrainingRun:
    """``preflight`` for a command line: an error becomes ``PreflightFailed`` (message printed last)."""
    try:
        return preflight(config)
    except (ValueError, FileNotFoundError) as error:
        message = f"{PREFIX}: {error}"
        print(message, file=sys.stderr, flush=True)
        raise PreflightFailed(message) from None


# === in the trainer: attached before the first rollout, saved with every checkpoint ===========================

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


def _resumed_folder(trainer: Any) -> Optional[str]:
    if trainer.global_steps <= 0:
        return None
    config = trainer.config.trainer
    if config.resume_mode == "resume_path":
        folder = config.resume_from_path
    else:
        folder = os.path.join(config.default_local_dir, f"global_step_{trainer.global_steps}")
    return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)


def wrap_load_checkpoint(original: Callable) -> Callable:
    def _load_checkpoint(self, *args, **kwargs):
        run = run_of(self)
        result = original(self, *args, **kwargs)
        folder = _resumed_folder(self)
        if run is not None and folder is not None:
            restore_run_state(run, folder)
        return result

    return _load_checkpoint


def wrap_save_checkpoint(original: Callable) -> Callable:
    def _save_checkpoint(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        run = run_of(self)
        if run is not None and run.state is not None:
            save_state(os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"), run.state_dict())
        return result

    return _save_checkpoint


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


def save_state(checkpoint_dir: str, state: dict) -> str:
    """Write ``state`` atomically into ``checkpoint_dir``; returns the file's path."""
    os.makedirs(checkpoint_dir, exist_ok=True)
    path = os.path.join(checkpoint_dir, STATE_FILE)
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(state, handle, indent=2)
    os.replace(temporary, path)
    return path


def read_state(checkpoint_dir: str) -> Optional[dict]:
    path = os.path.join(checkpoint_dir, STATE_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def restore_run_state(run: TrainingRun, checkpoint_dir: str) -> None:
    """Restore the estimator's training state saved in ``checkpoint_dir`` into ``run`` (nothing to do for an
    estimator without state).

    A checkpoint without the state is an error unless the estimator's options accept it
    (``EstimatorOptions.resume_without_state``: ``gepo.resume_without_state``), in which case the state starts
    afresh from the next batch.
    """
    if run.state is None:
        return
    entry = run.entry
    saved = (read_state(checkpoint_dir) or {}).get(entry.state_key)
    if saved is None:
        if run.options.resume_without_state:
            return
        raise RuntimeError(
            f"Resuming {entry.name} from {checkpoint_dir}, which holds no {entry.state_key} ({STATE_FILE}). Set "
            f"algorithm.{entry.name}.resume_without_state=true to restart them from the next batch."
        )
    run.state.load_state_dict(saved)
