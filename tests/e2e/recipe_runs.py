"""Run a recipe, unchanged, on CPU (shared by the FSDP and Megatron recipe tests)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from edge_verl_lab.demo.run import DemoConfig, prepare_inputs

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
ENGINE_LINE = "edge_verl CPU backend: training engine="
# The recipes' variables at the tiny model's scale: 4 prompts x 4 responses, the demo's lengths (16-token
# samples; GEC's corrections up to 64 tokens beyond, so response 16 + 64 + 32 = 112 for GEC methods).
TINY_RECIPE_SCALE = {
    "TRAIN_BATCH_SIZE": "4",
    "ROLLOUT_N": "4",
    "MICRO_BATCH_SIZE": "16",
    "MAX_PROMPT_LENGTH": "64",
    "MAX_SAMPLE_LENGTH": "16",
    "GEC_CONTINUATION_TOKENS": "64",
}


def python_environment() -> dict:
    """This process's environment with this interpreter's scripts first on PATH (the recipes call
    ``python -m ...``)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def run_recipe_on_cpu(out: Path, recipe: str, algorithm: str, vocab_multiple: int = 1, as_printed: bool = False, **variables) -> dict:
    """Run ``recipes/<recipe>`` unchanged on the tiny model and the demo's data with the CPU backend (its
    variables only, as a user would); returns the per-step records, the engines the run reported and its
    output. ``variables`` override the defaults below (e.g. TOTAL_STEPS, SAVE_FREQ, CPU_TENSOR_PARALLEL).
    ``as_printed``: run the command the recipe prints with DRY_RUN=1 instead, pasted as is into a shell in
    another directory whose environment has none of the recipe's variables."""
    inputs = prepare_inputs(DemoConfig(algorithm=algorithm, out=out / "inputs", vocab_multiple=vocab_multiple))
    log_path = out / "metrics_raw.jsonl"
    log_path.unlink(missing_ok=True)
    env = {
        **python_environment(),
        **TINY_RECIPE_SCALE,
        "VERL_FILE_LOGGER_PATH": str(log_path),
        "MODEL_PATH": str(inputs["model"]),
        "TRAIN_FILE": str(inputs["train"]),
        "VAL_FILES": f"[{inputs['val']}]",
        "EDGE_VERL_CPU": "1",
        "TOTAL_STEPS": "1",
        "VAL_BEFORE_TRAIN": "False",
        "TEST_FREQ": "-1",
        "SAVE_FREQ": "-1",
        "LOGGER": "[console,file]",
        "CKPT_DIR": str(out / "checkpoints"),
        **{key: str(value) for key, value in variables.items()},
    }
    if as_printed:
        printed = subprocess.run(["bash", str(RECIPES / recipe)], cwd=out, env={**env, "DRY_RUN": "1"}, capture_output=True, text=True, timeout=120)
        assert printed.returncode == 0, printed.stderr[-3000:]
        elsewhere = out / "elsewhere"
        elsewhere.mkdir(exist_ok=True)
        completed = subprocess.run(
            ["bash", "-c", printed.stdout], cwd=elsewhere, env=os.environ.copy(), capture_output=True, text=True, timeout=900
        )
    else:
        completed = subprocess.run(["bash", str(RECIPES / recipe)], cwd=out, env=env, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-3000:]
    records = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    output = completed.stdout + completed.stderr
    engines = [line.split(ENGINE_LINE, 1)[1] for line in output.splitlines() if ENGINE_LINE in line]
    return {"records": records, "engines": engines, "output": output}


def tiny_reproduce_knobs(inputs: dict, **variables: str) -> dict[str, str]:
    """The recipe variables ``edge-verl reproduce`` runs the tiny model's tables with (``--set``): the demo's
    model and validation set on the CPU backend, the tiny scale, 2 steps; ``variables`` override them."""
    return {
        "MODEL_PATH": str(inputs["model"]),
        "EDGE_VERL_CPU": "1",
        "VAL_FILES": f"[{inputs['val']}]",
        **TINY_RECIPE_SCALE,
        "TEMPERATURE": "1.0",
        "LR": "1e-3",
        "TOTAL_STEPS": "2",
        "VAL_BEFORE_TRAIN": "False",
        "TEST_FREQ": "-1",
        **variables,
    }


def reproduce_command(table: str, arguments: list, knobs: dict, inputs: dict, eval_limit: str = "3", eval_tokens: str = "16") -> list[str]:
    """``edge-verl reproduce TABLE ARGUMENTS`` on the evaluation slice (the shipped benchmarks' first
    ``eval_limit`` problems plus the demo's validation set), every knob as ``--set``."""
    command = [sys.executable, "-m", "edge_verl.cli", "reproduce", table, *map(str, arguments)]
    command += ["--eval-limit", eval_limit, "--eval-max-new-tokens", eval_tokens, "--eval-extra", str(inputs["val"])]
    for key, value in knobs.items():
        command += ["--set", f"{key}={value}"]
    return command
