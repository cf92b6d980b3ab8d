"""The FSDP recipes themselves, unchanged, run one training step on CPU when their variables point at the
tiny model, the demo data and the plugin's CPU backend."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edge_verl.demo.run import DemoConfig, prepare_inputs

pytestmark = pytest.mark.e2e

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize(
    "recipe, algorithm, metrics",
    [
        # EDGE-GRPO with EDA's gradient form (the recipe's default) and GEC's budget: 16-token first samples
        # (the demo's), corrections up to 64 more tokens; response_length derived by the recipe (16 + 64 + 32).
        ("run_edge_qwen2.5-math-1.5b_fsdp.sh", "edge", ("edge_verl/gec/responses", "actor/edge_eda/entropy_grad_share")),
        ("run_gepo_qwen7b.sh", "gepo", ("edge_verl/gepo/h_low",)),
    ],
)
def test_fsdp_recipe_runs_a_step_on_cpu(tmp_path, recipe, algorithm, metrics):
    inputs = prepare_inputs(DemoConfig(algorithm=algorithm, out=tmp_path))
    log_path = tmp_path / "metrics_raw.jsonl"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "VERL_FILE_LOGGER_PATH": str(log_path),
        "MODEL_PATH": str(inputs["model"]),
        "TRAIN_FILE": str(inputs["train"]),
        "VAL_FILES": f"[{inputs['val']}]",
        "EDGE_VERL_CPU": "1",
        "TRAIN_BATCH_SIZE": "4",
        "ROLLOUT_N": "4",
        "MICRO_BATCH_SIZE": "16",
        "MAX_PROMPT_LENGTH": "64",
        "MAX_SAMPLE_LENGTH": "16",
        "GEC_CONTINUATION_TOKENS": "64",
        "TOTAL_STEPS": "1",
        "VAL_BEFORE_TRAIN": "False",
        "TEST_FREQ": "-1",
        "SAVE_FREQ": "-1",
        "LOGGER": "[console,file]",
        "CKPT_DIR": str(tmp_path / "checkpoints"),
    }
    completed = subprocess.run(
        ["bash", str(RECIPES / recipe)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-3000:]
    records = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    for metric in metrics:
        assert any(metric in record["data"] for record in records), metric
