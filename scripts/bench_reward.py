"""Benchmark: edge_verl's reward vs verl 0.9.1's ``math_verify`` scorer vs math-verify called directly.

Labelled inputs come from real text shipped with edge_verl (DeepScaleR-Hard-1K): reference solutions (which end in \\boxed{})
paired with their own answer (label 1) and with another problem's different answer (label 0). Each grader
sees the same full responses. Prints agreement, throughput with 2 caller threads over 2 grading workers
(math-verify direct: 1 thread, its signal timeouts need the main thread), latency p50/p99/max, first-call
latency, worker RSS, and the latency of a few hostile inputs (power towers) that hang math-verify.

``--load``: N hostile answers (power towers, huge factorials) and M correct symbolic ones submitted at once
from N+M threads, hostile ones first in line, to edge_verl's reward and to verl's math_verify scorer:
correct answers lost and the slowest call of each kind, against edge_verl's documented bound.
``--public``: agreement with held-out labelled cases from other public graders' unit tests
(tests/reward/data/public_grader_cases.jsonl), edge_verl (strict, lenient) vs math-verify direct.

    .venv/bin/python scripts/bench_reward.py --pairs 400
    .venv/bin/python scripts/bench_reward.py --load --hostile 8 --correct 18
``--forms``: per-category agreement on the hand-made answer-form cases (tests/reward/form_cases.py).
``--math-verify-suite DIR``: per-category agreement on math-verify's own public test suite (the ``tests/``
folder of its PyPI sdist: ``pip download --no-deps --no-binary :all: math-verify==0.9.0``), every
``(gold, pred, expected)`` literal of its ``parametrize`` tables read with ``ast.literal_eval`` (a case with
a non-literal, e.g. an f-string, is counted as skipped); a case passing a non-default option
(``strict=False``, ``allow_set_relation_comp``, ``precision``) is reported apart, its label being the option's.
Both: edge_verl (lenient: a bare answer is graded as written) vs math-verify called directly, same inputs.

    .venv/bin/python scripts/bench_reward.py --public
    .venv/bin/python scripts/bench_reward.py --forms
    .venv/bin/python scripts/bench_reward.py --math-verify-suite /tmp/mv/math_verify-0.9.0/tests
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

FIRST_CALL = ("so \\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}")
HOSTILE = ["\\boxed{9^{9^{9^{9^{9^{9}}}}}}", "\\boxed{(10^{10})!!}", "\\boxed{2^{2^{2^{100}}}}"]


def labelled_pairs(count: int, seed: int) -> list[tuple[str, str, int]]:
    from edge_verl.data import read_records, shipped_file
    from edge_verl.reward.normalize import normalise_answer

    rows = read_records(shipped_file("train", "hard_1k"))
    rows = [row for row in rows if row.get("solution") and "\\boxed" in row["solution"] and row.get("answer")]
    rng = random.Random(seed)
    rng.shuffle(rows)
    pairs = [(row["solution"], str(row["answer"]), 1) for row in rows[:count]]
    for row in rows[count : 2 * count]:
        other = rng.choice(rows)
        while normalise_answer(other["answer"]) == normalise_answer(row["answer"]):
            other = rng.choice(rows)
        pairs.append((row["solution"], str(other["answer"]), 0))
    return pairs


def graders(timeout_s: float):
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing

    from math_verify import parse, verify
    from verl.utils.reward_score import math_verify as verl_math_verify

    from edge_verl.reward import compute_score

    verl_math_verify._pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))

    def ours(response, gold):
        return compute_score("bench", response, gold, timeout_s=timeout_s)["score"]

    def verl_scorer(response, gold):
        return verl_math_verify.compute_score(response, gold, timeout=timeout_s)

    def direct(response, gold):
        return float(verify(parse("$" + gold + "$"), parse(response)))

    return {"edge_verl": (ours, 2), "verl math_verify": (verl_scorer, 2), "math-verify direct": (direct, 1)}


def worker_rss_mb(name: str) -> str:
    children = psutil.Process().children(recursive=True)
    if name == "edge_verl":
        procs = [p for p in children if "edge_verl.reward.worker" in " ".join(p.cmdline())]
    elif name == "verl math_verify":
        procs = [p for p in children if "multiprocessing" in " ".join(p.cmdline()) and "resource_tracker" not in " ".join(p.cmdline())]
    else:
        return "in-process"
    if not procs:
        return "-"
    return "/".join(f"{p.memory_info().rss / 2**20:.0f}" for p in procs)


def run(name: str, grade, threads: int, pairs, hostile: bool, timeout_s: float) -> dict:
    started = time.perf_counter()
    grade(*FIRST_CALL)  # cold: needs the symbolic grader (a text-decidable pair would not start it)
    first = time.perf_counter() - started
    latencies, scores = [], []

    def one(pair):
        t0 = time.perf_counter()
        score = grade(pair[0], pair[1])
        latencies.append(time.perf_counter() - t0)
        return score

    t0 = time.perf_counter()
    if threads == 1:  # in the main thread: math-verify's own signal timeouts refuse any other
        scores = [one(pair) for pair in pairs]
    else:
        with ThreadPoolExecutor(max_workers=threads) as executor:
            scores = list(executor.map(one, pairs))
    wall = time.perf_counter() - t0
    labels = [label for _, _, label in pairs]
    agree = [float(score == label) for score, label in zip(scores, labels)]
    positives = [a for a, label in zip(agree, labels) if label == 1]
    negatives = [a for a, label in zip(agree, labels) if label == 0]
    result = {
        "agreement": statistics.mean(agree),
        "agreement_pos": statistics.mean(positives),
        "agreement_neg": statistics.mean(negatives),
        "throughput": len(pairs) / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * sorted(latencies)[int(0.99 * (len(latencies) - 1))],
        "max_ms": 1000 * max(latencies),
        "first_call_s": first,
        "worker_rss_mb": worker_rss_mb(name),
        "hostile_max_s": None,
    }
    if hostile:
        worst = 0.0
        for response in HOSTILE:
            t0 = time.perf_counter()
            grade(response, "1")
            worst = max(worst, time.perf_counter() - t0)
        result["hostile_max_s"] = worst
    return result


def load(hostile: int, correct: int, timeout_s: float, wait_s: float) -> None:
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing

    from verl.utils.reward_score import math_verify as verl_math_verify

    from edge_verl.reward.checks import run_load
    from edge_verl.reward.pool import get_pool

    get_pool().wait_ready()
    verl_pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
    verl_math_verify._pool = verl_pool

    def verl_grade(data_source, response, gold, timeout_s, wait_s):
        score = verl_math_verify.compute_score(response, gold, timeout=timeout_s)
        return {"score": float(score), "grader": "-"}

    verl_grade("load", "\\boxed{1}", "1", timeout_s, wait_s)  # warm its workers (first call ~9 s)
    results = {"edge_verl": run_load(hostile, correct, timeout_s, wait_s), "verl math_verify": run_load(hostile, correct, timeout_s, wait_s, verl_grade)}
    for process in list(getattr(verl_pool, "_processes", {}).values()):  # its timed-out workers never stop
        process.kill()
    print(f"{hostile} hostile + {correct} correct symbolic answers at once from {hostile + correct} threads; deadline {timeout_s:.0f} s\n")
    print("| grader | correct lost | correct median s | correct max s | hostile max s | bound s |")
    print("|---|---|---|---|---|---|")
    for name, result in results.items():
        summary = result.summary()
        bound = f"{result.bound_s:.0f} (wait {wait_s:.0f} + deadline {timeout_s:.0f})" if name == "edge_verl" else "none"
        print(
            f"| {name} | {summary['correct_lost']:.0f} of {correct} | {summary['correct_median_s']:.2f} | {summary['correct_max_s']:.2f} | "
            f"{summary['hostile_max_s']:.2f} | {bound} |"
        )
    counters = get_pool().counters
    print(f"\nedge_verl pool: peak {counters.peak_processes} processes, {counters.spares} spares started, {counters.killed} killed at the deadline")


def public_cases() -> None:
    import logging
    from pathlib import Path

    from edge_verl.reward import compute_score
    from edge_verl.reward.checks import agreement, math_verify_direct, read_labelled_cases

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    cases = read_labelled_cases(Path(__file__).resolve().parents[1] / "tests" / "reward" / "data" / "public_grader_cases.jsonl")
    graders = {
        "edge_verl strict": lambda response, gold: compute_score("public", response, gold)["score"] == 1.0,
        "edge_verl lenient": lambda response, gold: compute_score("public", response, gold, format_policy="lenient")["score"] == 1.0,
        "math-verify direct": math_verify_direct,
    }
    print(f"{len(cases)} held-out labelled cases ({sum(c.expected for c in cases)} correct, {sum(not c.expected for c in cases)} wrong)\n")
    print("| grader | agree | share |")
    print("|---|---|---|")
    for name, grade in graders.items():
        right, _ = agreement(cases, grade)
        print(f"| {name} | {right} | {right / len(cases):.3f} |")


def math_verify_suite_cases(tests_dir: str) -> tuple[list[tuple[str, str, str, bool]], int]:
    """(category, response, gold, expected) of every literal parametrize case of math-verify's tests, and
    how many were skipped. The category is ``file::test`` (``+options`` when the case sets an option)."""
    import ast
    from pathlib import Path

    cases, skipped = [], 0
    for path in sorted(Path(tests_dir).glob("test_*.py")):
        for function in ast.parse(path.read_text(encoding="utf-8")).body:
            for decorator in getattr(function, "decorator_list", []):
                if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "parametrize"):
                    continue
                names = [name.strip() for name in ast.literal_eval(decorator.args[0]).split(",")]
                if not {"gold", "pred"} <= set(names):
                    continue
                for element in decorator.args[1].elts:
                    try:
                        row = dict(zip(names, ast.literal_eval(element)))
                    except ValueError:
                        skipped += 1
                        continue
                    options = sorted(name for name in row if name not in ("gold", "pred", "expected", "result"))
                    category = f"{path.stem}::{function.name}" + ("+" + ",".join(options) if options else "")
                    cases.append((category, row["pred"], row["gold"], bool(row.get("expected", row.get("result")))))
    return cases, skipped


def category_agreement(cases, graders) -> None:
    """Print, per category and in total, how many of ``cases`` (category, response, gold, expected) each grader
    in ``graders`` (name -> grade(response, gold) -> bool) gets as labelled."""
    import collections

    counts: dict = collections.defaultdict(lambda: collections.Counter())
    for category, response, gold, expected in cases:
        counts[category]["cases"] += 1
        for name, grade in graders.items():
            counts[category][name] += grade(response, gold) == expected
    print("| category | cases | " + " | ".join(graders) + " |")
    print("|---|---|" + "---|" * len(graders))
    for category, count in sorted(counts.items()):
        print(f"| {category} | {count['cases']} | " + " | ".join(str(count[name]) for name in graders) + " |")
    total = sum((count for count in counts.values()), collections.Counter())
    shares = " | ".join(f"{total[name]} ({total[name] / total['cases']:.3f})" for name in graders)
    print(f"| total | {total['cases']} | {shares} |")


def suite_graders() -> dict:
    import logging

    from edge_verl.reward import compute_score
    from edge_verl.reward.checks import math_verify_direct

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return {
        "edge_verl": lambda response, gold: compute_score("suite", response, gold, format_policy="lenient")["score"] == 1.0,
        "math-verify direct": math_verify_direct,
    }


def form_cases() -> list[tuple[str, str, str, bool]]:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.reward.form_cases import CATEGORIES

    return [(category, response, gold, expected) for category, rows in CATEGORIES.items() for response, gold, expected in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400, help="positive pairs (as many negatives)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=5.0, help="per-call deadline for the graders that have one")
    parser.add_argument("--load", action="store_true", help="the load test instead of the agreement/throughput table")
    parser.add_argument("--hostile", type=int, default=8, help="--load: hostile answers")
    parser.add_argument("--correct", type=int, default=18, help="--load: correct symbolic answers")
    parser.add_argument("--wait", type=float, default=120.0, help="--load: edge_verl's bound on waiting for a worker")
    parser.add_argument("--public", action="store_true", help="agreement with held-out public grader test cases")
    parser.add_argument("--forms", action="store_true", help="per-category agreement on tests/reward/form_cases.py")
    parser.add_argument("--math-verify-suite", metavar="DIR", help="per-category agreement on math-verify's tests/ folder")
    args = parser.parse_args()
    if args.forms:
        return category_agreement(form_cases(), suite_graders())
    if args.math_verify_suite:
        cases, skipped = math_verify_suite_cases(args.math_verify_suite)
        print(f"{len(cases)} literal cases from {args.math_verify_suite} ({skipped} non-literal skipped)\n")
        return category_agreement(cases, suite_graders())
    if args.load:
        return load(args.hostile, args.correct, args.timeout, args.wait)
    if args.public:
        return public_cases()
    pairs = labelled_pairs(args.pairs, args.seed)
    results = {}
    for name, (grade, threads) in graders(args.timeout).items():
        results[name] = run(name, grade, threads, pairs, hostile=name != "math-verify direct", timeout_s=args.timeout)
    ours = results["edge_verl"]["throughput"]
    print(f"{len(pairs)} labelled responses ({args.pairs} positive), deadline {args.timeout:.0f} s\n")
    print("| grader | agree | agree (label 1) | agree (label 0) | calls/s | x verl | p50 ms | p99 ms | max ms | first call s | worker RSS MB | hostile max s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    verl_tp = results["verl math_verify"]["throughput"]
    for name, r in results.items():
        hostile = "hangs (not run)" if r["hostile_max_s"] is None else f"{r['hostile_max_s']:.1f}"
        print(
            f"| {name} | {r['agreement']:.4f} | {r['agreement_pos']:.4f} | {r['agreement_neg']:.4f} | {r['throughput']:.0f} | "
            f"{r['throughput'] / verl_tp:.2f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.0f} | {r['first_call_s']:.2f} | "
            f"{r['worker_rss_mb']} | {hostile} |"
        )
    print(f"\nedge_verl throughput / verl math_verify: {ours / verl_tp:.2f}x")


if __name__ == "__main__":
    main()
