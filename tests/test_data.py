"""Data preparation: shipped sets equal their sources, row counts and fields, GEC marks, byte-identical
re-runs, Random-1K through ``datasets`` (a data set the test writes itself) with the pools as fallback,
and nothing in the product reading ../shared."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from edge_verl.data import (
    EVAL_SETS,
    MANIFEST,
    PAPER_EVAL,
    SYSTEM_PROMPT,
    DataUnavailable,
    RandomSource,
    eval_rows,
    prompt_messages,
    load_deepscaler,
    prepare,
    read_records,
    random_1k_records,
    sample_unique,
    sft_rows,
    shipped_file,
    training_records,
    training_rows,
    write_parquet,
)

REPO = Path(__file__).resolve().parents[1]
EXPECTED_EVAL_ROWS = {"aime24": 30, "amc": 83, "math500": 500, "minerva": 272, "olympiad_bench": 675, "aime25": 30}
SHARED_EVAL_FILES = {"aime24": "aime.jsonl", "amc": "amc.jsonl", "math500": "math.jsonl", "minerva": "minerva.jsonl",
                     "olympiad_bench": "olympiad_bench.jsonl", "aime25": "aime25.jsonl"}


def test_shipped_sets_are_the_sources_records(shared_data):
    assert read_records(shipped_file("train", "hard_1k")) == json.loads((shared_data / "train" / "deepscaler_hard_1k.json").read_text())
    for name, source in SHARED_EVAL_FILES.items():
        assert shipped_file("eval", name).read_bytes() == (shared_data / "eval" / source).read_bytes(), name


def test_paper_suite_has_1560_problems():
    assert sum(len(eval_rows(name)) for name in PAPER_EVAL) == 1560


@pytest.mark.parametrize("name", EVAL_SETS)
def test_eval_rows(name):
    rows = eval_rows(name)
    assert len(rows) == EXPECTED_EVAL_ROWS[name]
    for row in rows:
        assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert row["prompt"][1]["role"] == "user" and row["prompt"][1]["content"]
        assert row["data_source"] == name and "agent_name" not in row
        assert row["reward_model"]["ground_truth"] not in ("", [])
    if name in ("minerva", "olympiad_bench"):
        assert all(isinstance(row["reward_model"]["ground_truth"], list) for row in rows)


def test_hard_1k_keeps_answer_and_solution_and_marks_gec():
    rows = training_rows("hard_1k")
    assert len(rows) == 1000
    assert all(row["agent_name"] == "edge_gec" for row in rows)
    assert all(row["extra_info"]["answer"] for row in rows)
    assert all("\\boxed" in row["extra_info"]["solution"] for row in rows)
    assert "agent_name" not in training_rows("hard_1k", gec=False)[0]


def _deepscaler_like(folder: Path, count: int, offset: int = 0) -> Path:
    """A hub-shaped data set (data/train-*.parquet) written with ``datasets`` itself; 5 problems repeat."""
    import datasets

    records = [
        {"problem": f"Problem {(i % (count - 5)) + offset}", "answer": str(i), "solution": f"so \\boxed{{{i}}}"} for i in range(count)
    ]
    (folder / "data").mkdir(parents=True)
    datasets.Dataset.from_list(records).to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    return folder


def test_random_1k_through_datasets_is_seeded_duplicate_free_and_order_independent(tmp_path):
    source = _deepscaler_like(tmp_path / "hub", 60)
    assert len(load_deepscaler(str(source))) == 60
    records, provenance = random_1k_records(RandomSource(hub=str(source)), size=20, seed=1)
    assert provenance == f"datasets:{source}"
    assert len(records) == 20 and len({r["problem"] for r in records}) == 20
    assert records == random_1k_records(RandomSource(hub=str(source)), size=20, seed=1)[0]
    assert records != random_1k_records(RandomSource(hub=str(source)), size=20, seed=2)[0]
    shuffled = list(reversed(load_deepscaler(str(source))))
    assert [r["problem"] for r in sample_unique(shuffled, 20, 1)] == [r["problem"] for r in records]
    with pytest.raises(ValueError, match="55 unique"):
        sample_unique(shuffled, 56, 1)


def test_random_1k_falls_back_to_pools_and_says_so(tmp_path):
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({"problem": f"P{i}", "answer": str(i)}) + "\n" for i in range(30)))
    unreachable = RandomSource(hub=str(tmp_path / "no-such-dataset"), pools=(pool,))
    records, provenance = random_1k_records(unreachable, size=10, seed=0)
    assert provenance == "pools:pool.jsonl" and len(records) == 10
    with pytest.raises(DataUnavailable, match="--random-pool"):
        random_1k_records(RandomSource(hub=str(tmp_path / "no-such-dataset")), size=10)


def test_prepare_writes_manifest_and_is_byte_identical_on_rerun(tmp_path):
    source = RandomSource(hub=str(_deepscaler_like(tmp_path / "hub", 1200)))
    first = prepare(tmp_path / "a", random_source=source)
    second = prepare(tmp_path / "b", random_source=source)
    assert not first.failed and first.files == second.files
    expected = {f"{kind}_{s}.parquet" for s in ("hard_1k", "random_1k") for kind in ("train", "sft")}
    expected |= {f"train_{s}_gec.parquet" for s in ("hard_1k", "random_1k")} | {f"eval_{n}.parquet" for n in EVAL_SETS}
    assert set(first.files) == expected
    for name in expected:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert manifest["train_random_1k.parquet"]["source"].startswith("datasets:") and manifest["train_random_1k.parquet"]["rows"] == 1000
    table = pq.read_table(tmp_path / "a" / "train_hard_1k_gec.parquet").to_pylist()
    assert table[0]["extra_info"]["solution"] == training_rows("hard_1k")[0]["extra_info"]["solution"]
    assert table[0]["agent_name"] == "edge_gec"


def test_prepare_reports_a_set_it_cannot_build_and_writes_the_rest(tmp_path):
    prepared = prepare(tmp_path, random_source=RandomSource(hub=None))
    assert set(prepared.failed) == {"random_1k"}
    assert (tmp_path / "train_hard_1k.parquet").exists() and not (tmp_path / "train_random_1k.parquet").exists()


def test_prepare_data_script_works_where_there_is_no_shared_folder(tmp_path):
    """A fresh machine: the package copied into an empty folder, run from there; no ../shared anywhere near."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(REPO / "edge_verl", site / "edge_verl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "scripts" / "prepare_data.py", tmp_path / "prepare_data.py")
    env = {**os.environ, "PYTHONPATH": str(site), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run(
        [sys.executable, "prepare_data.py", "--out", "data", "--train-sets", "hard_1k"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert len(pq.read_table(tmp_path / "data" / "train_hard_1k_gec.parquet")) == 1000
    assert len(pq.read_table(tmp_path / "data" / "eval_olympiad_bench.parquet")) == 675
    offline = subprocess.run(
        [sys.executable, "prepare_data.py", "--out", "data2", "--train-sets", "random_1k", "--random-source", "no/such-hub-id"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert offline.returncode == 1 and "NOT WRITTEN train_random_1k" in offline.stderr and "--random-pool" in offline.stderr
    default = subprocess.run(  # the default asks for everything: what cannot be built here is reported, not fatal
        [sys.executable, "prepare_data.py", "--out", "data3", "--random-source", "no/such-hub-id"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert default.returncode == 0 and "NOT WRITTEN train_random_1k" in default.stderr
    assert (tmp_path / "data3" / "train_hard_1k.parquet").exists() and not (tmp_path / "data3" / "train_random_1k.parquet").exists()


def test_no_product_file_reads_the_shared_folder():
    product = [*(REPO / "edge_verl").rglob("*.py"), *(path for path in (REPO / "scripts").rglob("*") if path.is_file()), *(REPO / "recipes").rglob("*.sh")]
    offenders = [str(path) for path in product if '"shared"' in path.read_text() or "../shared" in path.read_text()]
    assert offenders == []


def test_parquet_round_trips(tmp_path):
    rows = training_rows("hard_1k")
    write_parquet(rows, tmp_path / "a.parquet")
    assert read_records(tmp_path / "a.parquet")[3] == {
        "problem": rows[3]["extra_info"]["problem"], "answer": rows[3]["reward_model"]["ground_truth"], "solution": rows[3]["extra_info"]["solution"]
    }


def test_sft_rows_answer_the_rl_prompt_with_the_reference_solution():
    records = [{"problem": "1+1?", "answer": "2", "solution": "1+1 = \\boxed{2}"}, {"problem": "x", "answer": "1", "solution": ""}]
    (row,) = sft_rows(records)  # the second has no solution: left out
    assert row["messages"][:2] == prompt_messages("1+1?")
    assert row["messages"][2] == {"role": "assistant", "content": "1+1 = \\boxed{2}"}
    hard = sft_rows(training_records("hard_1k")[0])
    assert len(hard) == sum(bool(r.get("solution")) for r in training_records("hard_1k")[0]) > 900
