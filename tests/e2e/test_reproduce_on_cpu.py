"""``edge-verl reproduce`` end to end on CPU: a scaled-down EDGE-GRPO Table 2 (the base and EDGE rows, one
seed: the pipeline's folders, checkpoints, weights and skips; mean ± std and the paired interval over seeds
are tested on hand-computed tables in tests/test_reproduce.py and tests/test_paired_difference.py) through
the unchanged FSDP EDGE recipe with the tiny model, validated by verl before training and after the last
step (the table's optimistic section reads verl's real ``val-core`` keys), then the evaluation slice, the
table, the curves; a second invocation skips everything; run identity keeps training sets apart.

The EDGE row is also the FSDP EDGE recipe's own CPU run (EDA's gradient form and GEC's budget, every
metric of both, verl's FSDP engine with megatron-core installed and untouched). What CI's budget left out,
and where it is covered instead: the GRPO row (2.5 minutes; a trained row of the table is a trained row,
and a GRPO run's metrics are checked in tests/e2e/test_study_on_cpu.py); the GEPO FSDP recipe's run as its
DRY_RUN prints it (the GEPO Megatron recipe runs as printed in tests/e2e/test_megatron_on_cpu.py; every recipe's
overrides compose against verl's config in tests/integration/test_recipes_compose_on_cpu.py). A
sensitivity sweep is this pipeline with one Hydra override appended per grid point: the override reaching
GEPO's config is tested in tests/integration/test_sensitivity_compose_on_cpu.py, its table and plots on
hand-made runs in tests/test_sensitivity.py.

The training set is the demo's copy task (the tiny model cannot learn real math in two steps), given to
the pipeline the way a user gives their own file (``--train-file hard_1k=...``); evaluation runs a slice of
the real shipped benchmarks plus the copy task's validation set as an extra benchmark.
"""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from edge_verl_lab.demo import task
from edge_verl_lab.demo.run import DemoConfig, prepare_inputs
from edge_verl.algorithms import GEC_AGENT_LOOP
from tests.e2e.recipe_runs import ENGINE_LINE, python_environment, reproduce_command, tiny_reproduce_knobs
from tests.recipe_dry_run import parse

REPO = Path(__file__).resolve().parents[2]
SEEDS = ("1",)
ROWS = ("base_1.5b", "edge_1.5b")
EVAL_LIMIT = "3"
EVAL_TOKENS = "16"


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    root = tmp_path_factory.mktemp("reproduce")
    inputs = prepare_inputs(DemoConfig(algorithm="grpo", out=root / "demo"))
    train = task.write_parquet(task.make_rows(256, seed=3, split="train"), root / "copy" / "copy_train.parquet")
    task.write_parquet(task.make_rows(256, seed=3, split="train", agent_name=GEC_AGENT_LOOP), root / "copy" / "copy_train_gec.parquet")
    knobs = tiny_reproduce_knobs(inputs, VAL_BEFORE_TRAIN="True", TEST_FREQ="2")  # verl validates at steps 0 and 2
    arguments = ["--seeds", *SEEDS, "--rows", *ROWS, "--out", root / "out", "--train-file", f"hard_1k={train}"]
    command = reproduce_command("edge_hard_1k", arguments, knobs, inputs, EVAL_LIMIT, EVAL_TOKENS)
    first = subprocess.run(command, cwd=root, env=python_environment(), capture_output=True, text=True, timeout=2400)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    markers = {path: path.stat().st_mtime_ns for path in (root / "out").rglob("*.done.json")}
    second = subprocess.run(command, cwd=root, env=python_environment(), capture_output=True, text=True, timeout=600)
    return {"root": root, "out": root / "out", "inputs": inputs, "train": train, "knobs": knobs, "command": command,
            "first": first.stdout, "second": second, "markers": markers}


def _eval_records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "eval_records.jsonl").read_text().splitlines()]


def test_one_folder_and_one_checkpoint_per_run(reproduced):
    runs = sorted(path.name for path in (reproduced["out"] / "runs").iterdir())
    assert runs == sorted(["base_1.5b", *(f"{row}_seed{seed}" for row in ROWS[1:] for seed in SEEDS)])
    checkpoints = sorted(path.name for path in (reproduced["out"] / "checkpoints").iterdir())
    assert checkpoints == sorted(f"{row}_seed{seed}" for row in ROWS[1:] for seed in SEEDS)
    for name in checkpoints:
        folder = reproduced["out"] / "checkpoints" / name
        identity = json.loads((folder / "edge_verl_run.json").read_text())
        assert identity["tag"] == f"edge_hard_1k/{name.rsplit('_seed', 1)[0]}"
        assert (folder / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
        assert list((folder / "global_step_2" / "actor" / "huggingface").glob("*.safetensors")), "HF weights saved"
        assert json.loads((folder / "edge_verl_run.json").read_text())["seed"] == name[-1]


def test_training_logged_the_papers_curves_for_every_method(reproduced):
    from edge_verl_lab.reporting import load_metrics

    for row in ROWS[1:]:
        records = load_metrics(reproduced["out"] / "runs" / f"{row}_seed1")
        assert [record["step"] for record in records] == [0, 1, 2]  # step 0: verl's validation before training
        records = records[1:]
        assert all("actor/entropy" in record and "edge_verl/adv/var" in record for record in records)
    edge = load_metrics(reproduced["out"] / "runs" / "edge_1.5b_seed1")[1:]  # the training steps
    assert all("edge_verl/gec/responses" in record for record in edge), "EDGE rows ran GEC"
    assert (reproduced["out"] / "curves.png").stat().st_size > 10_000


# The EDGE recipe's metrics: GEC's, EDA's gradient share and quantiles, per-origin and as-sampled diagnostics.
EDGE_RECIPE_METRICS = (
    "edge_verl/gec/responses", "actor/edge_eda/entropy_grad_share", "edge_verl/edge_eda/abs_adv_p99",
    "actor/gec/sampled/token_share", "actor/gec/phrase/token_share", "edge_verl/gec/sampled/adv_var",
)


def test_the_edge_recipe_trained_with_fsdp_and_logged_every_metric_of_its_method(reproduced):
    from edge_verl_lab.reporting import load_metrics

    edge = load_metrics(reproduced["out"] / "runs" / "edge_1.5b_seed1")
    for metric in EDGE_RECIPE_METRICS:
        assert any(metric in record for record in edge), metric
    # verl's FSDP engine trained (actor and reference share one), with megatron-core installed and untouched
    log = (reproduced["out"] / "runs" / "edge_1.5b_seed1" / "train.log").read_text()
    engines = [line.split(ENGINE_LINE, 1)[1] for line in log.splitlines() if ENGINE_LINE in line]
    assert engines and all(engine.startswith("fsdp ") for engine in engines), engines


def test_the_optimistic_section_reads_verls_validation_before_and_after_training(reproduced):
    table = json.loads((reproduced["out"] / "table.json").read_text())
    for row in table["rows"]:
        if row["key"] == "base_1.5b":
            assert row["validation"] is None  # a base model is evaluated, never trained or validated
            continue
        per_seed = row["validation"]["per_seed"]
        assert list(per_seed) == list(SEEDS) and [entry["last_step"] for entry in per_seed.values()] == [2]
        assert all(0 <= entry["best"] <= 100 and entry["best_step"] in (0, 2) for entry in per_seed.values())
    assert "### Best step on validation — optimistic (not the headline)" in (reproduced["out"] / "table.md").read_text()


def test_evaluation_used_the_trained_weights(reproduced):
    out = reproduced["out"]
    trained = json.loads((out / "runs" / "edge_1.5b_seed1" / "train.done.json").read_text())
    meta = json.loads((out / "runs" / "edge_1.5b_seed1" / "eval" / "eval_meta.json").read_text())
    assert meta["model"] == trained["hf_weights"] and "global_step_2" in meta["model"]
    # The same evaluation of the run folder (resolved to its latest checkpoint's HF weights) grades alike.
    direct = reproduced["root"] / "direct"
    command = [sys.executable, str(REPO / "scripts" / "evaluate.py"), "--model", trained["checkpoint_dir"], "--out", str(direct)]
    command += ["--limit", EVAL_LIMIT, "--max-new-tokens", EVAL_TOKENS, "--extra", str(reproduced["inputs"]["val"])]
    completed = subprocess.run(command, env=python_environment(), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    pipeline_records = _eval_records(out / "runs" / "edge_1.5b_seed1" / "eval")
    direct_records = _eval_records(direct)
    assert [r["scores"] for r in direct_records] == [r["scores"] for r in pipeline_records]
    assert [r["responses"] for r in direct_records] == [r["responses"] for r in pipeline_records]
    # Training changed the model, so its answers differ from the base model's on the same prompts.
    base_records = _eval_records(out / "runs" / "base_1.5b" / "eval")
    assert [r["responses"] for r in base_records] != [r["responses"] for r in pipeline_records]


def test_table_equals_hand_computation_from_each_runs_evaluation(reproduced):
    table = json.loads((reproduced["out"] / "table.json").read_text())
    rows = {row["key"]: row for row in table["rows"]}
    assert list(rows) == list(ROWS)
    for key in ROWS[1:]:
        per_seed = []
        for seed in SEEDS:
            evaluation = json.loads((reproduced["out"] / "runs" / f"{key}_seed{seed}" / "eval" / "eval.json").read_text())
            per_seed.append({name: 100 * entry["pass@1"] for name, entry in evaluation.items()})
        for column in ("Avg", "aime24", "math500"):
            values = [scores[column] for scores in per_seed]
            entry = rows[key]["columns"][column]
            assert entry["mean"] == pytest.approx(statistics.mean(values))
            assert entry["n"] == len(SEEDS)
    assert rows["edge_1.5b"]["columns"]["Avg"]["paper"] == 47.24
    assert rows["base_1.5b"]["columns"]["Avg"]["n"] == 1
    # the model each row ran (here every row: the tiny model, one model for all rows, so --set MODEL_PATH)
    assert f"| EDGE-GRPO 1.5B | {rows['edge_1.5b']['model']} | {len(SEEDS)} |" in (reproduced["out"] / "table.md").read_text()
    assert rows["edge_1.5b"]["model"].endswith("model")


def test_second_invocation_skips_every_finished_stage(reproduced):
    second = reproduced["second"]
    assert second.returncode == 0, second.stderr[-3000:]
    stage_lines = [line for line in second.stdout.splitlines() if line.split(" ", 1)[0] in {"skip", "run", "would", "wrote"}]
    assert stage_lines and all(line.startswith("skip") for line in stage_lines), stage_lines
    assert len(stage_lines) == 1 + 1 + len(SEEDS) * 2 + 1  # data, base eval, edge x seeds x (train, eval), report
    after = {path: path.stat().st_mtime_ns for path in reproduced["out"].rglob("*.done.json")}
    assert after == reproduced["markers"]


def test_another_training_set_never_loads_this_runs_checkpoint(reproduced):
    """Same recipe, method, model, backend and seed; another training file: the recipe names another
    folder, and forcing this run's folder stops before verl starts, naming the setting that differs."""
    root, out = reproduced["root"], reproduced["out"]
    # marked for GEC like the EDGE row's own file, so the recipe's GEC checks pass and the identity is what stops it
    other = task.write_parquet(task.make_rows(256, seed=4, split="train", agent_name=GEC_AGENT_LOOP), root / "copy" / "other_train.parquet")
    env = {**python_environment(), **{key: str(value) for key, value in reproduced["knobs"].items()}}
    env.update({"SEED": "1", "TRAIN_FILE": str(other), "CKPT_ROOT": str(out / "checkpoints")})
    recipe = REPO / "recipes" / "run_edge_qwen2.5-math-1.5b_fsdp.sh"
    dry = subprocess.run(["bash", str(recipe)], env={**env, "DRY_RUN": "1"}, capture_output=True, text=True, check=True).stdout
    folder = parse(dry).values["trainer.default_local_dir"]
    assert folder.endswith("edge_model_other_train_fsdp_seed1") and not Path(folder).exists()
    existing = out / "checkpoints" / "edge_1.5b_seed1"
    forced = subprocess.run(["bash", str(recipe)], env={**env, "CKPT_DIR": str(existing)}, capture_output=True, text=True, timeout=300)
    assert forced.returncode == 3, forced.stdout[-2000:] + forced.stderr[-2000:]
    assert "train_data" in forced.stderr and "copy_train_gec.parquet" in forced.stderr and "other_train.parquet" in forced.stderr
    assert "Ray" not in forced.stdout, "stopped before verl started"
