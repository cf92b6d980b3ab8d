import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_runs.py"
spec = importlib.util.spec_from_file_location("compare_runs", SCRIPT)
compare_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_runs)


def _run(root, name, rewards, avg=None):
    run = root / name
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "critic/score/mean": r}) + "\n" for i, r in enumerate(rewards)))
    if avg is not None:
        (run / "eval.json").write_text(json.dumps({"Avg": {"problems": 10, "pass@1": avg}}))
    return run


def test_groups_seeds_and_reports_mean_and_std(tmp_path):
    # edge: last-2 means 0.5 and 0.7 -> mean 0.6, sample std 0.1414; eval Avg 40% and 50% -> 45 ± 7.0711
    runs = [
        _run(tmp_path, "edge_seed1", [0.0, 0.4, 0.6], avg=0.4),
        _run(tmp_path, "edge_seed2", [0.0, 0.6, 0.8], avg=0.5),
        _run(tmp_path, "grpo_seed1", [0.1, 0.1, 0.1]),
    ]
    table, curves = compare_runs.compare(runs, ["critic/score/mean"], window=2)
    assert table["edge"]["critic/score/mean"] == "0.6000 ± 0.1414 (n=2)"
    assert table["edge"]["Avg pass@1 (%)"] == "45.0000 ± 7.0711 (n=2)"
    assert table["grpo"]["critic/score/mean"] == "0.1000 ± 0.0000 (n=1)"
    assert curves["critic/score/mean"]["edge"][2] == [0.4, 0.6]
    assert "| edge |" in compare_runs.markdown(table)
    assert compare_runs.plot(curves, tmp_path / "c.png").stat().st_size > 5_000
