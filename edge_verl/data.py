"""Data preparation for the papers' setups: ../shared/data -> verl RL parquet (pure; no verl import).

Every row carries the Qwen2.5-Math chat prompt of EDGE-GRPO (system prompt + the raw problem), the
answer as ``reward_model.ground_truth`` (a string, or a list of acceptable answers for Minerva /
OlympiadBench), and in ``extra_info`` the answer and the reference solution (verl's stock MATH
preprocessing drops the solution; GEC's replace branch needs it). Training rows are marked for GEC with
``agent_name = "edge_gec"`` unless asked not to. Output bytes are deterministic.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Iterable, Optional

from edge_verl.integration.names import GEC_AGENT_LOOP as GEC_AGENT

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."

TRAIN_SETS = {
    "hard_1k": "deepscaler_hard_1k.json",
}
RANDOM_POOLS = ("deepscaler_aime_975.json", "deepscaler_math_7474.json", "deepscaler_slice_2k.parquet")
EVAL_SETS = {
    "aime24": "aime.jsonl",
    "amc": "amc.jsonl",
    "math500": "math.jsonl",
    "minerva": "minerva.jsonl",
    "olympiad_bench": "olympiad_bench.jsonl",
    "aime25": "aime25.jsonl",
}
PAPER_EVAL = ("aime24", "amc", "math500", "minerva", "olympiad_bench")


def prompt_messages(problem: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem}]


def _answer_list(answer: Any) -> list[str]:
    if isinstance(answer, (list, tuple)):
        return [str(item) for item in answer]
    return [str(answer)]


def make_row(
    problem: str, answer: Any, solution: Optional[str], *, data_source: str, split: str, index: int, gec: bool
) -> dict:
    answers = _answer_list(answer)
    row = {
        "data_source": data_source,
        "prompt": prompt_messages(problem),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answers if len(answers) > 1 or isinstance(answer, list) else answers[0]},
        "extra_info": {"index": index, "split": split, "answer": answers[0], "solution": solution or "", "problem": problem},
    }
    if gec:
        row["agent_name"] = GEC_AGENT
    return row


def read_records(path: Path) -> list[dict]:
    """JSON list, JSONL, or verl parquet (converted back to problem/answer/solution records)."""
    if path.suffix == ".json":
        return json.loads(path.read_text())
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    import pyarrow.parquet as pq

    records = []
    for row in pq.read_table(path).to_pylist():
        problem = next(message["content"] for message in row["prompt"] if message["role"] == "user")
        records.append({"problem": problem, "answer": row["reward_model"]["ground_truth"], "solution": None})
    return records


def training_rows(data_dir: Path, name: str, *, gec: bool = True, size: int = 1000, seed: int = 42) -> list[dict]:
    """"hard_1k" (the paper's DeepScaleR-Hard-1K) or "random_1k" (a seeded stand-in: ``size`` problems
    drawn without replacement from the DeepScaleR pools at hand, deduplicated by problem text)."""
    if name == "hard_1k":
        records = read_records(data_dir / "train" / TRAIN_SETS[name])
    elif name == "random_1k":
        pool: dict[str, dict] = {}
        for file_name in RANDOM_POOLS:
            for record in read_records(data_dir / "train" / file_name):
                pool.setdefault(record["problem"].strip(), record)
        keys = sorted(pool)
        records = [pool[key] for key in random.Random(seed).sample(keys, size)]
    else:
        raise ValueError(f"training set {name!r}; allowed: hard_1k, random_1k")
    return [
        make_row(r["problem"], r["answer"], r.get("solution"), data_source=f"deepscaler_{name}", split="train", index=i, gec=gec)
        for i, r in enumerate(records)
    ]


def eval_rows(data_dir: Path, name: str, limit: Optional[int] = None) -> list[dict]:
    if name not in EVAL_SETS:
        raise ValueError(f"evaluation set {name!r}; allowed: {sorted(EVAL_SETS)}")
    records = read_records(data_dir / "eval" / EVAL_SETS[name])[:limit]
    return [
        make_row(r["problem"], r["answer"], None, data_source=name, split="test", index=i, gec=False) for i, r in enumerate(records)
    ]


def write_parquet(rows: Iterable[dict], path: Path) -> Path:
    """Deterministic parquet (same rows -> same bytes): pyarrow, no pandas index, fixed compression."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(list(rows))
    pq.write_table(table, path, compression="zstd", use_dictionary=False, write_statistics=False)
    return path
