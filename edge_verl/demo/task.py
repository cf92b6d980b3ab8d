"""The demo's task: single-digit problems with a verifiable answer, in verl's RL parquet format.

"copy" asks the model to repeat a digit ("Copy 7." -> 7). A tiny model warm-started on the answer format
with random digits starts near 10% accuracy and GRPO lifts it within a few dozen steps, so a CPU run shows
learning rather than only "it ran". Rows carry the answer and a reference solution in ``extra_info``
(the fields GEC needs), like the real data preparation.
"""

from __future__ import annotations

import random
from pathlib import Path

DATA_SOURCE = "edge_verl/demo_copy"
ANSWER_FORMAT = "\\boxed{{{}}}"


def make_problem(digit: int) -> tuple[str, str]:
    return f"Copy {str(digit) * 12}", str(digit)


def make_solution(answer: str) -> str:
    """The reference solution of a row (ends in the boxed answer, like the papers' data)."""
    return f"The digit to copy is {answer}. {ANSWER_FORMAT.format(answer)}"


def problems() -> list[tuple[str, str]]:
    """Every distinct (question, answer) pair of the task."""
    return [make_problem(digit) for digit in range(10)]


def make_rows(count: int, seed: int, split: str, agent_name: str | None = None) -> list[dict]:
    """``count`` rows in verl's RL format; ``agent_name`` (e.g. "edge_gec") selects verl's agent loop
    for every row (training data only: validation must run the default loop)."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        question, answer = make_problem(rng.randrange(10))
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {
                    "index": index,
                    "split": split,
                    "answer": answer,
                    "solution": make_solution(answer),
                },
            }
        )
        if agent_name is not None:
            rows[-1]["agent_name"] = agent_name
    return rows


def write_parquet(rows: list[dict], path: str | Path) -> Path:
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path
