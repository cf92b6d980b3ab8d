"""Compare runs: several runs' metrics.jsonl / eval.json -> one plot and one table (mean ± std over seeds).

    .venv/bin/python scripts/compare_runs.py runs/edge_seed1 runs/edge_seed2 runs/grpo_seed1 runs/grpo_seed2 \
        --metrics critic/score/mean actor/entropy --out runs/compare

Runs are grouped by their folder name without a trailing "_seed<N>"; curves show the group mean with a
±1 std band, the table the mean ± std over seeds of each metric's last-``--window`` steps mean and of
every eval.json entry (pass@k in %).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

SEED_SUFFIX = re.compile(r"_seed\d+$")


def group_name(run: Path) -> str:
    return SEED_SUFFIX.sub("", run.name)


def load_metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {spread:.4f} (n={len(values)})"


def compare(runs: list[Path], metrics: list[str], window: int) -> tuple[dict, dict]:
    """Returns (table: group -> column -> "mean ± std", curves: metric -> group -> [(step, [values per run])])."""
    groups: dict[str, list[Path]] = {}
    for run in runs:
        groups.setdefault(group_name(run), []).append(run)
    table: dict[str, dict[str, str]] = {}
    curves: dict[str, dict[str, dict[int, list[float]]]] = {metric: {} for metric in metrics}
    for group, members in groups.items():
        row: dict[str, str] = {}
        for metric in metrics:
            finals = []
            for run in members:
                values = [(r["step"], r[metric]) for r in load_metrics(run) if metric in r]
                for step, value in values:
                    curves[metric].setdefault(group, {}).setdefault(step, []).append(value)
                if values:
                    tail = [value for _, value in values[-window:]]
                    finals.append(sum(tail) / len(tail))
            row[metric] = mean_std(finals)
        evals: dict[str, list[float]] = {}
        for run in members:
            path = run / "eval.json"
            if path.exists():
                for benchmark, entry in json.loads(path.read_text()).items():
                    for key, value in entry.items():
                        if key.startswith("pass@"):
                            evals.setdefault(f"{benchmark} {key} (%)", []).append(100 * value)
        row.update({column: mean_std(values) for column, values in evals.items()})
        table[group] = row
    return table, curves


def markdown(table: dict) -> str:
    columns = list(dict.fromkeys(column for row in table.values() for column in row))
    lines = ["| run | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for group, row in table.items():
        lines.append(f"| {group} | " + " | ".join(row.get(column, "-") for column in columns) + " |")
    return "\n".join(lines)


def plot(curves: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, max(1, len(curves)), figsize=(5 * max(1, len(curves)), 4), squeeze=False)
    for axis, (metric, groups) in zip(axes[0], curves.items()):
        for group, by_step in groups.items():
            steps = sorted(by_step)
            means = [statistics.mean(by_step[s]) for s in steps]
            spreads = [statistics.stdev(by_step[s]) if len(by_step[s]) > 1 else 0.0 for s in steps]
            axis.plot(steps, means, label=group)
            axis.fill_between(steps, [m - d for m, d in zip(means, spreads)], [m + d for m, d in zip(means, spreads)], alpha=0.2)
        axis.set_title(metric)
        axis.set_xlabel("step")
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--metrics", nargs="+", default=["critic/score/mean", "response_length/mean", "actor/entropy"])
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("runs/compare"))
    args = parser.parse_args()
    table, curves = compare(args.runs, args.metrics, args.window)
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(table)
    (args.out / "compare.md").write_text(text + "\n")
    (args.out / "compare.json").write_text(json.dumps(table, indent=2))
    print(text)
    print(f"\nplot: {plot(curves, args.out / 'compare.png')}")


if __name__ == "__main__":
    main()
