"""Evaluate a model or a trained run with the papers' protocol: ``python -m edge_verl_lab.evaluation --help``.

    .venv/bin/python scripts/evaluate.py --model checkpoints/edge_verl/<run> --out runs/eval
"""

import sys

from edge_verl_lab.evaluation import main

if __name__ == "__main__":
    sys.exit(main())
