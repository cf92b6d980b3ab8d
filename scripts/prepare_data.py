"""Write the papers' training and evaluation sets as verl parquet (deterministic bytes).

    .venv/bin/python scripts/prepare_data.py --out data
writes train_{hard_1k,random_1k}.parquet, the same marked for GEC as train_*_gec.parquet, the SFT baseline
data sft_{hard_1k,random_1k}.parquet, the six evaluation sets as eval_*.parquet and data/MANIFEST.json
(rows, sha256 and source of every file): every file a recipe reads. All of them come from sets shipped with
edge_verl, so the default run needs no network. Another Random-1K draw needs an explicit source:
--random-source (DeepScaleR-Preview through the `datasets` library: hub id or local copy) and/or
--random-pool files, with --seed and --size. Exit status 1, with the reason on stderr, when a set it was
asked for (by default: all of them) is not written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edge_verl.data import DEEPSCALER_HUB_ID, EVAL_SETS, RANDOM_1K_SEED, RANDOM_1K_SIZE, TRAIN_SETS, RandomSource, prepare


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("data"), help="output folder (default: data); MANIFEST.json there is updated")
    parser.add_argument("--train-sets", nargs="*", default=list(TRAIN_SETS), choices=TRAIN_SETS,
                        help="training sets to write (default: all)")
    parser.add_argument("--eval-sets", nargs="*", default=list(EVAL_SETS), choices=EVAL_SETS,
                        help="evaluation sets to write (default: all)")
    parser.add_argument("--seed", type=int, default=RANDOM_1K_SEED,
                        help=f"seed of the Random-1K draw (default {RANDOM_1K_SEED}; another needs --random-source or --random-pool)")
    parser.add_argument("--size", type=int, default=RANDOM_1K_SIZE,
                        help=f"problems in the Random-1K draw (default {RANDOM_1K_SIZE}; another needs --random-source or --random-pool)")
    parser.add_argument("--random-source", default=None,
                        help=f"re-draw Random-1K from DeepScaleR-Preview through `datasets`: a hub id ({DEEPSCALER_HUB_ID}) "
                             "or a local folder/file (default: none, the draw shipped with edge_verl)")
    parser.add_argument("--random-pool", nargs="*", type=Path, default=[],
                        help="re-draw Random-1K from these JSON/JSONL/parquet problem pools, together (with --random-source: "
                             "only when that cannot be loaded)")
    args = parser.parse_args()
    source = RandomSource(hub=args.random_source or None, pools=tuple(args.random_pool))
    prepared = prepare(args.out, train_sets=args.train_sets, eval_sets=args.eval_sets, seed=args.seed, size=args.size, random_source=source)
    for name, entry in prepared.files.items():
        print(f"{args.out / name}: {entry['rows']} rows ({entry['source']})")
    for name, reason in prepared.failed.items():
        print(f"NOT WRITTEN train_{name}: {reason}", file=sys.stderr)
    return 1 if prepared.failed else 0


if __name__ == "__main__":
    sys.exit(main())
