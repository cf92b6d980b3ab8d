"""``python -m edge_verl.openrlhf data OUT``: the shipped sets in OpenRLHF's format, read by OpenRLHF 0.11.2's own
prompt preprocessing and graded by the reward the OpenRLHF hooks use."""

import importlib.util
import json
import subprocess
import sys

from edge_verl.data import SYSTEM_PROMPT, eval_rows, training_rows
from edge_verl.openrlhf.data import DATASOURCE_KEY, INPUT_KEY, LABEL_KEY
from edge_verl.openrlhf.options import RewardOptions
from edge_verl.openrlhf.reward_func import grade_response, label_parts
from tests.openrlhf.conftest import OPENRLHF_DIR


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _openrlhf_preprocess():
    """OpenRLHF's ``preprocess_data`` from its datasets/prompts_dataset.py (the package's __init__ needs its GPU stack)."""
    spec = importlib.util.spec_from_file_location("openrlhf_prompts_dataset", OPENRLHF_DIR / "datasets" / "prompts_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.preprocess_data


def test_the_data_command_writes_every_set_with_the_verl_prompt_and_a_label_the_reward_grades(tmp_path):
    done = subprocess.run([sys.executable, "-m", "edge_verl.openrlhf", "data", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    written = dict(line.split("\t") for line in done.stdout.splitlines())
    assert set(written) == {"hard_1k", "random_1k", "aime24", "amc", "math500", "minerva", "olympiad_bench", "aime25"}
    preprocess = _openrlhf_preprocess()
    options = RewardOptions()
    for name, path in written.items():
        rows = _rows(tmp_path / path.split(str(tmp_path) + "/", 1)[1])
        verl = training_rows(name, gec=False) if name in ("hard_1k", "random_1k") else eval_rows(name)
        assert len(rows) == len(verl)
        for row, verl_row in zip(rows, verl):
            # the verl row's prompt (the system prompt asks for \boxed{}) and ground truth
            assert row[INPUT_KEY] == verl_row["prompt"] and row[INPUT_KEY][0]["content"] == SYSTEM_PROMPT
            # the verl row's ground truth, always as a list of strings; the verl row's data source, by which OpenRLHF groups
            gold = verl_row["reward_model"]["ground_truth"]
            assert row[LABEL_KEY]["answer"] == (gold if isinstance(gold, list) else [gold]) and all(isinstance(a, str) for a in row[LABEL_KEY]["answer"])
            assert row[DATASOURCE_KEY] == verl_row["data_source"] == (f"deepscaler_{name}" if name in ("hard_1k", "random_1k") else name)
            assert ("solution" in row[LABEL_KEY]) == (name in ("hard_1k", "random_1k"))
        # OpenRLHF's preprocessing with --data.apply_chat_template hands the messages to the chat template
        seen = []
        prompt, label = preprocess(rows[0], input_key=INPUT_KEY, label_key=LABEL_KEY,
                                   apply_chat_template=lambda chat, seen=seen, **_: seen.append(chat) or "templated")
        assert prompt == "templated" and seen[0] == rows[0][INPUT_KEY] and label == rows[0][LABEL_KEY]
        # the gold answer, boxed, scores 1 and a wrong one 0 (the first rows of each set)
        for row in rows[:3]:
            gold, answer, _ = label_parts(row[LABEL_KEY])
            assert grade_response(f"so \\boxed{{{answer}}}", row[LABEL_KEY], options)["score"] == 1.0, (name, answer)
            assert grade_response("so \\boxed{\\text{nothing}}", row[LABEL_KEY], options)["score"] == 0.0
    hard = _rows(tmp_path / "train" / "deepscaler_hard_1k.jsonl")
    assert sum(bool(row[LABEL_KEY]["solution"]) for row in hard) == 1000  # GEC's replace_solution has its solution


def test_a_wrong_call_says_how_to_use_it():
    done = subprocess.run([sys.executable, "-m", "edge_verl.openrlhf", "data"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "data OUT" in done.stderr


def test_the_five_evaluation_files_load_as_one_table_as_openrlhf_concatenates_them(tmp_path):
    # OpenRLHF's blending_datasets loads each --eval.dataset file with HF datasets and concatenates them: one type
    # per field across the files (minerva's and olympiad_bench's answers were lists, the others' strings)
    from datasets import concatenate_datasets, load_dataset

    from edge_verl.data import PAPER_EVAL
    from edge_verl.openrlhf.data import write_sets

    written = write_sets(tmp_path)
    table = concatenate_datasets([load_dataset("json", data_files=str(written[name]))["train"] for name in PAPER_EVAL])
    counts = {name: table["datasource"].count(name) for name in PAPER_EVAL}
    assert counts == {name: len(_rows(written[name])) for name in PAPER_EVAL} and sum(counts.values()) == len(table)
