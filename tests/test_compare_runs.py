"""Reading runs back (edge_verl_lab.reporting) and scripts/compare_runs.py: verl's file-logger records, resumed
runs' several files, mean ± std over seeds, and a loud error instead of a table of "-"."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edge_verl_lab.reporting import compare, load_metrics, markdown, plot

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_runs.py"


def _run(root, name, rewards, avg=None, verl_format=True):
    run = root / name
    run.mkdir()
    if verl_format:  # verl's FileLogger: {"step": N, "data": {...}}
        lines = [{"step": i + 1, "data": {"critic/score/mean": r}} for i, r in enumerate(rewards)]
    else:
        lines = [{"step": i + 1, "critic/score/mean": r} for i, r in enumerate(rewards)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if avg is not None:
        (run / "eval.json").write_text(json.dumps({"Avg": {"problems": 10, "pass@1": avg}}))
    return run


def test_groups_seeds_and_reports_mean_and_std(tmp_path):
    # edge: last-2 means 0.5 and 0.7 -> mean 0.6, sample std 0.1414; eval Avg 40% and 50% -> 45 ± 7.0711
    runs = [
        _run(tmp_path, "edge_seed1", [0.0, 0.4, 0.6], avg=0.4),
        _run(tmp_path, "edge_seed2", [0.0, 0.6, 0.8], avg=0.5, verl_format=False),
        _run(tmp_path, "grpo_seed1", [0.1, 0.1, 0.1]),
    ]
    table, curves = compare(runs, ["critic/score/mean"], window=2)
    assert table["edge"]["critic/score/mean"] == "0.6000 ± 0.1414 (n=2)"
    assert table["edge"]["Avg pass@1 (%)"] == "45.0000 ± 7.0711 (n=2)"
    assert table["grpo"]["critic/score/mean"] == "0.1000 ± 0.0000 (n=1)"
    assert curves["critic/score/mean"]["edge"][2] == [0.4, 0.6]
    assert "| edge |" in markdown(table)
    assert plot(curves, tmp_path / "c.png").stat().st_size > 5_000


def test_a_resumed_run_merges_its_attempts_and_tolerates_a_cut_last_line(tmp_path):
    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    (run / "metrics" / "attempt_1.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"x": s}}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "da'
    )
    (run / "metrics" / "attempt_2.jsonl").write_text("".join(json.dumps({"step": s, "data": {"x": 10 * s}}) + "\n" for s in (3, 4)))
    assert [(r["step"], r["x"]) for r in load_metrics(run)] == [(1, 1), (2, 2), (3, 30), (4, 40)]


def test_no_metric_found_is_an_error_naming_what_exists(tmp_path):
    runs = [_run(tmp_path, "edge_seed1", [0.1])]
    with pytest.raises(ValueError, match="critic/score/mean"):
        compare(runs, ["actor/entropy"], window=2)
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, runs), "--metrics", "actor/entropy", "--out", str(tmp_path / "out")],
        capture_output=True, text=True,
    )
    assert completed.returncode == 1 and "none of the runs has the metrics" in completed.stderr
