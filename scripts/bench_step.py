"""Step-level benchmark: the same seeded CPU training run (the demo's: verl's real main_ppo, tiny model) for
GRPO, edge_eda (detached and gradient-through-entropy forms), GEPO and EDGE (EDA + GEC), phase by phase.

Each phase's time (verl's ``timing_s/<phase>``) is divided by the step's response tokens
(``response_length/mean`` x responses), the median is taken over the steps after ``--skip`` warm-up
steps, and every method is printed as milliseconds per 1000 response tokens and as a ratio to GRPO. EDGE's
GEC corrections happen inside the rollout: ``gec/correction_time_share`` (the share of the loop's
generation time spent on corrections) is printed below the table.

    .venv/bin/python scripts/bench_step.py --steps 12 --out runs/bench_step
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, without install

from edge_verl_lab.demo.run import DemoConfig, run_demo  # noqa: E402

# label -> (demo algorithm, EDA form)
METHODS = {
    "grpo": ("grpo", "gradient"), "edge_eda (detached)": ("edge_eda", "detached"), "edge_eda (gradient)": ("edge_eda", "gradient"),
    "gepo": ("gepo", "gradient"), "edge (EDA gradient + GEC)": ("edge", "gradient"),
}
PHASES = ("gen", "old_log_prob", "adv", "update_actor", "update_weights", "step")


def per_token_ms(rows: list[dict], responses: int, skip: int) -> dict[str, float]:
    """Median over the steps after ``skip`` of each phase's milliseconds per 1000 response tokens."""
    result = {}
    for phase in PHASES:
        values = [
            1e6 * row[f"timing_s/{phase}"] / (row["response_length/mean"] * responses)
            for row in rows[skip:]
            if f"timing_s/{phase}" in row and row.get("response_length/mean")
        ]
        result[phase] = statistics.median(values) if values else float("nan")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--skip", type=int, default=2, help="warm-up steps left out of the medians")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_step"))
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args()
    if args.steps <= args.skip:
        parser.error("--steps must exceed --skip")

    table, extras = {}, {}
    for label in args.methods:
        algorithm, form = METHODS[label]
        config = DemoConfig(
            algorithm=algorithm, eda_form=form, steps=args.steps, seed=args.seed,
            out=args.out / label.split()[0].replace("(", "") / form,
        )
        result = run_demo(config, stream=sys.stderr)
        if result["returncode"] != 0:
            print(f"{label}: verl failed (exit {result['returncode']}), see {config.out / 'verl.log'}", file=sys.stderr)
            return result["returncode"]
        rows = result["rows"]
        responses = config.prompts_per_step * config.responses_per_prompt
        table[label] = per_token_ms(rows, responses, args.skip)
        shares = [row["edge_verl/gec/correction_time_share"] for row in rows[args.skip:] if "edge_verl/gec/correction_time_share" in row]
        if shares:
            extras[label] = statistics.median(shares)
        (args.out / "bench_step.json").write_text(json.dumps({"per_1k_tokens_ms": table, "gec_correction_time_share": extras}, indent=2))

    labels = list(table)
    print(f"\nms per 1000 response tokens (median of steps {args.skip + 1}-{args.steps}, seed {args.seed}); ratio to grpo")
    print("| phase | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    base = table.get("grpo")
    for phase in PHASES:
        cells = []
        for label in labels:
            value = table[label][phase]
            ratio = f" ({value / base[phase]:.2f}x)" if base and label != "grpo" and base[phase] > 0 else ""
            cells.append(f"{value:.1f}{ratio}")
        print(f"| {phase} | " + " | ".join(cells) + " |")
    for label, share in extras.items():
        print(f"{label}: GEC corrections take {100 * share:.0f}% of the loop's generation time (gec/correction_time_share)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
