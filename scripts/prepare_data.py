"""Write the papers' training and evaluation sets as verl parquet (deterministic bytes).

    .venv/bin/python scripts/prepare_data.py --out data
writes train_{hard_1k,random_1k}.parquet, the same marked for GEC as train_*_gec.parquet, the six
evaluation sets as eval_*.parquet and data/MANIFEST.json (rows, sha256 and source of every file).
Hard-1K and the evaluation sets ship with edge_verl; Random-1K is sampled from DeepScaleR-Preview through
the `datasets` library (--random-source: hub id or local copy), or from --random-pool files offline.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edge_verl.data import DEEPSCALER_HUB_ID, EVAL_SETS, TRAIN_SETS, RandomSource, prepare


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("data"))
    parser.add_argument("--train-sets", nargs="*", default=None, choices=TRAIN_SETS,
                        help="default: all; Random-1K then only where a source is reachable (a warning otherwise)")
    parser.add_argument("--eval-sets", nargs="*", default=list(EVAL_SETS), choices=EVAL_SETS)
    parser.add_argument("--seed", type=int, default=42, help="seed of the Random-1K draw")
    parser.add_argument("--size", type=int, default=1000, help="problems in the Random-1K draw")
    parser.add_argument("--random-source", default=DEEPSCALER_HUB_ID, help="hub id or local folder/file of DeepScaleR-Preview")
    parser.add_argument("--random-pool", nargs="*", type=Path, default=[], help="offline fallback: JSON/JSONL/parquet problem pools")
    args = parser.parse_args()
    source = RandomSource(hub=args.random_source or None, pools=tuple(args.random_pool))
    train_sets = TRAIN_SETS if args.train_sets is None else args.train_sets
    prepared = prepare(args.out, train_sets=train_sets, eval_sets=args.eval_sets, seed=args.seed, size=args.size, random_source=source)
    for name, entry in prepared.files.items():
        print(f"{args.out / name}: {entry['rows']} rows ({entry['source']})")
    for name, reason in prepared.failed.items():
        print(f"NOT WRITTEN train_{name}: {reason}", file=sys.stderr)
    # Asked for by name: it must exist. By default: everything this machine can build, the rest reported.
    return 1 if prepared.failed and args.train_sets is not None else 0


if __name__ == "__main__":
    sys.exit(main())
