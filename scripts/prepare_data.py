"""Write the papers' training and evaluation sets as verl parquet (deterministic bytes).

    .venv/bin/python scripts/prepare_data.py --out data
writes train_{hard_1k,random_1k}.parquet, the same marked for GEC as train_*_gec.parquet, and the six
evaluation sets as eval_*.parquet.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edge_verl.data import EVAL_SETS, eval_rows, training_rows, write_parquet

DEFAULT_SOURCE = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="folder with train/ and eval/")
    parser.add_argument("--out", type=Path, default=Path("data"))
    parser.add_argument("--seed", type=int, default=42, help="seed of the Random-1K stand-in")
    args = parser.parse_args()
    for name in ("hard_1k", "random_1k"):
        for gec, suffix in ((False, ""), (True, "_gec")):  # *_gec: rows marked for the edge_gec agent loop
            rows = training_rows(args.source, name, gec=gec, seed=args.seed)
            print(f"{write_parquet(rows, args.out / f'train_{name}{suffix}.parquet')}: {len(rows)} rows")
    for name in EVAL_SETS:
        rows = eval_rows(args.source, name)
        print(f"{write_parquet(rows, args.out / f'eval_{name}.parquet')}: {len(rows)} rows")


if __name__ == "__main__":
    main()
