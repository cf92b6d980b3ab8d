"""``edge-verl reproduce gepo_sensitivity`` end to end on CPU: the paper's point and one other alpha_high,
one seed, one step each (two runs, for the CI budget; the interval over seeds is tested on hand-computed
tables in tests/test_paired_difference.py), through the unchanged GEPO FSDP recipe with the tiny model (the
grid point's override appended after the script's name), verl's validation before and after the step, then
the evaluation slice, the table with the difference to the paper's point, the optimistic best-step section
read from verl's real ``val-core`` keys, and the sensitivity plot; a second invocation skips everything.

The training set is the demo's copy task, given the way a user gives their own file (``--train-file
random_1k=...``); evaluation runs a slice of the shipped benchmarks plus the copy task's validation set.

    .venv/bin/python -m pytest -q tests/e2e/test_sensitivity_on_cpu.py
"""

import json
import subprocess

import pytest

from edge_verl.demo import task
from edge_verl.demo.run import DemoConfig, prepare_inputs
from tests.e2e.recipe_runs import python_environment, reproduce_command, tiny_reproduce_knobs

SEEDS = ("1",)
ROWS = ("paper", "alpha_high_0.1")
OVERRIDE = "+algorithm.gepo.alpha_high=0.1"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("sensitivity")
    inputs = prepare_inputs(DemoConfig(algorithm="gepo", out=root / "demo"))
    train = task.write_parquet(task.make_rows(256, seed=3, split="train"), root / "copy" / "copy_train.parquet")
    # one step, validated before and after it (verl's val-core keys at steps 0 and 1)
    knobs = tiny_reproduce_knobs(inputs, TOTAL_STEPS="1", VAL_BEFORE_TRAIN="True", TEST_FREQ="1")
    arguments = ["--vary", "alpha_high=0.1", "--seeds", *SEEDS, "--out", root / "out", "--train-file", f"random_1k={train}"]
    command = reproduce_command("gepo_sensitivity", arguments, knobs, inputs)
    first = subprocess.run(command, cwd=root, env=python_environment(), capture_output=True, text=True, timeout=3000)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    markers = {path: path.stat().st_mtime_ns for path in (root / "out").rglob("*.done.json")}
    second = subprocess.run(command, cwd=root, env=python_environment(), capture_output=True, text=True, timeout=600)
    return {"out": root / "out", "second": second, "markers": markers}


def test_one_run_per_grid_point_and_seed_each_with_its_override_and_identity(swept):
    out = swept["out"]
    assert sorted(path.name for path in (out / "runs").iterdir()) == sorted(f"{row}_seed{seed}" for row in ROWS for seed in SEEDS)
    for row in ROWS:
        for seed in SEEDS:
            command = json.loads((out / "runs" / f"{row}_seed{seed}" / "command.json").read_text())["command"]
            assert (command[-1] == OVERRIDE) == (row == "alpha_high_0.1"), command
            identity = json.loads((out / "checkpoints" / f"{row}_seed{seed}" / "edge_verl_run.json").read_text())
            assert identity["tag"] == f"gepo_sensitivity/{row}" and identity["method"] == "gepo"
            done = json.loads((out / "runs" / f"{row}_seed{seed}" / "train.done.json").read_text())
            assert done["step"] == 1 and done["identity"].get("overrides", []) == ([OVERRIDE] if row != "paper" else [])


def test_the_table_pairs_each_point_with_the_papers_point_and_reads_verls_validation(swept):
    table = json.loads((swept["out"] / "table.json").read_text())
    rows = {row["key"]: row for row in table["rows"]}
    assert list(rows) == list(ROWS) and table["checkpoint"] == "last"
    point = rows["alpha_high_0.1"]
    assert point["baseline"] == "paper" and point["vs_baseline"]["Avg"]["n"] == 1
    assert point["vs_baseline"]["Avg"]["interval"] is None  # one paired seed: a difference, no interval
    for row in rows.values():  # validation before training (step 0) and after step 1, from val-core keys
        assert [entry["last_step"] for entry in row["validation"]["per_seed"].values()] == [1]
        assert all(0 <= entry["best"] <= 100 for entry in row["validation"]["per_seed"].values())
    points = table["sensitivity"]["alpha_high"]["points"]
    assert [(p["value"], p["row"]) for p in points] == [(0.1, "alpha_high_0.1"), (0.2, "paper")]
    text = (swept["out"] / "table.md").read_text()
    assert "### Best step on validation — optimistic (not the headline)" in text and "### Sensitivity to alpha_high" in text
    assert (swept["out"] / "sensitivity_alpha_high.png").stat().st_size > 10_000
    assert (swept["out"] / "curves.png").stat().st_size > 10_000


def test_second_invocation_skips_every_finished_stage(swept):
    second = swept["second"]
    assert second.returncode == 0, second.stderr[-3000:]
    stage_lines = [line for line in second.stdout.splitlines() if line.split(" ", 1)[0] in {"skip", "run", "would", "wrote"}]
    assert stage_lines and all(line.startswith("skip") for line in stage_lines), stage_lines
    assert len(stage_lines) == 1 + 2 * 2 + 1  # data, 2 x (train, eval), report
    assert {path: path.stat().st_mtime_ns for path in swept["out"].rglob("*.done.json")} == swept["markers"]
