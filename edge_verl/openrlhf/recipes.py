"""OpenRLHF recipes (recipes/openrlhf/run_<method>_qwen2.5-math-7b.sh): each a whole ``train_ppo_ray`` command
for one paper row, written out by ``edge-verl recipe --write`` beside the verl recipes (edge_verl/recipes.py)
and held equal to this definition by tests/openrlhf/test_recipes_on_cpu.py, which also runs every printed
command through OpenRLHF 0.11.2's own parser and the launcher's checks.

The settings are the verl recipes' (edge_verl/recipes.py, the paper's where OpenRLHF has the knob): one prompt
of 8 responses per optimizer step, lr 1e-6 with cosine decay and no warm-up, temperature 0.6 (0.1 to evaluate),
1024 sampled tokens (GEC: + 32 for the phrase + 256 regenerated), seq-mean-token-mean, no KL. One deviation,
named in the EDGE recipe: EDA runs in its detached form, since OpenRLHF's loss has no hook for the current
entropy (edge_verl/openrlhf/estimators.py refuses ``entropy_gradient``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from edge_verl.recipes import GEC_PHRASE_ROOM

MODEL = "Qwen/Qwen2.5-Math-7B"
FOLDER = "openrlhf"


@dataclass(frozen=True)
class OpenRlhfRecipe:
    method: str
    estimator: str  # --algo.advantage.estimator
    summary: str
    options: dict  # the EDGE_VERL_OPENRLHF file, besides the gec section's group size and temperature
    gec: bool = False
    deviation: str = ""

    @property
    def file_name(self) -> str:
        return f"{FOLDER}/run_{self.method}_{MODEL.split('/')[-1].lower()}.sh"


OPENRLHF_RECIPES = (
    OpenRlhfRecipe("gepo", "gepo", "GEPO: GRPO advantages scaled by the group's entropy against EMA thresholds", {"gepo": {}}),
    OpenRlhfRecipe("eda", "edge_eda", "EDGE-GRPO's EDA alone: each advantage divided by its response's normalised entropy",
                   {"edge_eda": {}}),
    OpenRlhfRecipe("edge", "edge_eda", "EDGE-GRPO: EDA + Guided Error Correction of wrong responses", {"edge_eda": {}}, gec=True,
                   deviation="EDA in its detached form: OpenRLHF's loss has no hook for the current entropy, which the "
                   "paper's gradient form needs (the verl recipes run it)"),
)


def _variable(name: str, default: str, note: str = "") -> str:
    line = f"{name}=${{{name}:-{default}}}"
    return f"{line:<52}  # {note}" if note else line


def openrlhf_recipe_text(recipe: OpenRlhfRecipe) -> str:
    """The whole text of ``recipe``'s file."""
    options = json.dumps(recipe.options)
    if recipe.gec:  # OpenRLHF tells the executor neither the group size nor training from evaluation
        options = options[:-1] + (', "gec": {"n_samples_per_prompt": $ROLLOUT_N, "rollout_temperature": $TEMPERATURE, '
                                  '"first_sample_tokens": $MAX_SAMPLE_LENGTH, "continuation_tokens": $GEC_CONTINUATION_TOKENS}}')
    lines = [
        "#!/usr/bin/env bash",
        f"# {recipe.summary}: {MODEL} on one node of 8 GPUs with OpenRLHF 0.11.2 (docs/openrlhf.md).",
        "# Written by `edge-verl recipe --write` from edge_verl/openrlhf/recipes.py: change that, not this file.",
        *([f"# Deviation from the paper: {recipe.deviation}."] if recipe.deviation else []),
        "# DRY_RUN=1 prints the command (with the options file it writes) and exits.",
        "set -euo pipefail",
        "",
        _variable("MODEL_PATH", MODEL),
        _variable("DATA_DIR", "data/openrlhf", "python -m edge_verl.openrlhf data DATA_DIR (run below when missing)"),
        _variable("TRAIN_FILE", "$DATA_DIR/train/deepscaler_hard_1k.jsonl"),
        _variable("EVAL_FILE", "$DATA_DIR/eval/math500.jsonl"),
        _variable("NGPUS", "8"),
        _variable("PROMPTS_PER_STEP", "1", "paper: 1 prompt per optimizer step"),
        _variable("ROLLOUT_N", "8", "responses per prompt (G)"),
        _variable("MAX_SAMPLE_LENGTH", "1024", "tokens a sampled response may use (paper: 1024)"),
        *([_variable("GEC_CONTINUATION_TOKENS", "256", "GEC's regenerated tokens after the phrase"),
           _variable("MAX_NEW_TOKENS", f"$((MAX_SAMPLE_LENGTH + {GEC_PHRASE_ROOM} + GEC_CONTINUATION_TOKENS))",
                     "a corrected response: sample + phrase + continuation")] if recipe.gec
          else [_variable("MAX_NEW_TOKENS", "$MAX_SAMPLE_LENGTH")]),
        _variable("MAX_PROMPT_LENGTH", "512"),
        _variable("LR", "1e-6"),
        _variable("TEMPERATURE", "0.6"),
        _variable("EVAL_TEMPERATURE", "0.1", "GEC tells evaluation (never corrected) by its temperature"),
        _variable("SEED", "42"),
        _variable("CKPT_DIR", f"checkpoints/openrlhf/{recipe.method}_qwen2.5-math-7b_seed$SEED"),
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
        '    --rollout.temperature "$TEMPERATURE" --rollout.top_p 1.0',
        f"    --algo.advantage.estimator {recipe.estimator} --algo.kl.init_coef 0 --actor.loss_agg_mode seq-mean-token-mean",
        *(['    --train.agent_func_path "$("$PYTHON" -m edge_verl.openrlhf agent)"'] if recipe.gec
          else ['    --reward.remote_url "$("$PYTHON" -m edge_verl.openrlhf reward)"']),
        '    --actor.adam.lr "$LR" --actor.lr_scheduler cosine --actor.lr_warmup_ratio 0 --actor.max_norm 1.0',
        "    --ds.zero_stage 3 --ds.param_dtype bf16 --actor.gradient_checkpointing_enable",
        '    --train.seed "$SEED" --ckpt.path "$CKPT_DIR" --ckpt.save_steps 100 --ckpt.load_enable',
        '    --eval.dataset "$EVAL_FILE" --eval.temperature "$EVAL_TEMPERATURE" --eval.steps 100',
        ")",
        'if [ "$DRY_RUN" = 1 ]; then',
        "    printf 'EDGE_VERL_OPENRLHF=%q' \"$OPTIONS_FILE\"; printf ' %q' \"${COMMAND[@]}\"; echo",
        "    exit 0",
        "fi",
        'EDGE_VERL_OPENRLHF="$OPTIONS_FILE" exec "${COMMAND[@]}"',
    ]
    return "\n".join(lines) + "\n"
