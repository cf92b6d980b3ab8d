"""Every check of the plugin's options that needs only verl's composed config and the data files, run in
the driver BEFORE Ray starts (seconds instead of minutes after worker spawn and model load).

Two entry points share ``preflight(config)``:
- a plain ``python -m verl.trainer.main_ppo ...``: verl's ``main`` calls ``verl.utils.config.validate_config``
  before ``run_ppo`` (and so before ``ray.init``); the plugin wraps it (``trainer_hooks``) to run the
  preflight right after verl's own validation, and a failure ends the process with the message as the last
  lines of the output (``PreflightFailed`` -> exit code 2);
- ``edge-verl preflight --config-name NAME OVERRIDES...``: composes verl's config from the same overrides
  without importing verl (its config folder is read from disk) and runs the same checks; the recipes call it
  first, with the run-identity check.

What is checked: the estimator's options (unknown key, bad value; ``config.py``), EDA's gradient form and
its prerequisite (``actor.calculate_entropy``), GEC's switch, rollout settings, token budgets and, for a
placebo rewarded as gold, verl's reward settings (``check_placebo_reward``), the data
files (exist; a GEC run's training rows carry ``agent_name`` and the ground truth GEC grades with; no
validation row is marked for GEC). The tokenizer-dependent part of GEC's budget (the reflection phrase's
token count) is checked when the agent loop starts (``gec_agent_loop``).

No verl import here: the module runs in processes that never import verl.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from edge_verl import names
from edge_verl.config import GecConfig
from edge_verl.integration.run import TrainingRun, bypass_mode_enabled, gec_options

EXIT_CODE = 2
PREFIX = "edge-verl preflight"


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

    from edge_verl.algorithms.gec import PlaceboProblem
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
        import sys

        message = f"{PREFIX}: {error}"
        print(message, file=sys.stderr, flush=True)
        raise PreflightFailed(message) from None


# --- the command line: compose verl's config without importing verl -----------------------------------------


def verl_config_dir() -> Path:
    """verl's ``trainer/config`` folder, found without importing verl (``import verl`` costs seconds)."""
    import importlib.util
    import sys

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"verl is not installed for {sys.executable}: activate the environment that has it, or set PYTHON")
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


def compose_verl_config(config_name: str, overrides: Sequence[str], config_path: Optional[str] = None) -> Any:
    """verl's Hydra config as ``main_ppo`` composes it from ``--config-name``/``--config-path`` and overrides."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()  # hydra's initialize_* set the global state when constructed
    if config_path and config_path.startswith("pkg://"):
        context = initialize_config_module(config_module=config_path.removeprefix("pkg://"), version_base=None)
    else:
        folder = Path(config_path).resolve() if config_path else verl_config_dir()
        context = initialize_config_dir(config_dir=str(folder), version_base=None)
    try:
        with context:
            return compose(config_name=config_name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def run_identity_of(config: Any, method: str, backend: str, tag: str = "") -> dict:
    """The recipes' run identity from the composed config: what verl will actually run (Hydra's
    last-value-wins already applied)."""
    from edge_verl.run_identity import describe

    data = config.data
    return describe(
        method, str(config.actor_rollout_ref.model.path), data_paths(data.train_files), backend, data.get("seed", None), tag
    )
