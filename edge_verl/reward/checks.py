"""Checks of the grader that the test suite and ``scripts/bench_reward.py`` run.

- ``run_load``: hostile answers and correct symbolic ones submitted together from many threads. Every call
  starts at once (a barrier), hostile ones first in line, each from its own thread -- how verl's reward
  loop calls ``compute_score`` for a batch. The guarantee checked: no correct answer is lost, and every
  call returns within ``wait_s + timeout_s`` (plus pipe latency).
- ``agreement``: how often a grader agrees with labelled (response, gold, expected) cases, e.g. the unit
  tests of other public graders (``tests/reward/data/public_grader_cases.jsonl``).
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

# Each holds a grading worker until its deadline (sympy never finishes them).
HOSTILE_ANSWERS = (
    "9^{9^{9^{9^{9^{9}}}}}",
    "(10^{10})!!",
    "2^{2^{2^{100}}}",
    "10^{10^{10^{10^{10}}}}",
    "(10^{100})!",
    "7^{7^{7^{7^{7^{7}}}}}",
)
# (answer, gold): equal only symbolically, so a grading worker must decide each (the test checks this).
CORRECT_SYMBOLIC = (
    ("\\frac{1}{\\sqrt{2}}", "\\frac{\\sqrt{2}}{2}"),
    ("\\sqrt{18}", "3\\sqrt{2}"),
    ("(x+1)^2", "x^2+2x+1"),
    ("\\frac{\\pi}{2}", "\\frac{1}{2}\\pi"),
    ("2^{10}", "1024"),
    ("\\frac{\\sqrt{3}}{2}", "\\sin(\\pi/3)"),
    ("\\binom{5}{2}", "10"),
    ("1.5\\times 10^{3}", "1500"),
    ("\\log_2 8", "3"),
)


def boxed(answer: str) -> str:
    return f"Reasoning ... so the answer is \\boxed{{{answer}}}."


@dataclass(frozen=True)
class Call:
    kind: str  # "hostile" or "correct"
    score: float
    grader: str
    seconds: float


@dataclass(frozen=True)
class LoadResult:
    calls: tuple[Call, ...]
    timeout_s: float
    wait_s: float

    def of(self, kind: str) -> list[Call]:
        return [call for call in self.calls if call.kind == kind]

    @property
    def correct_lost(self) -> int:
        return sum(call.score != 1.0 for call in self.of("correct"))

    @property
    def bound_s(self) -> float:
        return self.wait_s + self.timeout_s

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {"correct_lost": self.correct_lost, "bound_s": self.bound_s}
        for kind in ("hostile", "correct"):
            seconds = [call.seconds for call in self.of(kind)]
            out[f"{kind}_calls"] = len(seconds)
            out[f"{kind}_median_s"] = statistics.median(seconds) if seconds else 0.0
            out[f"{kind}_max_s"] = max(seconds, default=0.0)
        out["hostile_cut_at_deadline"] = sum(call.grader == "deadline" for call in self.of("hostile"))
        return out


def run_load(
    hostile: int,
    correct: int,
    timeout_s: float,
    wait_s: float,
    grade: Optional[Callable[..., dict]] = None,
) -> LoadResult:
    """Submit ``hostile`` hostile answers, then ``correct`` correct symbolic ones, all at once."""
    if grade is None:
        from edge_verl.reward import compute_score as grade
    jobs = [("hostile", boxed(HOSTILE_ANSWERS[i % len(HOSTILE_ANSWERS)]), "1") for i in range(hostile)]
    jobs += [("correct", boxed(CORRECT_SYMBOLIC[i % len(CORRECT_SYMBOLIC)][0]), CORRECT_SYMBOLIC[i % len(CORRECT_SYMBOLIC)][1]) for i in range(correct)]
    barrier = threading.Barrier(len(jobs))
    order = threading.Lock()
    turn = [0]

    def one(index_job):
        index, (kind, response, gold) = index_job
        barrier.wait()
        while True:  # enter compute_score in submission order: hostile answers are first in line
            with order:
                if turn[0] == index:
                    turn[0] += 1
                    break
            time.sleep(0.0005)
        started = time.monotonic()
        result = grade("load", response, gold, timeout_s=timeout_s, wait_s=wait_s)
        return Call(kind, result["score"], result["grader"], time.monotonic() - started)

    with ThreadPoolExecutor(max_workers=len(jobs)) as executor:
        calls = tuple(executor.map(one, enumerate(jobs)))
    return LoadResult(calls, timeout_s, wait_s)


@dataclass(frozen=True)
class LabelledCase:
    response: str  # a whole response, or ``\\boxed{answer}`` for cases that give the extracted answer
    gold: str
    expected: bool
    source: str = ""


def read_labelled_cases(path) -> list[LabelledCase]:
    """``{"pred", "gold", "expected", "full_response"?, "source"?}`` lines; an extracted answer is boxed."""
    import json

    cases = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                response = row["pred"] if row.get("full_response") else boxed_answer_only(row["pred"])
                cases.append(LabelledCase(response, row["gold"], bool(row["expected"]), row.get("source", "")))
    return cases


def boxed_answer_only(answer: str) -> str:
    return f"\\boxed{{{answer}}}"


def math_verify_direct(response: str, gold: str) -> bool:
    """math-verify as its README shows it, the gold wrapped in ``$...$`` (main thread only: its own timeouts
    use signals)."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse("$" + gold + "$"), parse(response)))
    except Exception:  # a grader that raises has not said "correct"
        return False


def agreement(cases: list[LabelledCase], grade: Callable[[str, str], bool]) -> tuple[int, list[LabelledCase]]:
    """(cases graded as labelled, the cases graded otherwise)."""
    wrong = [case for case in cases if grade(case.response, case.gold) != case.expected]
    return len(cases) - len(wrong), wrong
