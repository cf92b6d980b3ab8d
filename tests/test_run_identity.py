"""Run identity: a checkpoint folder is resumed only by the run that wrote it; the recipes name folders
after the run and check the identity before verl starts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edge_verl.data import make_row, write_parquet
from edge_verl.run_identity import IDENTITY_FILE, RunIdentityMismatch, check_or_record, describe
from tests.recipe_dry_run import dry_run, python_path_env

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def _train_file(folder: Path, name: str, content: bytes) -> Path:
    path = folder / name
    path.write_bytes(content)
    return path


def _parquet(folder: Path, name: str, answer: str = "2") -> Path:
    """A real (tiny) training file: the recipes' preflight reads its columns before the identity check."""
    return write_parquet([make_row("1+1", answer, None, data_source="t", split="train", index=0, gec=False)], folder / name)


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
    (folder / "latest_checkpointed_iteration.txt").write_text("1")
    assert check_or_record(folder, describe("grpo", "m", str(_train_file(tmp_path / "b", "train.parquet", b"rows")), "fsdp", 1))
    with pytest.raises(RunIdentityMismatch, match="train_data"):
        check_or_record(folder, describe("grpo", "m", str(_train_file(tmp_path / "c", "train.parquet", b"other")), "fsdp", 1))


@pytest.mark.parametrize(
    "key, changed", [("method", "gepo"), ("model", "Qwen/Qwen2.5-7B"), ("backend", "megatron"), ("seed", 2), ("tag", "edge_hard_1k/grpo_7b")]
)
def test_every_identity_setting_that_differs_is_named(tmp_path, key, changed):
    data = str(_train_file(tmp_path, "train.parquet", b"rows"))
    settings = {"method": "grpo", "model": "Qwen/Qwen2.5-Math-7B", "train_file": data, "backend": "fsdp", "seed": 1}
    folder = tmp_path / "ckpt"
    check_or_record(folder, describe(**settings))
    (folder / "latest_checkpointed_iteration.txt").write_text("4")
    with pytest.raises(RunIdentityMismatch) as raised:
        check_or_record(folder, describe(**{**settings, key: changed}))
    message = str(raised.value)
    assert f"{key}:" in message and str(changed) in message and "CKPT_DIR" in message and "latest step 4" in message
    assert f"delete {folder}" in message
    assert sum(line.strip().startswith(("method:", "model:", "train_data:", "backend:", "seed:", "tag:")) for line in message.splitlines()) == 1


def test_a_folder_without_checkpoints_never_blocks_a_run(tmp_path):
    """A run that failed before its first save left only its record: the corrected run takes the folder."""
    data = str(_train_file(tmp_path, "train.parquet", b"rows"))
    folder = tmp_path / "ckpt"
    check_or_record(folder, describe("grpo", "m", data, "fsdp", 1))
    corrected = describe("grpo", "m", data, "fsdp", 2)
    assert check_or_record(folder, corrected).startswith("re-recorded")
    assert json.loads((folder / IDENTITY_FILE).read_text()) == corrected


def test_no_identity_is_described_or_recorded_for_a_training_file_that_does_not_exist(tmp_path, capsys):
    from edge_verl.cli import main

    with pytest.raises(FileNotFoundError, match="no run identity is recorded"):
        describe("grpo", "m", str(tmp_path / "missing.parquet"), "fsdp", 1)
    argv = ["run-identity", str(tmp_path / "ckpt"), "--method", "grpo", "--model", "m", "--train-file", str(tmp_path / "missing.parquet"),
            "--backend", "fsdp", "--seed", "1"]
    assert main(argv) == 3
    assert not (tmp_path / "ckpt").exists() and "missing.parquet not found" in capsys.readouterr().err


def test_a_folder_with_checkpoints_but_no_record_is_refused(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10")
    data = str(_train_file(tmp_path, "t.parquet", b"rows"))
    with pytest.raises(RunIdentityMismatch, match="no edge_verl_run.json"):
        check_or_record(tmp_path, describe("grpo", "m", data, "fsdp", 1))


def _dry_run(recipe: str, **env) -> dict:
    return dry_run(recipe, **env).values


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
    data = _parquet(tmp_path, "train_hard_1k.parquet")
    folder = tmp_path / "ckpt"
    check_or_record(folder, describe("edge", "Qwen/Qwen2.5-Math-7B", str(data), "fsdp", 42))
    (folder / "latest_checkpointed_iteration.txt").write_text("5")
    env = python_path_env(CKPT_DIR=str(folder), TRAIN_FILE=str(data), VAL_FILES=f"[{data}]")
    # python -m verl... would start if the check passed: make that impossible to miss.
    completed = subprocess.run(["bash", str(RECIPES / "run_grpo_qwen2.5-math-7b_fsdp.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 3
    assert 'method: "edge" (checkpoint) vs "grpo" (this run)' in completed.stderr


def test_hydra_overrides_after_the_script_are_what_the_identity_checks(tmp_path):
    """`bash recipe.sh trainer.default_local_dir=X data.train_files=Y` runs verl on X with Y: check those."""
    data = _parquet(tmp_path, "train_hard_1k.parquet")
    other = _parquet(tmp_path, "other.parquet", answer="3")
    folder = tmp_path / "ckpt"
    check_or_record(folder, describe("grpo", "Qwen/Qwen2.5-Math-7B", str(data), "fsdp", 42))
    (folder / "latest_checkpointed_iteration.txt").write_text("5")
    env = python_path_env(TRAIN_FILE=str(data), VAL_FILES=f"[{data}]")
    completed = subprocess.run(
        ["bash", str(RECIPES / "run_grpo_qwen2.5-math-7b_fsdp.sh"), f"trainer.default_local_dir={folder}", f"data.train_files={other}"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 3 and "train_data" in completed.stderr and "other.parquet" in completed.stderr


def test_a_recipe_whose_training_file_is_missing_stops_in_seconds_and_records_nothing(tmp_path):
    """Before: the identity was recorded without a hash, verl failed minutes later after Ray start, and the
    folder then refused the corrected run. Now: the preflight names the file; no folder, no record."""
    val = _parquet(tmp_path, "val.parquet")
    folder = tmp_path / "ckpt"
    variables = {"TRAIN_FILE": str(tmp_path / "train_hard_1k.parquet"), "VAL_FILES": f"[{val}]", "CKPT_DIR": str(folder)}
    env = python_path_env(**variables)
    completed = subprocess.run(["bash", str(RECIPES / "run_grpo_qwen2.5-math-7b_fsdp.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    last = completed.stderr.strip().splitlines()[-1]
    assert last.startswith("edge-verl preflight: data.train_files:") and "train_hard_1k.parquet not found" in last
    assert not folder.exists()
    # the corrected run takes the folder
    variables["TRAIN_FILE"] = str(_parquet(tmp_path, "train_hard_1k.parquet"))
    overrides = dry_run("run_grpo_qwen2.5-math-7b_fsdp.sh", **variables).overrides
    completed = subprocess.run(
        [sys.executable, "-m", "edge_verl.cli", "preflight", "--method", "grpo", *overrides], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert "run identity recorded" in completed.stdout and (folder / IDENTITY_FILE).exists()
