r"""Re-draw the shipped Random-1K stand-in (edge_verl/data/sets/train/deepscaler_random_1k.jsonl) from pool files.

    .venv/bin/python scripts/draw_random_1k.py deepscaler_aime_975.json deepscaler_math_7474.json \
        --out edge_verl/data/sets/train/deepscaler_random_1k.jsonl
writes the same bytes as the shipped file when given the pools its README names, in that order (a problem in
several pools is attributed to the first). The draw is ``edge_verl.data.sample_unique``: duplicate problem
texts removed, then ``size`` problems drawn without replacement (seeded) from them sorted by text. Each line
holds problem, answer, solution ("" where the pool has none) and pool (the file name it was drawn from).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edge_verl.data import RANDOM_1K_SEED, RANDOM_1K_SIZE, RandomSource, random_1k_records, write_jsonl


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pools", nargs="+", type=Path, metavar="POOL", help="problem pools: JSON list, JSONL or verl parquet with problem/answer[/solution]")
    parser.add_argument("--out", type=Path, required=True, help="JSONL file to write (replaced if it exists)")
    parser.add_argument("--seed", type=int, default=RANDOM_1K_SEED, help=f"seed of the draw (default {RANDOM_1K_SEED}, the shipped one)")
    parser.add_argument("--size", type=int, default=RANDOM_1K_SIZE, help=f"problems to draw (default {RANDOM_1K_SIZE}, the shipped one)")
    args = parser.parse_args()
    records, provenance = random_1k_records(RandomSource(pools=tuple(args.pools)), size=args.size, seed=args.seed)
    write_jsonl(records, args.out)
    print(f"{args.out}: {len(records)} problems from {provenance}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
