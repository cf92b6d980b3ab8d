import json
import subprocess
import sys
from pathlib import Path

import pytest

from edge_verl.evaluation import ProblemResult, markdown_table, pass_at_k, summarize


def test_pass_at_k_hand_computed():
    # n = 4 samples, c = 1 correct: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_average_weights_every_problem_equally():
    # aime24: 1 of 2 correct (50%), math500: 3 of 3 correct (100%), aime25 not averaged.
    # Avg = 4 / 5 = 80% (the mean of benchmark means would be 75%).
    results = [ProblemResult("aime24", 0, (1.0,)), ProblemResult("aime24", 1, (0.0,))]
    results += [ProblemResult("math500", i, (1.0,)) for i in range(3)] + [ProblemResult("aime25", 0, (1.0,))]
    table = summarize(results)
    assert table["aime24"]["pass@1"] == 0.5 and table["math500"]["pass@1"] == 1.0
    assert table["Avg"] == {"problems": 5, "pass@1": pytest.approx(0.8)}
    assert "| Avg | 5 | 80.00 |" in markdown_table(table)


def test_vllm_generates_only_on_a_gpu(monkeypatch):
    import importlib.util

    import torch

    from edge_verl.evaluation import uses_vllm

    installed = importlib.util.find_spec("vllm") is not None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not uses_vllm()  # vLLM's CPU build (scripts/setup.sh) is for the rollout, not the evaluation
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert uses_vllm() == installed


@pytest.mark.e2e
def test_evaluation_end_to_end_on_cpu_with_the_tiny_model(tmp_path):
    from edge_verl.demo import task
    from edge_verl.demo.run import DemoConfig, prepare_inputs

    inputs = prepare_inputs(DemoConfig(out=tmp_path / "demo"))
    copy_task = tmp_path / "copy.jsonl"
    copy_task.write_text("".join(json.dumps({"problem": q, "answer": a}) for q, a in task.problems()).replace("}{", "}\n{"))
    out = tmp_path / "eval"
    script = Path(__file__).resolve().parents[1] / "scripts" / "evaluate.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--model", str(inputs["model"]), "--benchmarks", "aime24", "math500",
         "--limit", "3", "--extra", str(copy_task), "--max-new-tokens", "16", "--samples", "2", "--k", "1", "2", "--average-over", "aime24", "math500", "copy", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    records = [json.loads(line) for line in (out / "eval_records.jsonl").read_text().splitlines()]
    table = json.loads((out / "eval.json").read_text())
    assert [table[name]["problems"] for name in ("aime24", "math500", "copy")] == [3, 3, 3]
    # hand computation from the per-sample grades: Avg pass@1 = sum over the 9 problems of (correct / 2) / 16,
    # pass@2 = fraction of problems with at least one correct sample
    assert table["Avg"]["pass@1"] == pytest.approx(sum(sum(r["scores"]) / 2 for r in records) / 9)
    assert table["Avg"]["pass@2"] == pytest.approx(sum(max(r["scores"]) for r in records) / 9)
    copy_rows = [r for r in records if r["benchmark"] == "copy"]
    assert table["copy"]["pass@1"] == pytest.approx(sum(sum(r["scores"]) / 2 for r in copy_rows) / 3)
    assert sum(sum(r["scores"]) for r in copy_rows) > 0, "the warm-started tiny model copies some digits"
    assert "| Avg | 9 |" in completed.stdout


def _hf_folder(folder, weights=True):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    if weights:
        (folder / "model.safetensors").write_bytes(b"x")
    return folder


def test_resolve_model_dir_from_run_checkpoint_and_hf_folders(tmp_path):
    from edge_verl.evaluation import resolve_model_dir

    run = tmp_path / "run"
    hf2 = _hf_folder(run / "global_step_2" / "actor" / "huggingface")
    _hf_folder(run / "global_step_1" / "actor" / "huggingface")
    (run / "latest_checkpointed_iteration.txt").write_text("2")
    assert resolve_model_dir(run) == str(hf2)  # the run folder: its latest checkpoint
    assert resolve_model_dir(run / "global_step_2") == str(hf2)
    assert resolve_model_dir(run / "global_step_2" / "actor") == str(hf2)
    assert resolve_model_dir(hf2) == str(hf2)
    assert resolve_model_dir("Qwen/Qwen2.5-Math-7B") == "Qwen/Qwen2.5-Math-7B"  # not a folder: a hub name


def test_checkpoint_without_hf_weights_says_how_to_get_them(tmp_path):
    from edge_verl.evaluation import resolve_model_dir

    step = tmp_path / "global_step_5"
    _hf_folder(step / "actor" / "huggingface", weights=False)
    with pytest.raises(FileNotFoundError, match="hf_model.*verl.model_merger"):
        resolve_model_dir(step)
    with pytest.raises(FileNotFoundError, match="not an HF model folder"):
        resolve_model_dir(tmp_path)
