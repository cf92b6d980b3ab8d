"""scripts/evaluate.py end to end: the tiny demo model generates on CPU, the table matches its per-sample
grades."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


def test_evaluation_end_to_end_on_cpu_with_the_tiny_model(tmp_path):
    from edge_verl_lab.demo import task
    from edge_verl_lab.demo.run import DemoConfig, prepare_inputs

    inputs = prepare_inputs(DemoConfig(out=tmp_path / "demo"))
    copy_task = tmp_path / "copy.jsonl"
    copy_task.write_text("".join(json.dumps({"problem": q, "answer": a}) for q, a in task.problems()).replace("}{", "}\n{"))
    out = tmp_path / "eval"
    script = Path(__file__).resolve().parents[2] / "scripts" / "evaluate.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--model", str(inputs["model"]), "--benchmarks", "aime24", "math500",
         "--limit", "3", "--extra", str(copy_task), "--max-new-tokens", "16", "--samples", "2", "--k", "1", "2", "--average-over", "aime24", "math500", "copy", "--out", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    records = [json.loads(line) for line in (out / "eval_records.jsonl").read_text().splitlines()]
    table = json.loads((out / "eval.json").read_text())
    assert [table[name]["problems"] for name in ("aime24", "math500", "copy")] == [3, 3, 3]
    # hand computation from the per-sample grades: Avg pass@1 = (sum over the 9 problems of correct / 2) / 9,
    # pass@2 = fraction of problems with at least one correct sample
    assert table["Avg"]["pass@1"] == pytest.approx(sum(sum(r["scores"]) / 2 for r in records) / 9)
    assert table["Avg"]["pass@2"] == pytest.approx(sum(max(r["scores"]) for r in records) / 9)
    copy_rows = [r for r in records if r["benchmark"] == "copy"]
    assert table["copy"]["pass@1"] == pytest.approx(sum(sum(r["scores"]) / 2 for r in copy_rows) / 3)
    assert sum(sum(r["scores"]) for r in copy_rows) > 0, "the warm-started tiny model copies some digits"
    assert "| Avg | 9 |" in completed.stdout
