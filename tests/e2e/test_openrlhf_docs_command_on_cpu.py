"""docs/openrlhf.md's OpenRLHF commands (the README's OpenRLHF page), run as printed on this CPU with the tiny model.

The documented block (data command, options file, ``train_ppo_ray`` launch) runs under bash in a fresh folder,
``python`` being OpenRLHF's CPU environment (.venv/openrlhf-cpu), with only the changes ``CPU_CHANGES`` lists:
the model, the machine's size (GPUs, engines, sequence lengths, samples, how often to evaluate and save) and
what a CPU lacks (CUDA sleep modes, CUDA IPC / NCCL weight sync, flash-attention), each checked to be in the
block before it is changed, so the block cannot drift from what is run. Real as in
test_openrlhf_train_ppo_ray_on_cpu.py: Ray, vLLM's CPU build, DeepSpeed's CPU accelerator.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

from edge_verl.openrlhf.reward_func import grade_response, label_parts
from edge_verl.openrlhf.options import RewardOptions
from tests.e2e.test_openrlhf_train_ppo_ray_on_cpu import REAL, build_inputs, cpu_environment, step_metrics

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "openrlhf.md"
LAUNCH = "python -m edge_verl.openrlhf.train_ppo_ray"

# flag -> the CPU value (None: the flag is dropped), and flags added; every changed flag must be in the block.
CPU_CHANGES = {
    "--actor.model_name_or_path": "{model}",
    "--actor.num_gpus_per_node": "1",
    "--ref.num_gpus_per_node": "1",
    "--vllm.num_engines": "1",
    "--vllm.gpu_memory_utilization": None,  # CUDA memory
    "--vllm.enable_sleep": None,  # CUDA sleep modes
    "--ds.enable_sleep": None,
    "--rollout.max_new_tokens": "16",
    "--ckpt.save_steps": "1",
    "--eval.steps": "2",
}
CPU_ADDED = (
    "--data.max_samples 16",  # 2 steps of 8 prompts
    "--vllm.sync_backend gloo",  # not NCCL / CUDA IPC (edge_verl/openrlhf/cpu.py carries it over gloo)
    "--vllm.enforce_eager",
    "--ds.attn_implementation sdpa",  # not flash-attention
)


def documented_block() -> str:
    """The fenced bash block of docs/openrlhf.md that launches train_ppo_ray."""
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S) if LAUNCH in b]
    assert len(blocks) == 1, blocks
    return blocks[0]


def on_cpu(block: str, model: Path) -> str:
    for flag, value in CPU_CHANGES.items():
        pattern = rf"(?<=\s){re.escape(flag)}(?:[ =](?!--|\\)\S+)?"  # its value: never the next flag, nor a line-continuing backslash
        assert re.search(pattern, block), f"{flag} is no longer in docs/openrlhf.md's command"
        block = re.sub(pattern, "" if value is None else f"{flag} {value.format(model=model)}", block)
    launch = block.index(LAUNCH) + len(LAUNCH)
    return block[:launch] + " " + " ".join(CPU_ADDED) + block[launch:]


@pytest.mark.parametrize("parts", [REAL])
def test_the_documented_gepo_command_runs_on_cpu_and_evaluates(tmp_path, parts):
    model = build_inputs(tmp_path / "inputs", max_positions=2048)["model"]
    script = on_cpu(documented_block(), model)
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=cpu_environment(), capture_output=True,
                            text=True, timeout=1200)
    log = result.stdout + result.stderr
    (tmp_path / "run.log").write_text(log)
    assert result.returncode == 0, log[-8000:]
    metrics = step_metrics(log)
    assert sorted(metrics) == [1, 2] and all("gepo/h_low" in logged for logged in metrics.values())
    # --eval.steps makes the evaluation run, on the data command's math500 rows, graded by the reward file
    evaluations = re.findall(r"Evaluation completed in .*?eval_metrics: (\{.*\})", log)
    assert evaluations, "no evaluation ran"
    logged = ast.literal_eval(evaluations[-1])
    assert any(key.startswith("eval_") and "pass1" in key for key in logged), logged
    assert "edge_verl/grader/caller" in logged  # the plugin's eval logs kept beside OpenRLHF's


def test_the_data_command_writes_rows_the_reward_grades(tmp_path):
    # The block's data command, as printed: gold answers of the written rows grade 1
    data_line = next(line for line in documented_block().splitlines() if "edge_verl.openrlhf data" in line)
    subprocess.run(["bash", "-euo", "pipefail", "-c", data_line], cwd=tmp_path, env=cpu_environment(), check=True,
                   timeout=300)

    for path in (tmp_path / "data" / "train" / "deepscaler_hard_1k.jsonl", tmp_path / "data" / "eval" / "math500.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()[:5]]
        for row in rows:
            _, answer, _ = label_parts(row["label"])
            assert grade_response(f"so \\boxed{{{answer}}}", row["label"], RewardOptions())["score"] == 1.0, (path, answer)
            assert grade_response("so \\boxed{\\text{nothing}}", row["label"], RewardOptions())["score"] == 0.0
