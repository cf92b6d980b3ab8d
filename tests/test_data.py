"""Data preparation: shipped sets equal their sources (Random-1K: its re-draw) and their README checksums,
row counts and fields, GEC marks, byte-identical re-runs, the default run writing every set a recipe reads
without a network, other Random-1K draws through ``datasets`` (a data set the test writes itself) with the
pools as fallback, a non-zero exit for a set not written, and nothing in the product reading ../shared."""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from edge_verl.data import (
    EVAL_SETS,
    MANIFEST,
    PAPER_EVAL,
    SETS_DIR,
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
    sha256,
    sft_rows,
    shipped_file,
    training_records,
    training_rows,
    write_parquet,
)

REPO = Path(__file__).resolve().parents[1]
RANDOM_1K_POOLS = ("deepscaler_aime_975.json", "deepscaler_math_7474.json")  # the order the sets README gives
EXPECTED_EVAL_ROWS = {"aime24": 30, "amc": 83, "math500": 500, "minerva": 272, "olympiad_bench": 675, "aime25": 30}
SHARED_EVAL_FILES = {"aime24": "aime.jsonl", "amc": "amc.jsonl", "math500": "math.jsonl", "minerva": "minerva.jsonl",
                     "olympiad_bench": "olympiad_bench.jsonl", "aime25": "aime25.jsonl"}


def test_shipped_sets_are_the_sources_records(shared_data):
    assert read_records(shipped_file("train", "hard_1k")) == json.loads((shared_data / "train" / "deepscaler_hard_1k.json").read_text())
    for name, source in SHARED_EVAL_FILES.items():
        assert shipped_file("eval", name).read_bytes() == (shared_data / "eval" / source).read_bytes(), name


def test_every_shipped_file_has_its_readme_sha256():
    readme = (SETS_DIR / "README.md").read_text()
    listed = {path: digest for digest, path in re.findall(r"^ {4}([0-9a-f]{64})  (\S+)$", readme, flags=re.MULTILINE)}
    shipped = {str(path.relative_to(SETS_DIR)): sha256(path) for path in SETS_DIR.rglob("*.jsonl")}
    assert "train/deepscaler_random_1k.jsonl" in shipped and len(shipped) == 8  # 2 training + 6 evaluation sets
    assert listed == shipped


def test_shipped_random_1k_is_1000_distinct_problems_each_with_an_answer_solutions_where_the_pool_has_them():
    records, provenance = training_records("random_1k")
    assert provenance == "shipped:deepscaler_random_1k.jsonl"
    assert len(records) == 1000 and len({r["problem"].strip() for r in records}) == 1000
    assert all(r["problem"].strip() and str(r["answer"]).strip() for r in records)
    # the AIME pool carries reference solutions, the MATH pool none (the README's 127 / 873)
    assert {r["pool"] for r in records if r["solution"].strip()} == {"deepscaler_aime_975.json"}
    assert sum(r["pool"] == "deepscaler_aime_975.json" for r in records) == 127
    assert sum(r["pool"] == "deepscaler_math_7474.json" and not r["solution"] for r in records) == 873


def test_random_1k_overlap_with_hard_1k_is_the_one_the_readme_reports():
    hard = {r["problem"].strip() for r in training_records("hard_1k")[0]}
    overlap = sum(r["problem"].strip() in hard for r in training_records("random_1k")[0])
    assert overlap == 62
    assert "62 of the 1000 are also in" in (SETS_DIR / "README.md").read_text()


def test_redraw_script_reproduces_the_shipped_random_1k_byte_for_byte(shared_data, tmp_path):
    pools = [str(shared_data / "train" / name) for name in RANDOM_1K_POOLS]
    completed = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "draw_random_1k.py"), *pools, "--out", str(tmp_path / "r.jsonl")],
        capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert (tmp_path / "r.jsonl").read_bytes() == shipped_file("train", "random_1k").read_bytes()
    # The same draw in-process, through the pool source prepare_data.py's --random-pool uses.
    records, provenance = random_1k_records(RandomSource(pools=tuple(Path(p) for p in pools)))
    assert records == training_records("random_1k")[0]
    assert provenance == "pools:deepscaler_aime_975.json,deepscaler_math_7474.json (seed 42, 1000 problems)"


def test_shipped_random_1k_refuses_another_seed_or_size_and_names_the_fix():
    with pytest.raises(DataUnavailable, match="seed=7.*--random-pool"):
        random_1k_records(seed=7)
    with pytest.raises(DataUnavailable, match="size=500"):
        training_records("random_1k", size=500)


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
    assert provenance == f"datasets:{source} (seed 1, 20 problems)"
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
    assert provenance == "pools:pool.jsonl (seed 0, 10 problems)" and len(records) == 10
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
    prepared = prepare(tmp_path, random_source=RandomSource(hub=str(tmp_path / "missing.parquet")))
    assert set(prepared.failed) == {"random_1k"} and "FileNotFoundError" in prepared.failed["random_1k"]
    assert (tmp_path / "train_hard_1k.parquet").exists() and not (tmp_path / "train_random_1k.parquet").exists()


def test_prepare_with_nothing_it_can_write_reports_it_and_leaves_no_folder(tmp_path):
    # another size of the shipped draw without a source to draw from, and no evaluation set asked for
    prepared = prepare(tmp_path / "data", train_sets=["random_1k"], eval_sets=[], size=50)
    assert prepared.files == {} and "size=50" in prepared.failed["random_1k"]
    assert not (tmp_path / "data").exists()


def test_prepare_by_default_writes_random_1k_from_the_shipped_draw_without_network(tmp_path, monkeypatch):
    import datasets

    def no_network(*args, **kwargs):
        raise AssertionError("the default Random-1K must not reach datasets or a socket")

    monkeypatch.setattr(datasets, "load_dataset", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    prepared = prepare(tmp_path)
    assert not prepared.failed
    # the SFT baseline needs reference solutions: the 127 AIME problems have them
    for name, rows in (("train_random_1k.parquet", 1000), ("train_random_1k_gec.parquet", 1000), ("sft_random_1k.parquet", 127)):
        assert prepared.files[name]["rows"] == rows, name
        assert prepared.files[name]["source"].startswith("shipped:deepscaler_random_1k.jsonl"), name
    shipped = training_records("random_1k")[0]
    assert read_records(tmp_path / "train_random_1k_gec.parquet") == [
        {"problem": r["problem"], "answer": r["answer"], "solution": r["solution"]} for r in shipped
    ]


def _files_recipes_read() -> set[str]:
    """Every data file name a recipe names, e.g. train_random_1k.parquet, and the ``*_gec`` sibling of each
    training file (the GEC methods' rows; edge_verl_lab.reproduce switches to it)."""
    texts = [path.read_text() for path in (REPO / "recipes").rglob("*.sh")]  # the shared defaults' too (recipes/lib)
    names = {name for text in texts for name in re.findall(r"\b(?:train|sft|eval)_[a-z0-9_]+\.parquet", text)}
    return names | {name.replace(".parquet", "_gec.parquet") for name in names if name.startswith("train_") and "_gec" not in name}


def test_prepare_data_script_works_where_there_is_no_shared_folder(tmp_path):
    """A fresh machine: the package copied into an empty folder, run from there; no ../shared anywhere near,
    no hub. The default run writes every file a recipe reads; a set asked for and not written exits 1."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(REPO / "edge_verl", site / "edge_verl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "scripts" / "prepare_data.py", tmp_path / "prepare_data.py")
    env = {**os.environ, "PYTHONPATH": str(site), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}

    def prepare_data(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "prepare_data.py", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )

    default = prepare_data("--out", "data")
    assert default.returncode == 0, default.stderr[-3000:]
    written = {path.name for path in (tmp_path / "data").iterdir()}
    assert {"train_random_1k_gec.parquet", "sft_hard_1k.parquet", "eval_aime24.parquet"} <= _files_recipes_read() <= written
    assert len(pq.read_table(tmp_path / "data" / "train_random_1k_gec.parquet")) == 1000
    assert len(pq.read_table(tmp_path / "data" / "eval_olympiad_bench.parquet")) == 675
    for args in (["--train-sets", "random_1k"], []):  # asked for by name or by default: either way it must be written
        missing = prepare_data("--out", "data2", "--random-source", str(tmp_path / "missing.parquet"), *args)
        assert missing.returncode == 1, args
        assert "NOT WRITTEN train_random_1k" in missing.stderr and "--random-pool" in missing.stderr, args
        assert not (tmp_path / "data2" / "train_random_1k.parquet").exists()
    assert (tmp_path / "data2" / "train_hard_1k.parquet").exists()  # the sets it can build are still written


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
