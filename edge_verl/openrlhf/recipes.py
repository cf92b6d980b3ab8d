"""OpenRLHF recipes (recipes/openrlhf/run_<method>_<model>.sh): each a whole ``train_ppo_ray`` command for one
paper row, written out by ``edge-verl recipe --write`` beside the verl recipes (edge_verl/recipes.py) and held
equal to this definition by tests/openrlhf/test_recipes_on_cpu.py, which also runs every printed command through
OpenRLHF 0.11.2's own parser and the launcher's checks.

Each paper's rows that OpenRLHF's trainer runs, with the verl recipes' training setup for that paper
(``edge_verl.recipes.TRAINING_SETUPS``: prompts per step, responses per prompt, training set, length of training)
and model: EDGE-GRPO's (GRPO, EDA, GEC alone, EDGE on Qwen2.5-Math-7B, 1 prompt x 8 per step, Hard-1K) and GEPO's
(GRPO, GEPO and its three ablations on Qwen2.5-7B, 32 prompts x 16, Random-1K). Every row evaluates the five
benchmarks (``edge_verl.data.PAPER_EVAL``) at T = 0.1, one sample a problem, each under its own name. The other
settings are the verl recipes' where OpenRLHF has the knob: lr 1e-6 with cosine decay and no warm-up, T = 0.6,
1024 sampled tokens (GEC: + 32 for the phrase + 256 regenerated), seq-mean-token-mean, no KL. Deviations, each
named in its file: EDA in its detached form (OpenRLHF's loss has no hook for the current entropy:
edge_verl/openrlhf/estimators.py refuses ``entropy_gradient``); GEPO's length in whole passes over the set.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from edge_verl.data import PAPER_EVAL
from edge_verl.estimators import names
from edge_verl.methods import SYMMETRIC_ALPHA, get_method
from edge_verl.openrlhf.data import train_file_name
from edge_verl.recipes import GEC_PHRASE_ROOM, MODEL_TAGS, TRAINING_SETUPS

FOLDER = "openrlhf"
# verl's GRPO is OpenRLHF's group_norm (--algo.advantage.estimator); every estimator of the registry keeps its name.
OPENRLHF_GRPO = "group_norm"
# (the verl recipes' setup, the model, the methods): each paper's rows
FAMILIES = (
    ("edge", "Qwen/Qwen2.5-Math-7B", ("grpo", "eda", "gec", "edge")),
    ("gepo", "Qwen/Qwen2.5-7B", ("grpo", "gepo", "gepo_no_high", "gepo_no_low", "gepo_symmetric")),
)


def openrlhf_estimator(estimator: str) -> str | None:
    """OpenRLHF's ``--algo.advantage.estimator`` for a method's estimator; None when OpenRLHF has no form of it."""
    return OPENRLHF_GRPO if estimator == "grpo" else estimator if estimator in names() else None


def option_sections() -> tuple[str, ...]:
    """A method's Hydra options that carry over to the options file: algorithm.<section>.<key>=<value>, one section
    per estimator of the registry."""
    return names()
EDA_DEVIATION = ("EDA in its detached form: OpenRLHF's loss has no hook for the current entropy, which the paper's "
                 "gradient form needs (the verl recipes run it)")


def _value(text: str):
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


@dataclass(frozen=True)
class OpenRlhfRecipe:
    """One OpenRLHF recipe: ``method`` (edge_verl/methods.py) on ``model`` under the verl recipes' setup ``setup``."""

    method: str
    model: str
    setup: str

    def __post_init__(self) -> None:
        method = get_method(self.method)
        if openrlhf_estimator(method.estimator or "") is None or method.force_regenerate:
            raise ValueError(f"OpenRLHF recipe {self.method}: its estimator {method.estimator!r} (or Force-R) has no OpenRLHF form")
        if self.setup not in method.knobs or self.model not in MODEL_TAGS:
            raise ValueError(f"OpenRLHF recipe {self.method}: setup {self.setup!r} / model {self.model!r} is not one of its rows")
        _ = self.options  # every option translates, or the definition is refused

    @property
    def file_name(self) -> str:
        tag = self.model.split("/")[-1].lower()
        return f"{FOLDER}/run_{self.method.replace('_', '-')}_{tag}.sh"

    @property
    def estimator(self) -> str:
        return openrlhf_estimator(get_method(self.method).estimator)

    @property
    def gec(self) -> bool:
        return get_method(self.method).gec

    @property
    def options(self) -> dict:
        """The EDGE_VERL_OPENRLHF file's sections (besides GEC's group size and temperature, which the recipe fills in)."""
        method = get_method(self.method)
        sections: dict[str, dict] = {name: {} for name in option_sections() if method.estimator == name}
        for option in method.options:
            key, value = option.format(gepo_symmetric_alpha=SYMMETRIC_ALPHA).lstrip("+").split("=", 1)
            parts = key.split(".")
            if len(parts) != 3 or parts[0] != "algorithm" or parts[1] not in option_sections():
                raise ValueError(f"OpenRLHF recipe {self.method}: option {option!r} has no OpenRLHF form")
            sections.setdefault(parts[1], {})[parts[2]] = _value(value)
        return sections

    @property
    def deviations(self) -> tuple[str, ...]:
        found = [EDA_DEVIATION] if get_method(self.method).eda else []
        if self.setup == "gepo":
            found.append("training length in passes over the set (OpenRLHF counts its steps so): 10 x 1000 prompts / 32 per "
                         "step = 312 steps, GEPO's 300 and 12 more")
        return tuple(found)


OPENRLHF_RECIPES = tuple(OpenRlhfRecipe(method, model, setup) for setup, model, methods in FAMILIES for method in methods)
# Passes over the training set per setup: EDGE-GRPO's 1 epoch of Hard-1K; GEPO's 300 steps of 32 prompts over
# Random-1K's 1000, which OpenRLHF can only round to whole passes (--train.num_episodes).
EPISODES = {"edge": "1", "gepo": "10"}


def _variable(name: str, default: str, note: str = "") -> str:
    line = f"{name}=${{{name}:-{default}}}"
    return f"{line:<52}  # {note}" if note else line


def openrlhf_recipe_text(recipe: OpenRlhfRecipe) -> str:
    """The whole text of ``recipe``'s file."""
    method, setup = get_method(recipe.method), TRAINING_SETUPS[recipe.setup]
    batch = {variable.name: variable for variable in setup.batch}
    options = json.dumps(recipe.options)
    if recipe.gec:  # OpenRLHF tells the executor neither the group size nor training from evaluation
        options = options[:-1] + (', ' if recipe.options else '') + (
            '"gec": {"n_samples_per_prompt": $ROLLOUT_N, "rollout_temperature": $TEMPERATURE, '
            '"first_sample_tokens": $MAX_SAMPLE_LENGTH, "continuation_tokens": $GEC_CONTINUATION_TOKENS}}')
    eval_files = ",".join(f"$DATA_DIR/eval/{name}.jsonl" for name in PAPER_EVAL)
    lines = [
        "#!/usr/bin/env bash",
        f"# {method.description}: {recipe.model} on one node of 8 GPUs with OpenRLHF 0.11.2 (docs/openrlhf.md).",
        f"# Training setup: {setup.summary}.",
        "# Written by `edge-verl recipe --write` from edge_verl/openrlhf/recipes.py: change that, not this file.",
        *(f"# Deviation from the paper: {deviation}." for deviation in recipe.deviations),
        "# DRY_RUN=1 prints the command (with the options file it writes) and exits.",
        "set -euo pipefail",
        "",
        _variable("MODEL_PATH", recipe.model),
        _variable("DATA_DIR", "data/openrlhf", "python -m edge_verl.openrlhf data DATA_DIR (run below when missing)"),
        _variable("TRAIN_FILE", f"$DATA_DIR/train/{train_file_name(setup.train_set)}.jsonl"),
        _variable("EVAL_FILES", eval_files, "each benchmark logged under its own name (eval_<set>_pass1)"),
        _variable("NGPUS", "8"),
        _variable("PROMPTS_PER_STEP", batch["TRAIN_BATCH_SIZE"].default, "prompts per optimizer step"),
        _variable("ROLLOUT_N", batch["ROLLOUT_N"].default, "responses per prompt"),
        _variable("EPISODES", EPISODES[recipe.setup], "passes over the training set"),
        _variable("MAX_SAMPLE_LENGTH", "1024", "tokens a sampled response may use (paper: 1024)"),
        *([_variable("GEC_CONTINUATION_TOKENS", "256", "GEC's regenerated tokens after the phrase"),
           _variable("MAX_NEW_TOKENS", f"$((MAX_SAMPLE_LENGTH + {GEC_PHRASE_ROOM} + GEC_CONTINUATION_TOKENS))",
                     "a corrected response: sample + phrase + continuation")] if recipe.gec
          else [_variable("MAX_NEW_TOKENS", "$MAX_SAMPLE_LENGTH")]),
        _variable("MAX_PROMPT_LENGTH", "512"),
        _variable("LR", "1e-6"),
        _variable("TEMPERATURE", "0.6"),
        _variable("EVAL_TEMPERATURE", "0.1", "the papers' evaluation: one sample a problem at T = 0.1"),
        _variable("SEED", "42"),
        _variable("CKPT_DIR", f"checkpoints/openrlhf/{recipe.method}_{recipe.model.split('/')[-1].lower()}_seed$SEED"),
        _variable("OPTIONS_FILE", "$CKPT_DIR/edge_verl_options.json", "EDGE_VERL_OPENRLHF: the plugin's options"),
        _variable("DRY_RUN", "0"),
        _variable("PYTHON", "$(command -v python3 || command -v python)", "must import openrlhf and edge_verl"),
        "",
        'mkdir -p "$CKPT_DIR"',
        f"cat > \"$OPTIONS_FILE\" <<EOF\n{options}\nEOF",
        'if [ "$DRY_RUN" != 1 ] && [ ! -f "$TRAIN_FILE" ]; then "$PYTHON" -m edge_verl.openrlhf data "$DATA_DIR"; fi',
        "",
        "COMMAND=(",
        '    "$PYTHON" -m edge_verl.openrlhf.train_ppo_ray',
        '    --actor.model_name_or_path "$MODEL_PATH"',
        '    --actor.num_nodes 1 --actor.num_gpus_per_node "$NGPUS" --ref.num_nodes 1 --ref.num_gpus_per_node "$NGPUS"',
        '    --vllm.num_engines "$NGPUS" --vllm.tensor_parallel_size 1 --vllm.gpu_memory_utilization 0.6',
        "    --train.colocate_all --vllm.enable_sleep --ds.enable_sleep",
        '    --data.prompt_dataset "$TRAIN_FILE" --data.input_key prompt --data.label_key label --data.apply_chat_template',
        '    --data.max_len "$((MAX_PROMPT_LENGTH + MAX_NEW_TOKENS))" --rollout.max_new_tokens "$MAX_NEW_TOKENS"',
        '    --rollout.n_samples_per_prompt "$ROLLOUT_N" --rollout.batch_size "$PROMPTS_PER_STEP" --rollout.micro_batch_size 1',
        '    --train.batch_size "$((PROMPTS_PER_STEP * ROLLOUT_N))" --train.micro_batch_size 1 --train.max_epochs 1',
        '    --train.num_episodes "$EPISODES" --rollout.temperature "$TEMPERATURE" --rollout.top_p 1.0',
        f"    --algo.advantage.estimator {recipe.estimator} --algo.kl.init_coef 0 --actor.loss_agg_mode seq-mean-token-mean",
        *(['    --train.agent_func_path "$("$PYTHON" -m edge_verl.openrlhf agent)"'] if recipe.gec
          else ['    --reward.remote_url "$("$PYTHON" -m edge_verl.openrlhf reward)"']),
        '    --actor.adam.lr "$LR" --actor.lr_scheduler cosine --actor.lr_warmup_ratio 0 --actor.max_norm 1.0',
        "    --ds.zero_stage 3 --ds.param_dtype bf16 --actor.gradient_checkpointing_enable",
        '    --train.seed "$SEED" --ckpt.path "$CKPT_DIR" --ckpt.save_steps 100 --ckpt.load_enable',
        '    --eval.dataset "$EVAL_FILES" --eval.temperature "$EVAL_TEMPERATURE" --eval.n_samples_per_prompt 1 --eval.steps 100',
        ")",
        'if [ "$DRY_RUN" = 1 ]; then',
        "    printf 'EDGE_VERL_OPENRLHF=%q' \"$OPTIONS_FILE\"; printf ' %q' \"${COMMAND[@]}\"; echo",
        "    exit 0",
        "fi",
        'EDGE_VERL_OPENRLHF="$OPTIONS_FILE" exec "${COMMAND[@]}"',
    ]
    return "\n".join(lines) + "\n"
