"""Evaluate a checkpoint with the papers' protocol and print their table (markdown; JSON in --out).

    .venv/bin/python scripts/evaluate.py --model Qwen/Qwen2.5-Math-7B --out runs/eval        # 1 sample, T=0.1
    .venv/bin/python scripts/evaluate.py --model ckpt/ --samples 8 --temperature 0.6 --k 1 4 8  # pass@k

Benchmarks: the EDGE-GRPO suite (AIME24, AMC, MATH-500, Minerva, OlympiadBench; "Avg" = the problem-
weighted mean over their 1560 problems) and AIME25, read from ../shared/data/eval.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edge_verl.data import EVAL_SETS, PAPER_EVAL
from edge_verl.evaluation import evaluate, load_benchmarks, markdown_table, write_report

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="HF model folder (or hub name where a hub is reachable)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with eval/")
    parser.add_argument("--benchmarks", nargs="+", default=[*PAPER_EVAL, "aime25"], choices=sorted(EVAL_SETS))
    parser.add_argument("--extra", nargs="*", type=Path, default=[], help="extra JSONL benchmarks (problem, answer)")
    parser.add_argument("--limit", type=int, default=None, help="first N problems per benchmark (smoke tests)")
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--k", type=int, nargs="+", default=[1])
    parser.add_argument("--temperature", type=float, default=0.1)
    parser.add_argument("--max-new-tokens", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--average-over", nargs="+", default=list(PAPER_EVAL), help="benchmarks in the Avg row (paper: its five)")
    parser.add_argument("--out", type=Path, default=Path("runs/eval"))
    args = parser.parse_args()
    if max(args.k) > args.samples:
        parser.error(f"--k {max(args.k)} needs --samples >= {max(args.k)}")
    problems = load_benchmarks(args.data, args.benchmarks, args.limit, args.extra)
    records = evaluate(
        args.model, problems, samples=args.samples, temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed
    )
    table = write_report(records, args.out, args.k, args.average_over)
    print(markdown_table(table, args.k))
    print(f"\nrecords: {args.out / 'eval_records.jsonl'}  table: {args.out / 'eval.json'}")


if __name__ == "__main__":
    main()
