"""The recipes (``recipes/run_*.sh``) as data, and the writer that turns each into a short file a verl user
reads in a minute, like verl's own ``examples/``: what it runs, its own variables, and one whole verl command.

A recipe is a method on a model with a backend, under the training setup its paper used: ``RECIPES``. Its
text follows from three definitions and nothing else: the method's overrides (``edge_verl/methods.py``,
written into the command literally and apart from the rest, each run parameter as a recipe variable:
``RUN_VARIABLES``), the training setup (``TRAINING_SETUPS``: EDGE-GRPO's knobs or GEPO's, which a method and
its GRPO baseline share) and the backend's overrides (``BACKENDS``: all an FSDP recipe and its Megatron twin
differ in). Everything else is the same in every recipe: the overrides, written out in each, and the
variables' defaults, which every recipe takes from ``recipes/lib/defaults.sh``. ``edge-verl recipe --write``
writes the files (``recipe_files.py``); tests/test_recipes.py holds every committed file byte-identical to its
definition, so a method is defined in one place while each recipe is a file a user can read, copy and edit.
What each variable and setting means is written once, in docs/recipes.md, not in every file.

What differs from verl's examples, deliberately: before verl starts, a recipe runs ``edge-verl preflight``
on the very overrides verl will get (every plugin option, the data files, and the run identity that keeps
another run's checkpoint from being resumed); the helpers that are not part of the command (the interpreter
check, the CPU switch of the tests' tiny-model runs, DRY_RUN's printer) live in ``recipes/lib/launch.sh``.

No verl import.
"""

from __future__ import annotations

import shlex
import string
import textwrap
from dataclasses import dataclass
from pathlib import Path

from edge_verl.methods import SYMMETRIC_ALPHA, get_method, method_override_parts

WIDTH = 118  # a recipe's lines, comments and packed overrides, are at most this wide where they can be
GEC_PHRASE_ROOM = 32  # tokens of room for GEC's reflection phrase between the first sample and its continuation
MAX_LINES = 80  # no recipe file is longer


@dataclass(frozen=True)
class Variable:
    """One recipe variable, ``NAME=${NAME:-default}``: set from the environment, else ``default``."""

    name: str
    default: str

    def line(self) -> str:
        return f"{self.name}=${{{self.name}:-{self.default}}}"


@dataclass(frozen=True)
class TrainingSetup:
    """A paper's training setup (``methods.KNOBS``): the knobs a method and its GRPO baseline share."""

    name: str
    paper: str  # whose: "EDGE-GRPO's (arXiv ...)"
    settings: str  # the paper's settings in one sentence (the OpenRLHF recipes' header; docs/recipes.md explains them)
    train_set: str  # the prepared training set: DATA_DIR/train_<set>.parquet (a GEC method: its _gec rows)
    batch: tuple[Variable, ...]  # TRAIN_BATCH_SIZE, ROLLOUT_N
    schedule: tuple[Variable, ...]  # TOTAL_EPOCHS, TOTAL_STEPS

    @property
    def summary(self) -> str:
        return f"{self.paper}: {self.settings}"


TRAINING_SETUPS = {
    "edge": TrainingSetup(
        "edge", "EDGE-GRPO's (arXiv 2507.21848)",
        "G = 8 responses per prompt, 1 prompt per step, 1000 steps (1 epoch of Hard-1K), lr 1e-6, T = 0.6, max response 1024 tokens",
        "hard_1k", (Variable("TRAIN_BATCH_SIZE", "1"), Variable("ROLLOUT_N", "8")),
        (Variable("TOTAL_EPOCHS", "1"), Variable("TOTAL_STEPS", "null")),
    ),
    "gepo": TrainingSetup(
        "gepo", "GEPO's (arXiv 2607.16850)",
        "K = 16 responses per prompt, 32 prompts per step, 300 steps on Random-1K, lr 1e-6, T = 0.6, max response 1024 tokens",
        "random_1k", (Variable("TRAIN_BATCH_SIZE", "32"), Variable("ROLLOUT_N", "16")),
        (Variable("TOTAL_EPOCHS", "10"), Variable("TOTAL_STEPS", "300")),
    ),
}


@dataclass(frozen=True)
class Backend:
    """A training backend: verl's trainer config and the overrides only it has (their variables' defaults:
    recipes/lib/defaults.sh). An FSDP recipe and its Megatron twin differ in these and nothing else."""

    name: str  # fsdp, megatron: part of the run's name and identity
    label: str
    config_name: str  # verl's trainer config (--config-name)
    overrides: tuple[str, ...]


BACKENDS = {
    "fsdp": Backend(
        "fsdp", "FSDP", "ppo_trainer",
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
    ),
    "megatron": Backend(
        "megatron", "Megatron", "ppo_megatron_trainer",
        (
            "actor_rollout_ref.actor.optim.lr_decay_style=linear",
            "actor_rollout_ref.actor.optim.min_lr=0.0",
            'actor_rollout_ref.actor.megatron.tensor_model_parallel_size="$MEGATRON_TP"',
            'actor_rollout_ref.actor.megatron.pipeline_model_parallel_size="$MEGATRON_PP"',
            'actor_rollout_ref.ref.megatron.tensor_model_parallel_size="$MEGATRON_TP"',
            'actor_rollout_ref.ref.megatron.pipeline_model_parallel_size="$MEGATRON_PP"',
        ),
    ),
}

# A method's run parameters (methods.RUN_PARAMETERS) -> the recipe variable that gives each (its default:
# METHOD_VARIABLES' in the recipe, else recipes/lib/defaults.sh's).
RUN_VARIABLES = {
    "seed": "SEED",
    "entropy_gradient": "EDA_ENTROPY_GRADIENT",
    "first_sample_tokens": "MAX_SAMPLE_LENGTH",
    "continuation_tokens": "GEC_CONTINUATION_TOKENS",
    "gepo_symmetric_alpha": "GEPO_SYMMETRIC_ALPHA",
}
# The run-parameter variables a recipe declares itself, and only when its method names them (the others:
# recipes/lib/defaults.sh).
METHOD_VARIABLES = {
    "EDA_ENTROPY_GRADIENT": Variable("EDA_ENTROPY_GRADIENT", "True"),
    "GEC_CONTINUATION_TOKENS": Variable("GEC_CONTINUATION_TOKENS", "256"),
    "GEPO_SYMMETRIC_ALPHA": Variable("GEPO_SYMMETRIC_ALPHA", repr(SYMMETRIC_ALPHA)),
}

GPUS = "8 GPUs (1 node, 80 GB each)"
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

INDENT = "    "


def comment(text: str, indent: str = "") -> list[str]:
    """``text`` as comment lines of at most WIDTH characters."""
    return textwrap.wrap(text, WIDTH - len(indent) - 2, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ",
                         break_on_hyphens=False, break_long_words=False)


def shell_word(template: str) -> str:
    """A method's override template as one shell word: its literal text (``shlex.quote``: as is unless it holds
    a shell character) with each ``{run_parameter}`` given by the recipe variable ``RUN_VARIABLES`` names, as
    ``"$VARIABLE"``."""
    word = ""
    for literal, field, _, _ in string.Formatter().parse(template):
        word += shlex.quote(literal) if literal else ""
        if field is not None:
            word += f'"${RUN_VARIABLES[field]}"'
    return word


def packed(words: list[str]) -> list[str]:
    """``words`` in their order, as few to a line as fit in WIDTH (indented; a longer word alone on its line)."""
    lines: list[str] = []
    for word in words:
        if lines and len(lines[-1]) + 1 + len(word) <= WIDTH:
            lines[-1] += f" {word}"
        else:
            lines.append(INDENT + word)
    return lines


def method_keys(recipe: Recipe) -> set[str]:
    """The keys the recipe's method sets (a leading "+" dropped)."""
    return {template.split("=", 1)[0].lstrip("+") for _, templates in method_override_parts(recipe.method) for template in templates}


def _shared(items: tuple[str, ...], keys: set[str]) -> list[str]:
    """``items`` without the overrides of ``keys`` (the method sets them: each key appears once in a recipe)."""
    return [item for item in items if item.split("=", 1)[0].lstrip('+"') not in keys]


# The overrides of every RL recipe, in their order in verl's command: PPO_BEFORE_METHOD's groups (each packed on
# lines of its own), the method's, the backend's, then PPO_TRAINER's. Their variables' defaults: recipes/lib/defaults.sh.
PPO_BEFORE_METHOD = (
    (  # the data
        'data.train_files="$TRAIN_FILE"', 'data.val_files="$VAL_FILES"', 'data.train_batch_size="$TRAIN_BATCH_SIZE"',
        'data.max_prompt_length="$MAX_PROMPT_LENGTH"', 'data.max_response_length="$MAX_RESPONSE_LENGTH"',
        "data.filter_overlong_prompts=True", "data.truncation=error", 'data.seed="$SEED"',
    ),
    (  # the policy, also the reference model
        'actor_rollout_ref.model.path="$MODEL_PATH"', "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    ),
    (  # the update
        'actor_rollout_ref.actor.optim.lr="$LR"', "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
        "actor_rollout_ref.actor.optim.clip_grad=1.0", 'actor_rollout_ref.actor.ppo_mini_batch_size="$MINI_BATCH_SIZE"',
        'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"',
        'actor_rollout_ref.actor.use_dynamic_bsz="$USE_DYNAMIC_BSZ"',
        'actor_rollout_ref.actor.ppo_max_token_len_per_gpu="$PPO_MAX_TOKEN_LEN_PER_GPU"', "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.2",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.kl_loss_coef=0.0", "actor_rollout_ref.actor.entropy_coeff=0",
        '"actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"',
        '"actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer,extra]"',
    ),
    (  # sampling with vLLM; validation at T = 0.1
        "actor_rollout_ref.rollout.name=vllm", 'actor_rollout_ref.rollout.n="$ROLLOUT_N"',
        'actor_rollout_ref.rollout.temperature="$TEMPERATURE"', "actor_rollout_ref.rollout.top_p=1.0",
        'actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"',
        'actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION"',
        'actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"',
        'actor_rollout_ref.rollout.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"',
        'actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"',
        "actor_rollout_ref.rollout.val_kwargs.temperature=0.1", "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
    ),
    (  # the reference model's log-prob passes
        'actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"',
        'actor_rollout_ref.ref.log_prob_use_dynamic_bsz="$USE_DYNAMIC_BSZ"',
        'actor_rollout_ref.ref.log_prob_max_token_len_per_gpu="$LOG_PROB_MAX_TOKEN_LEN_PER_GPU"',
    ),
    (  # edge_verl's math reward
        "reward.custom_reward_function.path=pkg://edge_verl.reward", "reward.custom_reward_function.name=compute_score",
    ),
    ("algorithm.use_kl_in_reward=False", "+algorithm.edge_metrics.advantage_stats=True"),  # what every method shares
)
PPO_TRAINER = (
    'trainer.logger="$LOGGER"', 'trainer.project_name="$PROJECT_NAME"', 'trainer.experiment_name="$EXPERIMENT_NAME"',
    'trainer.default_local_dir="$CKPT_DIR"', 'trainer.nnodes="$NNODES"', 'trainer.n_gpus_per_node="$NGPUS_PER_NODE"',
    'trainer.total_epochs="$TOTAL_EPOCHS"', 'trainer.total_training_steps="$TOTAL_STEPS"', 'trainer.test_freq="$TEST_FREQ"',
    'trainer.save_freq="$SAVE_FREQ"', 'trainer.max_actor_ckpt_to_keep="$MAX_CKPT_TO_KEEP"',
    'trainer.val_before_train="$VAL_BEFORE_TRAIN"',
)
SFT_OVERRIDES = (
    (  # the RL prompt as context, the reference solution as the target
        'data.train_files="$TRAIN_FILE"', "data.val_files=null", "data.messages_key=messages",
        'data.train_batch_size="$SFT_BATCH_SIZE"', 'data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"',
        'data.max_length="$SFT_MAX_LENGTH"', "data.truncation=error",
    ),
    ('model.path="$MODEL_PATH"', "model.enable_gradient_checkpointing=True"),
    ('optim.lr="$SFT_LR"', "optim.lr_warmup_steps_ratio=0.0", "optim.lr_scheduler_type=cosine", "optim.clip_grad=1.0"),
    (
        '"checkpoint.save_contents=[model,optimizer,extra,hf_model]"', 'trainer.default_local_dir="$CKPT_DIR"',
        'trainer.project_name="$PROJECT_NAME"', 'trainer.experiment_name="$EXPERIMENT_NAME"',
        'trainer.total_epochs="$SFT_EPOCHS"', 'trainer.logger="$LOGGER"', 'trainer.seed="$SEED"', 'trainer.nnodes="$NNODES"',
        'trainer.n_gpus_per_node="$NGPUS_PER_NODE"', 'trainer.max_ckpt_to_keep="$MAX_CKPT_TO_KEEP"',
    ),
)
SFT_VARIABLES = (Variable("SFT_LR", "1e-5"), Variable("SFT_EPOCHS", "3"), Variable("SFT_BATCH_SIZE", "32"),
                 Variable("SFT_MAX_LENGTH", "2048"))


def _header(recipe: Recipe, setup: str) -> list[str]:
    """What the recipe runs, on what, how, and where it is explained; the shared shell; the model and hardware."""
    method, backend = get_method(recipe.method), BACKENDS[recipe.backend]
    return [
        "#!/usr/bin/env bash",
        *comment(f"{method.description}."),
        *comment(f"{recipe.model} | {backend.label} | {GPUS} | {setup}"),
        *comment(f"Run: bash recipes/{recipe.file_name} [Hydra overrides] (DRY_RUN=1 prints the command)"),
        "# Any variable can be set in the environment; what each does, its default and why, what a run needs: docs/recipes.md",
        "# Written by `edge-verl recipe --write` from edge_verl/methods.py and edge_verl/recipes.py; change those, not this.",
        "set -euo pipefail",
        'source "$(dirname "${BASH_SOURCE[0]}")/lib/defaults.sh"  # REPO, DATA_DIR, the defaults, recipes/lib/launch.sh',
        f"METHOD={recipe.method} BACKEND={recipe.backend}  # what this recipe runs: part of the run's name and identity",
        "# ---- model and hardware ----",
        Variable("MODEL_PATH", recipe.model).line(),
        Variable("NNODES", "1").line(),
        Variable("NGPUS_PER_NODE", "8").line(),
    ]


def _launch(config: str, command: list[str]) -> list[str]:
    """The recipe's last lines: the checks before verl (recipes/lib/launch.sh's prepare_launch, ``config`` its
    trainer config or sft), then verl's ``command``, started by LAUNCH."""
    return [f'prepare_launch {config} "$@"  # the checks before verl (recipes/lib/launch.sh); DRY_RUN=1: print instead',
            *command]


def _ppo_text(recipe: Recipe) -> str:
    method, setup, backend = get_method(recipe.method), TRAINING_SETUPS[recipe.knobs], BACKENDS[recipe.backend]
    parts = method_override_parts(recipe.method)
    named = {RUN_VARIABLES[field] for _, templates in parts for template in templates
             for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    own = [variable.line() for name, variable in METHOD_VARIABLES.items() if name in named]
    defaults = "rl_defaults  # every other variable: recipes/lib/defaults.sh"
    if method.gec:  # the response holds the first sample, this room and a correction's continuation
        room = GEC_PHRASE_ROOM
        defaults = f"rl_defaults {room}  # the other variables (recipes/lib/defaults.sh); {room}: room for GEC's phrase"
    keys = method_keys(recipe)
    lines = [
        *_header(recipe, f"{setup.paper} training setup"),
        f"# ---- {setup.paper} training setup ----",
        Variable("TRAIN_FILE", f"$DATA_DIR/{recipe.train_file}").line(),
        *(variable.line() for variable in (*setup.batch, *setup.schedule)),
        *(["# ---- the method's variables ----", *own] if own else []),
        defaults,
        "",
        "OVERRIDES=(  # first those of every RL recipe: data, model, update, rollout, reference model, reward",
        *(line for group in PPO_BEFORE_METHOD for line in packed(_shared(group, keys))),
        f"    # ---- the method: {recipe.method} (edge_verl/methods.py), one part a line ----",
        *(line for _, templates in parts for line in packed([shell_word(template) for template in templates])),
        f"    # ---- the {backend.label} backend; the trainer ----",
        *packed(list(backend.overrides)),
        *packed(_shared(PPO_TRAINER, keys)),
        ")",
        *_launch(backend.config_name, [f'"${{LAUNCH[@]}}" -m verl.trainer.main_ppo --config-name={backend.config_name} '
                                       '"${OVERRIDES[@]}" "${CPU[@]}" "$@"']),
    ]
    return "\n".join(lines) + "\n"


def _sft_text(recipe: Recipe) -> str:
    lines = [
        *_header(recipe, "this project's SFT setup (the paper gives none)"),
        "# ---- this project's SFT setup (the paper gives none) ----",
        Variable("TRAIN_FILE", f"$DATA_DIR/{recipe.train_file}").line(),
        *(variable.line() for variable in SFT_VARIABLES),
        "run_defaults  # every other variable: recipes/lib/defaults.sh",
        "",
        "OVERRIDES=(",
        *(line for group in SFT_OVERRIDES for line in packed(list(group))),
        ")",
        *_launch("sft", ['"${LAUNCH[@]}" -m torch.distributed.run --nnodes="$NNODES" --nproc_per_node="$NGPUS_PER_NODE" \\',
                         '    -m verl.trainer.sft_trainer "${OVERRIDES[@]}" "$@"']),
    ]
    return "\n".join(lines) + "\n"


def recipe_text(recipe: Recipe) -> str:
    """The whole text of ``recipe``'s file."""
    return _sft_text(recipe) if get_method(recipe.method).estimator is None else _ppo_text(recipe)
