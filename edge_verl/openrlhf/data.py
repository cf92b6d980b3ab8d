"""The shipped training and evaluation sets in OpenRLHF's prompt-dataset format (pure; no OpenRLHF import):
``python -m edge_verl.openrlhf data OUT`` writes ``OUT/train/<set>.jsonl`` and ``OUT/eval/<set>.jsonl``.

Each row is ``{"prompt": [system, user], "label": {"answer": ..., "solution": ...}}``:
- ``prompt``: the chat messages the verl data carries (``edge_verl.data.make_row``: EDGE-GRPO's system
  prompt, which asks for the answer in ``\\boxed{}``, the format the reward's strict policy grades, then the
  problem), for ``--data.input_key prompt --data.apply_chat_template``;
- ``label``: the answer as the verl rows' ground truth (text, or the list of accepted answers) and the reference
  solution ("" where the set has none), for ``--data.label_key label``: the reward grades the answer and GEC's
  ``replace_solution`` branch injects the solution (``reward_func.label_parts``). Evaluation rows carry the
  answer only.
"""

from __future__ import annotations

from pathlib import Path

from edge_verl.data import EVAL_SETS, TRAIN_SETS, make_row, read_records, shipped_file, training_records, write_jsonl

INPUT_KEY = "prompt"
LABEL_KEY = "label"


def openrlhf_row(problem: str, answer, solution: str | None = None, *, with_solution: bool = True) -> dict:
    """The verl row's prompt and ground truth (``edge_verl.data.make_row``: answers as text, a list where the set
    accepts several), in OpenRLHF's shape."""
    row = make_row(problem, answer, solution, data_source="openrlhf", split="train", index=0, gec=False)
    label = {"answer": row["reward_model"]["ground_truth"], **({"solution": row["extra_info"]["solution"]} if with_solution else {})}
    return {INPUT_KEY: row["prompt"], LABEL_KEY: label}


def write_sets(out: Path) -> dict[str, Path]:
    """Every shipped training set (with solutions) and evaluation set (answers only) under ``out``; set name ->
    file written."""
    out = Path(out)
    written = {}
    for name in TRAIN_SETS:
        records, _ = training_records(name)
        written[name] = write_jsonl([openrlhf_row(r["problem"], r["answer"], r.get("solution")) for r in records],
                                    out / "train" / f"deepscaler_{name}.jsonl")
    for name in EVAL_SETS:
        records = read_records(shipped_file("eval", name))
        written[name] = write_jsonl([openrlhf_row(r["problem"], r["answer"], with_solution=False) for r in records],
                                    out / "eval" / f"{name}.jsonl")
    return written
