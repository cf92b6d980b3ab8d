"""The recipes (``recipes/run_*.sh``) as data, and the writer that turns each into one self-contained,
readable verl command, the way verl's own ``examples/`` are written.

A recipe is a method on a model with a backend, under the training setup its paper used: ``RECIPES``. Its
text follows from three definitions and nothing else: the method's overrides (``edge_verl/methods.py``,
written into the file literally, each run parameter as a recipe variable: ``RUN_VARIABLES``), the training
setup (``TRAINING_SETUPS``: EDGE-GRPO's knobs or GEPO's, which a method and its GRPO baseline share) and
the backend's settings (``BACKENDS``: all an FSDP recipe and its Megatron twin differ in). Everything else
is the same in every recipe. ``edge-verl recipe --write`` writes the files (``recipe_files.py``); tests/test_recipes.py holds every
committed file byte-identical to its definition, so a method is still defined in one place, and a recipe
is still a file a user can read, copy and edit.

What differs from verl's examples, deliberately: before verl starts, a recipe runs ``edge-verl preflight``
on the very overrides verl will get (every plugin option, the data files, and the run identity that keeps
another run's checkpoint from being resumed); the helpers that are not part of the command (the interpreter
check, the CPU switch of the tests' tiny-model runs, DRY_RUN's printer) live in ``recipes/lib/launch.sh``.

No verl import.
"""

from __future__ import annotations

import re
import string
import textwrap
from dataclasses import dataclass
from pathlib import Path

from edge_verl.data import PAPER_EVAL
from edge_verl.methods import Method, SYMMETRIC_ALPHA, get_method, method_override_parts

WIDTH = 118  # comment lines are wrapped to this width
NOTE_COLUMN = 52  # a variable's note starts after this column when it fits on the line
GEC_PHRASE_ROOM = 32  # tokens of room for GEC's reflection phrase between the first sample and its continuation


@dataclass(frozen=True)
class Variable:
    """One line of a recipe's user-adjustable block: ``NAME=${NAME:-default}``, with a note after it (a short
    one) or above it (a long one)."""

    name: str
    default: str
    note: str = ""

    def lines(self) -> list[str]:
        line = f"{self.name}=${{{self.name}:-{self.default}}}"
        if not self.note:
            return [line]
        beside = f"{line:<{NOTE_COLUMN}}  # {self.note}"
        return [beside] if len(beside) <= WIDTH else [*comment(self.note), line]


@dataclass(frozen=True)
class TrainingSetup:
    """A paper's training setup (``methods.KNOBS``): the knobs a method and its GRPO baseline share."""

    name: str
    summary: str  # the header's "Training setup" line
    train_set: str  # the prepared training set: DATA_DIR/train_<set>.parquet (a GEC method: its _gec rows)
    batch: tuple[Variable, ...]  # TRAIN_BATCH_SIZE, ROLLOUT_N
    schedule: tuple[Variable, ...]  # TOTAL_EPOCHS, TOTAL_STEPS


TRAINING_SETUPS = {
    "edge": TrainingSetup(
        "edge",
        "EDGE-GRPO's (arXiv 2507.21848): G = 8 responses per prompt, 1 prompt per step, 1000 steps (1 epoch of Hard-1K), "
        "lr 1e-6, T = 0.6, max response 1024 tokens",
        "hard_1k",
        (
            Variable("TRAIN_BATCH_SIZE", "1", "prompts per step (paper: 1 prompt per optimizer step)"),
            Variable("ROLLOUT_N", "8", "responses per prompt (G)"),
        ),
        (
            Variable("TOTAL_EPOCHS", "1"),
            Variable("TOTAL_STEPS", "null", "null: TOTAL_EPOCHS passes over the training set"),
        ),
    ),
    "gepo": TrainingSetup(
        "gepo",
        "GEPO's (arXiv 2607.16850): K = 16 responses per prompt, 32 prompts per step, 300 steps on Random-1K, lr 1e-6, "
        "T = 0.6, max response 1024 tokens",
        "random_1k",
        (
            Variable("TRAIN_BATCH_SIZE", "32", "prompts per step: GEPO's thresholds are statistics over the step's groups"),
            Variable("ROLLOUT_N", "16", "responses per prompt (K)"),
        ),
        (
            Variable("TOTAL_EPOCHS", "10"),
            Variable(
                "TOTAL_STEPS", "300",
                "~10 epochs of 1000 prompts at 32 per step: with gamma = 0.01 the EMA thresholds keep (1 - 0.01)^300 = "
                "4.9% of their first-batch seed by the end (73% after one 31-step epoch), i.e. they have settled onto "
                "the running batch statistics (time constant 1/gamma = 100 steps)",
            ),
        ),
    ),
}


@dataclass(frozen=True)
class Backend:
    """A training backend: verl's trainer config, the recipe variables and overrides only it has, and its GPU
    stack. An FSDP recipe and its Megatron twin differ in these and nothing else."""

    name: str  # fsdp, megatron: part of the run's name and identity
    label: str
    config_name: str  # verl's trainer config (--config-name)
    array: str  # the name of its overrides' array in the recipe
    note: str  # the comment above its variables
    variables: tuple[Variable, ...]
    overrides: tuple[str, ...]
    setup: str  # the command that installs its GPU stack


BACKENDS = {
    "fsdp": Backend(
        "fsdp", "FSDP", "ppo_trainer", "FSDP",
        "FSDP: verl 0.9.1's FSDP optimizer has no linear decay (the papers'): cosine decays to 0 too (a deliberate "
        "deviation). The policy head, the same for every method (docs/performance.md#the-tiled-head): log-probs and "
        "entropy from the hidden states through verl's fused-kernel seam; edge_tiled, the plugin's tiled head (any "
        "device, EDA's gradient form at GRPO's memory); triton or torch, verl's; USE_FUSED_KERNELS=False, verl's eager "
        "head (the logits materialised)",
        (Variable("LR_SCHEDULER", "cosine"), Variable("USE_FUSED_KERNELS", "True"), Variable("LOGPROB_HEAD", "edge_tiled")),
        (
            'actor_rollout_ref.actor.optim.lr_scheduler_type="$LR_SCHEDULER"',
            "actor_rollout_ref.actor.optim.min_lr_ratio=0.0",
            'actor_rollout_ref.model.use_fused_kernels="$USE_FUSED_KERNELS"',
            'actor_rollout_ref.model.fused_kernel_options.impl_backend="$LOGPROB_HEAD"',
            "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.ref.strategy=fsdp2",
            "actor_rollout_ref.actor.fsdp_config.param_offload=False",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
        ),
        "bash scripts/setup_gpu.sh",
    ),
    "megatron": Backend(
        "megatron", "Megatron", "ppo_megatron_trainer", "MEGATRON",
        "Megatron: tensor and pipeline parallel sizes of the actor and the reference model; linear learning-rate decay",
        (Variable("MEGATRON_TP", "2"), Variable("MEGATRON_PP", "1")),
        (
            "actor_rollout_ref.actor.optim.lr_decay_style=linear",
            "actor_rollout_ref.actor.optim.min_lr=0.0",
            'actor_rollout_ref.actor.megatron.tensor_model_parallel_size="$MEGATRON_TP"',
            'actor_rollout_ref.actor.megatron.pipeline_model_parallel_size="$MEGATRON_PP"',
            'actor_rollout_ref.ref.megatron.tensor_model_parallel_size="$MEGATRON_TP"',
            'actor_rollout_ref.ref.megatron.pipeline_model_parallel_size="$MEGATRON_PP"',
        ),
        "BACKEND=megatron PYTHON=python3.12 bash scripts/setup_gpu.sh",
    ),
}

# A method's run parameters (methods.RUN_PARAMETERS) -> the recipe variable that gives each (defaults: seed 42,
# EDA's gradient form, 1024-token first samples, 256-token continuations, GEPO's symmetric factor 0.5).
RUN_VARIABLES = {
    "seed": "SEED",
    "entropy_gradient": "EDA_ENTROPY_GRADIENT",
    "first_sample_tokens": "MAX_SAMPLE_LENGTH",
    "continuation_tokens": "GEC_CONTINUATION_TOKENS",
    "gepo_symmetric_alpha": "GEPO_SYMMETRIC_ALPHA",
}
METHOD_VARIABLES = {  # the run-parameter variables a recipe declares only when its method names them
    "EDA_ENTROPY_GRADIENT": Variable(
        "EDA_ENTROPY_GRADIENT", "True",
        "EDA's form: True = the reference's gradient through the current entropy in the actor loss (needs the entropy "
        "computed in the update); False = the detached advantage",
    ),
    "GEPO_SYMMETRIC_ALPHA": Variable(
        "GEPO_SYMMETRIC_ALPHA", repr(SYMMETRIC_ALPHA), "one factor for both sides (GEPO's positive one)"
    ),
}
# The comment above each part of a method's overrides (methods.OVERRIDE_PARTS) in the ALGORITHM array.
PART_NOTES = {
    "seeding": "a seed per response from SEED (docs/reproducibility.md): the same command gives the same run, and "
    "a baseline is seeded as its method",
    "eda": "EDA in the form EDA_ENTROPY_GRADIENT chooses (its gradient form needs the entropy computed in the update)",
    "gec": "GEC: its switch; injected tokens have no rollout log-probs; its seed; the first sample's cap and a "
    "correction's budget (the lengths above)",
    "force_regenerate": "Force-R: every wrong response regenerated",
    "options": "the method's own options",
}

GPUS = "8 (1 node, 80 GB each)"
MODEL_TAGS = {  # model -> its part of the recipe's file name
    "Qwen/Qwen2.5-Math-7B": "qwen2.5-math-7b",
    "Qwen/Qwen2.5-Math-1.5B": "qwen2.5-math-1.5b",
    "Qwen/Qwen2.5-7B": "qwen7b",
    "Qwen/Qwen3.5-9B": "qwen3.5-9b",
}


@dataclass(frozen=True)
class Recipe:
    """One recipe: ``method`` (edge_verl/methods.py) on ``model`` with ``backend``, under training setup ``knobs``."""

    method: str
    model: str
    backend: str
    knobs: str

    def __post_init__(self) -> None:
        method = get_method(self.method)  # an unknown method: the error names the defined ones
        if self.knobs not in method.knobs:
            allowed = " or ".join(method.knobs)
            raise ValueError(f"recipe {self.file_name}: method {self.method} runs with knobs {allowed}, not {self.knobs}")
        if self.backend not in BACKENDS:
            raise ValueError(f"recipe {self.method}: backend={self.backend!r}; allowed: {', '.join(BACKENDS)}")
        if self.model not in MODEL_TAGS:
            raise ValueError(f"recipe {self.method}: model={self.model!r}; add it to MODEL_TAGS ({', '.join(MODEL_TAGS)})")
        if method.estimator is None and self.backend != "fsdp":
            raise ValueError(f"recipe {self.method}: verl's SFT trainer runs with the fsdp backend only")

    @property
    def file_name(self) -> str:
        """run_<method, hyphens>_<model>_<backend>.sh; the Qwen2.5-7B FSDP recipes keep their first name,
        run_<method>_qwen7b.sh (the reproduce tables and published runs name them so)."""
        tag = MODEL_TAGS[self.model]
        suffix = "" if (self.model, self.backend) == ("Qwen/Qwen2.5-7B", "fsdp") else f"_{self.backend}"
        return f"run_{self.method.replace('_', '-')}_{tag}{suffix}.sh"

    @property
    def train_file(self) -> str:
        """The prepared training file's name: the setup's set, the *_gec rows for a GEC method, sft_* for SFT."""
        method, train_set = get_method(self.method), TRAINING_SETUPS[self.knobs].train_set
        if method.estimator is None:
            return f"sft_{train_set}.parquet"
        return method.train_file(Path(f"train_{train_set}.parquet")).name


def _family(methods: tuple[str, ...], model: str, backends: tuple[str, ...], knobs: str) -> tuple[Recipe, ...]:
    return tuple(Recipe(method, model, backend, knobs) for method in methods for backend in backends)


BOTH = ("fsdp", "megatron")
EDGE_7B_METHODS = ("grpo", "eda", "gec", "forcer", "forcer_eda", "edge", "edge_masked", "edge_sft_injected", "edge_placebo",
                   "edge_placebo_graded", "edge_drop_first")
RECIPES: tuple[Recipe, ...] = (
    # EDGE-GRPO's knobs: the method, its ablations and controls on 7B (both backends), the 1.5B rows, the other baselines
    *_family(EDGE_7B_METHODS, "Qwen/Qwen2.5-Math-7B", BOTH, "edge"),
    *_family(("clipcov", "klcov", "cliphigher", "sft"), "Qwen/Qwen2.5-Math-7B", ("fsdp",), "edge"),
    *_family(("grpo", "edge"), "Qwen/Qwen2.5-Math-1.5B", BOTH, "edge"),
    # GEPO's knobs: Qwen2.5-7B with FSDP, Qwen3.5-9B with Megatron
    *_family(("grpo", "gepo", "gepo_no_high", "gepo_no_low", "gepo_symmetric", "clipcov", "klcov"), "Qwen/Qwen2.5-7B", ("fsdp",),
             "gepo"),
    *_family(("grpo", "gepo", "clipcov", "klcov"), "Qwen/Qwen3.5-9B", ("megatron",), "gepo"),
)


def get_recipe(file_name: str) -> Recipe:
    """The recipe written to ``recipes/<file_name>``."""
    for recipe in RECIPES:
        if recipe.file_name == file_name:
            return recipe
    raise ValueError(f"no recipe {file_name!r}; defined: {', '.join(recipe.file_name for recipe in RECIPES)} (edge_verl/recipes.py)")


# -- the text -----------------------------------------------------------------------------------------------------

_PLAIN = re.compile(r"^[A-Za-z0-9_./:=+@%,-]*$")


def comment(text: str, indent: str = "") -> list[str]:
    """``text`` as comment lines of at most WIDTH characters."""
    return textwrap.wrap(text, WIDTH - len(indent) - 2, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ",
                         break_on_hyphens=False, break_long_words=False)


def shell_word(template: str) -> str:
    """A method's override template as one shell word: its literal text (double-quoted unless plain) with each
    ``{run_parameter}`` given by the recipe variable ``RUN_VARIABLES`` names, as ``"$VARIABLE"``."""
    word = ""
    for literal, field, _, _ in string.Formatter().parse(template):
        word += literal if _PLAIN.match(literal) else '"' + re.sub(r'(["$`\\])', r"\\\1", literal) + '"'
        if field is not None:
            word += f'"${RUN_VARIABLES[field]}"'
    return word


def _array(name: str, note: str, items: list[str]) -> list[str]:
    return [*comment(note), f"{name}=(", *(f"    {item}" if item and not item.startswith("    ") else item for item in items), ")"]


def _header(recipe: Recipe, setup: str) -> list[str]:
    method, backend = get_method(recipe.method), BACKENDS[recipe.backend]
    run = f"bash recipes/{recipe.file_name}"
    data = recipe.train_file if method.estimator is None else f"{recipe.train_file} and the eval_*.parquet sets"
    return [
        "#!/usr/bin/env bash",
        *comment(f"{method.description}."),
        f"# Model: {recipe.model} | Backend: {backend.label} | GPUs: {GPUS}",
        *comment(f"Training setup: {setup}"),
        "#",
        f"# Needs: the {backend.label} GPU stack with verl 0.9.1 and edge_verl, in $PYTHON's environment (default: the active one):",
        f"#          {backend.setup}   (docs/INSTALL_GPU.md)",
        f"#        the data, {data}:",
        "#          python scripts/prepare_data.py --out data",
        f"# Run:   {run} [Hydra overrides, which go last and win]",
        f"#        DRY_RUN=1 {run}   (prints the command)",
        "# Every variable of the user-adjustable block below can be set in the environment; runs from any directory.",
        "#",
        *comment("Written by `edge-verl recipe --write` from edge_verl/methods.py (the method) and edge_verl/recipes.py "
                 "(model, backend, training setup); tests/test_recipes.py holds this file equal to them. To change a "
                 "method, change its definition and write the recipes again; to try something, copy this file."),
        "",
        "set -euo pipefail",
        "",
    ]


def _identity_lines(recipe: Recipe) -> list[str]:
    return [
        f"METHOD={recipe.method} BACKEND={recipe.backend}  # what this recipe runs: part of the run's name and identity",
        'REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # DATA_DIR and CKPT_ROOT default to its data/ and checkpoints/',
        "",
    ]


def _train_file_note(method: Method) -> str:
    if method.estimator is None:
        return "reference solutions after the RL prompts"
    return "rows marked for GEC (agent_name=edge_gec)" if method.gec else ""


def _data_variables(recipe: Recipe, validation: bool = True) -> list[str]:
    val_files = ",".join(f"$DATA_DIR/eval_{name}.parquet" for name in PAPER_EVAL)
    return [
        *Variable("MODEL_PATH", recipe.model).lines(),
        *Variable("DATA_DIR", "$REPO/data", "python scripts/prepare_data.py --out DATA_DIR").lines(),
        *Variable("TRAIN_FILE", f"$DATA_DIR/{recipe.train_file}", _train_file_note(get_method(recipe.method))).lines(),
        *([f'VAL_FILES=${{VAL_FILES:-"[{val_files}]"}}'] if validation else []),
        *Variable("NNODES", "1", "several nodes: REPRODUCING.md section 6").lines(),
        *Variable("NGPUS_PER_NODE", "8").lines(),
    ]


def _naming_variables(metrics: bool = True) -> list[str]:
    lines = [
        *Variable("PROJECT_NAME", "edge_verl").lines(),
        "# The run's name and checkpoint folder: <method>_<model>_<training set>_<backend>_seed<N>",
        "MODEL_TAG=$(basename \"$MODEL_PATH\" | tr '[:upper:]' '[:lower:]')",
        'TRAIN_TAG=$(basename "$TRAIN_FILE" .parquet)',
        *Variable("EXPERIMENT_NAME", "${METHOD}_${MODEL_TAG}_${TRAIN_TAG#train_}_${BACKEND}_seed${SEED}").lines(),
        *Variable("CKPT_ROOT", "$REPO/checkpoints", "several nodes: a path every node sees").lines(),
        *Variable("CKPT_DIR", "$CKPT_ROOT/$PROJECT_NAME/$EXPERIMENT_NAME").lines(),
        *Variable("RUN_TAG", "", "part of the run identity (edge-verl reproduce: table/row)").lines(),
    ]
    if metrics:
        lines += [
            *Variable("TEST_FREQ", "100").lines(),
            *Variable("SAVE_FREQ", "100", "verl also saves the last step (evaluation reads it)").lines(),
        ]
    lines += [
        *Variable("MAX_CKPT_TO_KEEP", "2", "a 7B checkpoint: ~15 GB of HF weights + optimizer state").lines(),
    ]
    if metrics:
        lines += Variable("VAL_BEFORE_TRAIN", "True").lines()
    lines += [
        *comment("verl's loggers: console and file (no account needed); [console,file,wandb] needs WANDB_API_KEY, tensorboard "
                 "TENSORBOARD_DIR. The file logger writes one JSON line per step, by default to a new file per start "
                 "under the run's folder (a resumed run keeps its earlier files)"),
        'LOGGER=${LOGGER:-"[console,file]"}',
        *Variable("VERL_FILE_LOGGER_PATH", "$CKPT_DIR/metrics/metrics_$(date +%Y%m%d_%H%M%S).jsonl").lines(),
    ]
    return lines


def _block_end(ppo: bool) -> list[str]:
    """The end of the user-adjustable block (names, folders, logging; the switches) and the arrays' heading."""
    return [
        "",
        *_naming_variables(metrics=ppo),
        "",
        *_switch_variables(cpu=ppo),
        "# ---- end user-adjustable ----",
        "",
        "########################### parameter arrays ###########################",
        "",
    ]


def _switch_variables(cpu: bool = True) -> list[str]:
    lines = []
    if cpu:
        lines += [
            *Variable("EDGE_VERL_CPU", "0", "1: on CPU with the plugin's backend (tiny models only)").lines(),
            *Variable("CPU_TENSOR_PARALLEL", "1", "EDGE_VERL_CPU=1, Megatron: tensor-parallel gloo processes").lines(),
            *Variable("CPU_ROLLOUT", "hf", "EDGE_VERL_CPU=1: hf (the plugin's) or vllm (vLLM's CPU build)").lines(),
        ]
    else:
        lines += Variable("EDGE_VERL_CPU", "0", "verl's SFT trainer has no CPU backend here").lines()
    return [
        *lines,
        *Variable("DRY_RUN", "0", "1: print the verl command, ready to paste, and exit").lines(),
        *Variable("PYTHON", "$(command -v python3 || command -v python || true)", "runs verl: must import verl and edge_verl")
        .lines(),
    ]


def _length_variables(gec: bool) -> list[str]:
    sample = Variable("MAX_SAMPLE_LENGTH", "1024", "tokens a sampled response may use (paper: 1024)")
    if not gec:
        return [*sample.lines(), *Variable("MAX_RESPONSE_LENGTH", "$MAX_SAMPLE_LENGTH").lines()]
    return [
        *comment("GEC: a correction grows past the first sample, as in the reference: the reflection phrase (32 tokens of "
                 "room) and up to GEC_CONTINUATION_TOKENS more. The response holds both; MAX_RESPONSE_LENGTH alone keeps "
                 "that total and gives the first sample what is left."),
        *Variable("GEC_CONTINUATION_TOKENS", "256").lines(),
        'if [ -z "${MAX_SAMPLE_LENGTH:-}" ] && [ -n "${MAX_RESPONSE_LENGTH:-}" ]; then',
        f"    MAX_SAMPLE_LENGTH=$((MAX_RESPONSE_LENGTH - {GEC_PHRASE_ROOM} - GEC_CONTINUATION_TOKENS))",
        "fi",
        *sample.lines(),
        *Variable("MAX_RESPONSE_LENGTH", f"$((MAX_SAMPLE_LENGTH + {GEC_PHRASE_ROOM} + GEC_CONTINUATION_TOKENS))").lines(),
    ]


def _algorithm_items(recipe: Recipe) -> list[str]:
    """The ALGORITHM array: what every method shares, then the method's overrides, part by part."""
    method = get_method(recipe.method)
    items = _shared([
        "algorithm.use_kl_in_reward=False",
        *comment("edge_verl/adv/* for every method, GRPO's built-in estimator included: EDGE-GRPO Fig. 5's "
                 "advantage-variance curves compare like with like", "    "),
        "+algorithm.edge_metrics.advantage_stats=True",
    ], method_keys(recipe))
    for part, templates in method_override_parts(recipe.method):
        note = f"{method.description} (edge_verl/methods.py: {recipe.method})" if part == "estimator" else PART_NOTES[part]
        items += [*comment(note, "    "), *map(shell_word, templates)]
    return items


def method_keys(recipe: Recipe) -> set[str]:
    """The keys the recipe's method sets (a leading "+" dropped)."""
    return {template.split("=", 1)[0].lstrip("+") for _, templates in method_override_parts(recipe.method) for template in templates}


def _shared(items: list[str], keys: set[str]) -> list[str]:
    """``items`` without the overrides of ``keys`` (the method sets them: each key appears once in a recipe)."""
    return [item for item in items if item.lstrip().startswith("#") or item.split("=", 1)[0].lstrip('+"') not in keys]


def _ppo_text(recipe: Recipe) -> str:
    method, setup, backend = get_method(recipe.method), TRAINING_SETUPS[recipe.knobs], BACKENDS[recipe.backend]
    named = {RUN_VARIABLES[field] for _, templates in method_override_parts(recipe.method) for template in templates
             for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    keys = method_keys(recipe)
    lines = [
        *_header(recipe, setup.summary),
        *_identity_lines(recipe),
        "# ---- user-adjustable ----",
        *_data_variables(recipe),
        "",
        *[line for variable in setup.batch for line in variable.lines()],
        *Variable("MINI_BATCH_SIZE", "$TRAIN_BATCH_SIZE", "prompts per optimizer update: one update per step").lines(),
        *Variable("MICRO_BATCH_SIZE", "1", "sequences per GPU per pass (USE_DYNAMIC_BSZ=False)").lines(),
        *Variable("MAX_PROMPT_LENGTH", "512").lines(),
        *_length_variables(method.gec),
        *comment("Dynamic batch sizes, as verl's GPU examples (*_seq_balance.sh, DAPO): each GPU packs micro-batches up to a "
                 "token budget that holds whole sequences (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH): 8 of them in the "
                 "update, twice that in the no-gradient log-prob passes. Lower them on out-of-memory errors; "
                 "USE_DYNAMIC_BSZ=False goes back to MICRO_BATCH_SIZE sequences per pass. Gradients do not depend on it."),
        *Variable("USE_DYNAMIC_BSZ", "True").lines(),
        *Variable("PPO_MAX_TOKEN_LEN_PER_GPU", "$(((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH) * 8))").lines(),
        *Variable("LOG_PROB_MAX_TOKEN_LEN_PER_GPU", "$((PPO_MAX_TOKEN_LEN_PER_GPU * 2))").lines(),
        "",
        *Variable("LR", "1e-6").lines(),
        *Variable("TEMPERATURE", "0.6").lines(),
        *[line for variable in setup.schedule for line in variable.lines()],
        *Variable("SEED", "42").lines(),
        *[line for name, variable in METHOD_VARIABLES.items() if name in named for line in variable.lines()],
        *Variable("ROLLOUT_TP", "1", "vLLM's tensor parallel size").lines(),
        *Variable("GPU_MEMORY_UTILIZATION", "0.6").lines(),
        *comment(backend.note),
        *[line for variable in backend.variables for line in variable.lines()],
        *_block_end(ppo=True),
        *_array("DATA", "The training set and the papers' five benchmarks for verl's validation", _shared([
            'data.train_files="$TRAIN_FILE"',
            'data.val_files="$VAL_FILES"',
            'data.train_batch_size="$TRAIN_BATCH_SIZE"',
            'data.max_prompt_length="$MAX_PROMPT_LENGTH"',
            'data.max_response_length="$MAX_RESPONSE_LENGTH"',
            "data.filter_overlong_prompts=True",
            "data.truncation=error",
            'data.seed="$SEED"',
        ], keys)),
        "",
        *_array("MODEL", "The policy, also the reference model", _shared([
            'actor_rollout_ref.model.path="$MODEL_PATH"',
            "actor_rollout_ref.model.use_remove_padding=True",
            "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        ], keys)),
        "",
        *_array("ACTOR", "The update: AdamW without warm-up, grad clip 1.0, PPO clip 0.2, no KL, no entropy bonus", _shared([
            'actor_rollout_ref.actor.optim.lr="$LR"',
            "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
            "actor_rollout_ref.actor.optim.clip_grad=1.0",
            'actor_rollout_ref.actor.ppo_mini_batch_size="$MINI_BATCH_SIZE"',
            'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"',
            'actor_rollout_ref.actor.use_dynamic_bsz="$USE_DYNAMIC_BSZ"',
            'actor_rollout_ref.actor.ppo_max_token_len_per_gpu="$PPO_MAX_TOKEN_LEN_PER_GPU"',
            "actor_rollout_ref.actor.ppo_epochs=1",
            "actor_rollout_ref.actor.clip_ratio_low=0.2",
            "actor_rollout_ref.actor.clip_ratio_high=0.2",
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "actor_rollout_ref.actor.kl_loss_coef=0.0",
            "actor_rollout_ref.actor.entropy_coeff=0",
            *comment("HF weights next to every checkpoint (actor/huggingface), which scripts/evaluate.py reads; resume loads "
                     "what it always loads", "    "),
            '"actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"',
            '"actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer,extra]"',
        ], keys)),
        "",
        *_array("ROLLOUT", "Sampling with vLLM at T = TEMPERATURE; validation at T = 0.1, as the papers evaluate", _shared([
            "actor_rollout_ref.rollout.name=vllm",
            'actor_rollout_ref.rollout.n="$ROLLOUT_N"',
            'actor_rollout_ref.rollout.temperature="$TEMPERATURE"',
            "actor_rollout_ref.rollout.top_p=1.0",
            'actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"',
            'actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION"',
            'actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"',
            'actor_rollout_ref.rollout.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"',
            'actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"',
            "actor_rollout_ref.rollout.val_kwargs.temperature=0.1",
            "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
        ], keys)),
        "",
        *_array("REF", "The reference model's log-prob passes", _shared([
            'actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"',
            'actor_rollout_ref.ref.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"',
            'actor_rollout_ref.ref.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"',
        ], keys)),
        "",
        *_array("REWARD", "edge_verl's math reward: the boxed answer graded against the ground truth (edge_verl/reward)", _shared([
            "reward.custom_reward_function.path=pkg://edge_verl.reward",
            "reward.custom_reward_function.name=compute_score",
        ], keys)),
        "",
        *_array("ALGORITHM", "What every method shares, then the method's own overrides (edge_verl/methods.py)",
                _algorithm_items(recipe)),
        "",
        *_array(backend.array, f"The {backend.label} backend", list(backend.overrides)),
        "",
        *_array("TRAINER", "Names, folders, nodes, steps; verl's resume_mode=auto resumes from CKPT_DIR", _shared([
            'trainer.logger="$LOGGER"',
            'trainer.project_name="$PROJECT_NAME"',
            'trainer.experiment_name="$EXPERIMENT_NAME"',
            'trainer.default_local_dir="$CKPT_DIR"',
            'trainer.nnodes="$NNODES"',
            'trainer.n_gpus_per_node="$NGPUS_PER_NODE"',
            'trainer.total_epochs="$TOTAL_EPOCHS"',
            'trainer.total_training_steps="$TOTAL_STEPS"',
            'trainer.test_freq="$TEST_FREQ"',
            'trainer.save_freq="$SAVE_FREQ"',
            'trainer.max_actor_ckpt_to_keep="$MAX_CKPT_TO_KEEP"',
            'trainer.val_before_train="$VAL_BEFORE_TRAIN"',
        ], keys)),
        "",
        *_ppo_launch(recipe),
    ]
    return "\n".join(lines) + "\n"


def _launch(helpers: str, cpu: str, check: list[str], program: list[str], arrays: tuple[str, ...]) -> list[str]:
    """The launch section: the helpers (recipes/lib/launch.sh), what verl's processes read from the environment,
    the CPU line ``cpu``, then either DRY_RUN's print or the ``check`` before verl, and the command: ``program``
    with every array and the user's overrides last."""
    return [
        "########################### launch ###########################",
        "",
        f'source "$(dirname "${{BASH_SOURCE[0]}}")/lib/launch.sh"  # {helpers}',
        "check_python",
        'RUN_ENV=(VERL_FILE_LOGGER_PATH="$VERL_FILE_LOGGER_PATH")  # what verl\'s processes read from the environment',
        *cpu.splitlines(),
        'export "${RUN_ENV[@]}"',
        'LAUNCH=("$PYTHON")',
        'if [ "$DRY_RUN" = 1 ]; then',
        '    LAUNCH=(print_command "$PYTHON")  # print the command below instead of running it',
        "else",
        *check,
        "fi",
        *program,
        *(f'    "${{{array}[@]}}" \\' for array in arrays),
        '    "$@"',
    ]


def _ppo_launch(recipe: Recipe) -> list[str]:
    config = BACKENDS[recipe.backend].config_name
    arrays = ("DATA", "MODEL", "ACTOR", "ROLLOUT", "REF", "REWARD", "ALGORITHM", BACKENDS[recipe.backend].array, "TRAINER", "CPU")
    preflight = [
        *comment("edge_verl's preflight, in seconds and before Ray starts, on the config verl composes from these very "
                 "overrides: every plugin option and the data files, then the run identity (CKPT_DIR's recorded method, "
                 "model, training data, backend, seed and RUN_TAG must be this run's, so that resume_mode=auto never "
                 "resumes another run)", "    "),
        f'    "$PYTHON" -m edge_verl.cli preflight --config-name {config} --method "$METHOD" --tag "$RUN_TAG" \\',
        "        " + " ".join(f'"${{{array}[@]}}"' for array in arrays[:6]) + " \\",
        "        " + " ".join(f'"${{{array}[@]}}"' for array in arrays[6:]) + ' "$@"',
    ]
    cpu = f"cpu_switch {config}  # EDGE_VERL_CPU=1: the CPU backend's overrides (CPU) and variables (RUN_ENV)"
    program = [f'"${{LAUNCH[@]}}" -m verl.trainer.main_ppo --config-name={config} \\']
    return _launch("check_python, cpu_switch, print_command", cpu, preflight, program, arrays)


SFT_SETUP = (
    "this project's, every one settable (the paper gives none): lr 1e-5 (SFT_LR), 3 epochs (SFT_EPOCHS), 32 "
    "sequences per step (SFT_BATCH_SIZE), on the training set's reference solutions after its RL prompt"
)


def _sft_text(recipe: Recipe) -> str:
    method, backend = get_method(recipe.method), BACKENDS[recipe.backend]
    arrays = ("DATA", "MODEL", "OPTIM", "TRAINER")
    lines = [
        *_header(recipe, SFT_SETUP),
        *_identity_lines(recipe),
        "# ---- user-adjustable ----",
        *_data_variables(recipe, validation=False),
        "",
        *Variable("SFT_LR", "1e-5").lines(),
        *Variable("SFT_EPOCHS", "3").lines(),
        *Variable("SFT_BATCH_SIZE", "32", "sequences per optimizer step").lines(),
        *Variable("SFT_MAX_LENGTH", "2048", "prompt + solution tokens; longer rows are an error").lines(),
        *Variable("MICRO_BATCH_SIZE", "1", "sequences per GPU per forward pass").lines(),
        *Variable("SEED", "42").lines(),
        *_block_end(ppo=False),
        *_array("DATA", "The RL prompt as context, the reference solution as the target (scripts/prepare_data.py)", [
            'data.train_files="$TRAIN_FILE"',
            "data.val_files=null",
            "data.messages_key=messages",
            'data.train_batch_size="$SFT_BATCH_SIZE"',
            'data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"',
            'data.max_length="$SFT_MAX_LENGTH"',
            "data.truncation=error",
        ]),
        "",
        *_array("MODEL", "The model", [
            'model.path="$MODEL_PATH"',
            "model.enable_gradient_checkpointing=True",
        ]),
        "",
        *_array("OPTIM", "AdamW, cosine decay without warm-up, grad clip 1.0", [
            'optim.lr="$SFT_LR"',
            "optim.lr_warmup_steps_ratio=0.0",
            "optim.lr_scheduler_type=cosine",
            "optim.clip_grad=1.0",
        ]),
        "",
        *_array("TRAINER", "Names, folders, nodes, epochs; HF weights with every checkpoint (scripts/evaluate.py reads them)", [
            '"checkpoint.save_contents=[model,optimizer,extra,hf_model]"',
            'trainer.default_local_dir="$CKPT_DIR"',
            'trainer.project_name="$PROJECT_NAME"',
            'trainer.experiment_name="$EXPERIMENT_NAME"',
            'trainer.total_epochs="$SFT_EPOCHS"',
            'trainer.logger="$LOGGER"',
            'trainer.seed="$SEED"',
            'trainer.nnodes="$NNODES"',
            'trainer.n_gpus_per_node="$NGPUS_PER_NODE"',
            'trainer.max_ckpt_to_keep="$MAX_CKPT_TO_KEEP"',
        ]),
        "",
        *_launch(
            "check_python, print_command",
            'if [ "$EDGE_VERL_CPU" = 1 ]; then\n'
            '    echo "recipe error: the SFT recipe has no CPU backend (EDGE_VERL_CPU=1); run it on GPUs" >&2\n'
            "    exit 2\n"
            "fi",
            [
                *comment("The run identity (verl's SFT trainer runs none of the plugin's options): CKPT_DIR's recorded "
                         "method, model, training data, backend, seed and RUN_TAG must be this run's", "    "),
                '    "$PYTHON" -m edge_verl.cli run-identity "$CKPT_DIR" --method "$METHOD" --model "$MODEL_PATH" \\',
                '        --train-file "$TRAIN_FILE" --backend "$BACKEND" --seed "$SEED" --tag "$RUN_TAG"',
            ],
            ['"${LAUNCH[@]}" -m torch.distributed.run --nnodes="$NNODES" --nproc_per_node="$NGPUS_PER_NODE" \\',
             "    -m verl.trainer.sft_trainer \\"],
            arrays,
        ),
    ]
    return "\n".join(lines) + "\n"


def recipe_text(recipe: Recipe) -> str:
    """The whole text of ``recipe``'s file."""
    return _sft_text(recipe) if get_method(recipe.method).estimator is None else _ppo_text(recipe)
