"""Start-up benchmark: the fixed cost of one verl run on CPU (the demo's and the study's pipeline), with and
without each start-up saving of the CPU backend, side by side in one invocation.

A run's fixed cost is its wall time less the time of its training steps (verl's ``timing_s/step``): Python
and imports in the driver, Ray's start, the TaskRunner, the actor worker and the agent loop (each a process
importing torch and verl, one after another on a run's critical path), data and model set-up, shutdown, and
the demo's own files. Variants, each against the one before it:

- ``as before``: Ray's dashboard on, every installed package importable (``EDGE_VERL_CPU_UNUSED=""``);
- ``no dashboard``: ``ray_init.include_dashboard=False`` (``cpu/overrides.py``, now in every CPU run);
- ``+ unused hidden``: also megatron-core, mbridge and vLLM hidden from the run's processes, which an FSDP run
  with the HF rollout never uses but verl imports in each (``overrides.UNUSED_ENV``; what the demo does now).

Runs are interleaved (variant by variant, ``--repeats`` rounds) so that a slow spell of the machine falls on
every variant; the table gives the median and range per variant. Run it on idle cores: another job on the
machine changes every number.

    .venv/bin/python scripts/bench_startup.py --out runs/bench_startup
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, without install

from edge_verl.integration.cpu.overrides import UNUSED_ENV  # noqa: E402
from edge_verl_lab.demo.run import DemoConfig, run_demo, trained_steps  # noqa: E402

# label -> (extra overrides, EDGE_VERL_CPU_UNUSED or None for the demo's own)
VARIANTS = {
    "as before": (("ray_kwargs.ray_init.include_dashboard=True",), ""),
    "no dashboard": ((), ""),
    "+ unused hidden": ((), None),
}


def fixed_seconds(result: dict) -> tuple[float, float]:
    """(the run's wall seconds less its steps' seconds, the steps' seconds)."""
    steps = sum(row["timing_s/step"] for row in trained_steps(result["rows"]))
    return result["seconds"] - steps, steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="rounds over the variants")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--task", default="copy")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_startup"))
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    found: dict[str, list[float]] = {label: [] for label in args.variants}
    steps: dict[str, list[float]] = {label: [] for label in args.variants}
    for round_index in range(args.repeats):
        for label in args.variants:
            extra, unused = VARIANTS[label]
            if unused is None:
                os.environ.pop(UNUSED_ENV, None)
            else:
                os.environ[UNUSED_ENV] = unused
            out = args.out / f"{label.replace(' ', '_').replace('+', 'and')}_{round_index}"
            config = DemoConfig(algorithm="grpo", steps=args.steps, task=args.task, out=out, save_freq=-1, extra_overrides=list(extra))
            result = run_demo(config, stream=sys.stderr)
            if result["returncode"] != 0:
                print(f"{label}: verl failed (exit {result['returncode']}), see {out / 'verl.log'}", file=sys.stderr)
                return result["returncode"]
            fixed, trained = fixed_seconds(result)
            found[label].append(fixed)
            steps[label].append(trained)
            (args.out / "bench_startup.json").write_text(json.dumps({"fixed_s": found, "steps_s": steps}, indent=2))
    base = statistics.median(found[args.variants[0]])
    print(f"\nFixed cost of a {args.steps}-step verl run on CPU (task {args.task}, GRPO; wall time less the steps'), "
          f"{args.repeats} interleaved rounds")
    print("| variant | fixed s (median) | range | × first | steps s (median) |")
    print("|---|---|---|---|---|")
    for label in args.variants:
        values = found[label]
        print(f"| {label} | {statistics.median(values):.1f} | {min(values):.1f}-{max(values):.1f} | "
              f"{statistics.median(values) / base:.2f} | {statistics.median(steps[label]):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
