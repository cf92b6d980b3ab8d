"""Compare runs: several runs' metrics / eval.json -> one plot and one table (mean ± std over seeds).

    .venv/bin/python scripts/compare_runs.py runs/edge_seed1 runs/edge_seed2 runs/grpo_seed1 runs/grpo_seed2 \
        --metrics critic/score/mean actor/entropy --out runs/compare

A run is a folder with verl's file-logger output (``metrics.jsonl`` or ``metrics/*.jsonl``, as written by
``VERL_FILE_LOGGER_PATH``; ``edge-verl reproduce`` writes them) and/or an ``eval.json`` (``eval/eval.json``),
or one metrics file. Runs are grouped by their name without a trailing "_seed<N>"; curves show the group
mean with a ±1 std band, the table the mean ± std over seeds of each metric's last-``--window`` steps mean
and of every eval.json entry (pass@k in %). Exits with an error when no run has any of the metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edge_verl_lab.reporting import compare, markdown, plot


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--metrics", nargs="+", default=["critic/score/mean", "response_length/mean", "actor/entropy"])
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("runs/compare"))
    args = parser.parse_args()
    missing = [str(run) for run in args.runs if not run.exists()]
    if missing:
        parser.error(f"no such run folder: {missing}")
    try:
        table, curves = compare(args.runs, args.metrics, args.window)
    except ValueError as error:
        print(f"compare_runs: {error}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(table)
    (args.out / "compare.md").write_text(text + "\n")
    (args.out / "compare.json").write_text(json.dumps(table, indent=2))
    print(text)
    print(f"\nplot: {plot(curves, args.out / 'compare.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
