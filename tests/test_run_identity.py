"""Run identity: a checkpoint folder is resumed only by the run that wrote it; the recipes name folders
after the run and check the identity before verl starts."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edge_verl.run_identity import IDENTITY_FILE, RunIdentityMismatch, check_or_record, describe

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def _train_file(folder: Path, name: str, content: bytes) -> Path:
    path = folder / name
    path.write_bytes(content)
    return path


def test_record_then_match_then_resume(tmp_path):
    data = _train_file(tmp_path, "train.parquet", b"rows")
    identity = describe("edge", "Qwen/Qwen2.5-Math-7B", str(data), "fsdp", 1)
    folder = tmp_path / "ckpt"
    assert check_or_record(folder, identity) == "recorded"
    assert json.loads((folder / IDENTITY_FILE).read_text()) == identity
    assert check_or_record(folder, identity) == "matches"
    (folder / "latest_checkpointed_iteration.txt").write_text("3")
    assert check_or_record(folder, identity) == "resuming"


def test_the_same_data_elsewhere_resumes_other_data_under_the_same_name_does_not(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir(), (tmp_path / "c").mkdir()
    folder = tmp_path / "ckpt"
    check_or_record(folder, describe("grpo", "m", str(_train_file(tmp_path / "a", "train.parquet", b"rows")), "fsdp", 1))
    assert check_or_record(folder, describe("grpo", "m", str(_train_file(tmp_path / "b", "train.parquet", b"rows")), "fsdp", 1))
    with pytest.raises(RunIdentityMismatch, match="train_data"):
        check_or_record(folder, describe("grpo", "m", str(_train_file(tmp_path / "c", "train.parquet", b"other")), "fsdp", 1))


@pytest.mark.parametrize("key, changed", [("method", "gepo"), ("model", "Qwen/Qwen2.5-7B"), ("backend", "megatron"), ("seed", 2)])
def test_every_identity_setting_that_differs_is_named(tmp_path, key, changed):
    data = str(_train_file(tmp_path, "train.parquet", b"rows"))
    settings = {"method": "grpo", "model": "Qwen/Qwen2.5-Math-7B", "train_file": data, "backend": "fsdp", "seed": 1}
    folder = tmp_path / "ckpt"
    check_or_record(folder, describe(**settings))
    with pytest.raises(RunIdentityMismatch) as raised:
        check_or_record(folder, describe(**{**settings, key: changed}))
    message = str(raised.value)
    assert f"{key}:" in message and str(changed) in message and "CKPT_DIR" in message
    assert sum(line.strip().startswith(("method:", "model:", "train_data:", "backend:", "seed:")) for line in message.splitlines()) == 1


def test_a_folder_with_checkpoints_but_no_record_is_refused(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10")
    with pytest.raises(RunIdentityMismatch, match="no edge_verl_run.json"):
        check_or_record(tmp_path, describe("grpo", "m", "t.parquet", "fsdp", 1))


def _dry_run(recipe: str, **env) -> dict:
    out = subprocess.run(["bash", str(RECIPES / recipe)], env={**os.environ, "DRY_RUN": "1", **env}, capture_output=True, text=True, check=True)
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line and not line.startswith("--"))


def test_recipes_name_each_run_after_method_model_training_set_backend_and_seed():
    names = {
        _dry_run(recipe, **env)["trainer.default_local_dir"]
        for recipe, env in [
            ("run_grpo_qwen2.5-math-7b_fsdp.sh", {}),
            ("run_grpo_qwen2.5-math-7b_fsdp.sh", {"SEED": "1"}),
            ("run_grpo_qwen2.5-math-7b_fsdp.sh", {"MODEL_PATH": "Qwen/Qwen2.5-Math-1.5B"}),
            ("run_grpo_qwen2.5-math-7b_fsdp.sh", {"TRAIN_FILE": "data/train_random_1k.parquet"}),
            ("run_grpo_qwen2.5-math-7b_megatron.sh", {}),
            ("run_clipcov_qwen2.5-math-7b_fsdp.sh", {}),
        ]
    }
    assert len(names) == 6
    assert _dry_run("run_grpo_qwen2.5-math-7b_fsdp.sh", MODEL_PATH="Qwen/Qwen2.5-Math-1.5B", TRAIN_FILE="d/train_random_1k.parquet", SEED="3")[
        "trainer.experiment_name"
    ] == "grpo_qwen2.5-math-1.5b_random_1k_fsdp_seed3"
    assert _dry_run("run_edge_qwen2.5-math-7b_fsdp.sh", CKPT_ROOT="/x")["trainer.default_local_dir"].startswith("/x/edge_verl/edge_")


def test_recipe_stops_before_verl_when_the_folder_belongs_to_another_run(tmp_path):
    data = _train_file(tmp_path, "train_hard_1k.parquet", b"rows")
    folder = tmp_path / "ckpt"
    check_or_record(folder, describe("edge", "Qwen/Qwen2.5-Math-7B", str(data), "fsdp", 42))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "CKPT_DIR": str(folder),
           "TRAIN_FILE": str(data)}
    # python -m verl... would start if the check passed: make that impossible to miss.
    completed = subprocess.run(["bash", str(RECIPES / "run_grpo_qwen2.5-math-7b_fsdp.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 3
    assert 'method: "edge" (checkpoint) vs "grpo" (this run)' in completed.stderr


def test_hydra_overrides_after_the_script_are_what_the_identity_checks(tmp_path):
    """`bash recipe.sh trainer.default_local_dir=X data.train_files=Y` runs verl on X with Y: check those."""
    data = _train_file(tmp_path, "train_hard_1k.parquet", b"rows")
    other = _train_file(tmp_path, "other.parquet", b"other rows")
    folder = tmp_path / "ckpt"
    check_or_record(folder, describe("grpo", "Qwen/Qwen2.5-Math-7B", str(data), "fsdp", 42))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "TRAIN_FILE": str(data)}
    completed = subprocess.run(
        ["bash", str(RECIPES / "run_grpo_qwen2.5-math-7b_fsdp.sh"), f"trainer.default_local_dir={folder}", f"data.train_files={other}"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 3 and "train_data" in completed.stderr and "other.parquet" in completed.stderr
