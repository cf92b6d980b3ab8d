"""The shipped training and evaluation sets in OpenRLHF's prompt-dataset format (pure; no OpenRLHF import):
``python -m edge_verl.openrlhf data OUT`` writes ``OUT/train/<set>.jsonl`` and ``OUT/eval/<set>.jsonl``.

Each row is ``{"prompt": [system, user], "label": {"answer": [...], "solution": ...}, "datasource": set}``:
- ``prompt``: the chat messages the verl data carries (``edge_verl.data.make_row``: EDGE-GRPO's system
  prompt, which asks for the answer in ``\\boxed{}``, the format the reward's strict policy grades, then the
  problem), for ``--data.input_key prompt --data.apply_chat_template``;
- ``label``: the accepted answers, always a list of strings (the verl rows' ground truth is text in some sets
  and a list in others; OpenRLHF concatenates several ``--eval.dataset`` files into one table, which needs one
  type per field), and the reference solution ("" where the set has none), for ``--data.label_key label``: the
  reward grades the answer and GEC's ``replace_solution`` branch injects the solution (``reward_func.label_parts``).
  Evaluation rows carry the answers only;
- ``datasource``: the set's name, which OpenRLHF groups its evaluation by (``eval_<datasource>_pass1``, one
  per benchmark; a row without it lands in ``eval_default_*``).
"""

from __future__ import annotations

from pathlib import Path

from edge_verl.data import EVAL_SETS, TRAIN_SETS, make_row, read_records, shipped_file, training_records, write_jsonl

INPUT_KEY = "prompt"
LABEL_KEY = "label"
DATASOURCE_KEY = "datasource"  # OpenRLHF's PromptDataset reads this key by name


def openrlhf_row(problem: str, answer, solution: str | None = None, *, datasource: str, with_solution: bool = True) -> dict:
    """The verl row's prompt and ground truth (``edge_verl.data.make_row``) in OpenRLHF's shape, the accepted
    answers as a list of strings, under ``datasource``."""
    row = make_row(problem, answer, solution, data_source=datasource, split="train", index=0, gec=False)
    gold = row["reward_model"]["ground_truth"]
    label = {"answer": [str(item) for item in gold] if isinstance(gold, list) else [str(gold)],
             **({"solution": row["extra_info"]["solution"]} if with_solution else {})}
    return {INPUT_KEY: row["prompt"], LABEL_KEY: label, DATASOURCE_KEY: datasource}


def train_file_name(name: str) -> str:
    """The training set ``name``'s file under OUT/train (and its datasource)."""
    return f"deepscaler_{name}"


def write_sets(out: Path) -> dict[str, Path]:
    """Every shipped training set (with solutions) and evaluation set (answers only) under ``out``; set name ->
    file written."""
    out = Path(out)
    written = {}
    for name in TRAIN_SETS:
        records, _ = training_records(name)
        written[name] = write_jsonl([openrlhf_row(r["problem"], r["answer"], r.get("solution"), datasource=train_file_name(name))
                                     for r in records], out / "train" / f"{train_file_name(name)}.jsonl")
    for name in EVAL_SETS:
        records = read_records(shipped_file("eval", name))
        written[name] = write_jsonl([openrlhf_row(r["problem"], r["answer"], datasource=name, with_solution=False) for r in records],
                                    out / "eval" / f"{name}.jsonl")
    return written
