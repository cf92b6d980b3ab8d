"""Reading runs back: verl's per-step metrics, evaluation tables, mean +- std over seeds, curve plots.

Pure Python (matplotlib only for the plot). verl's file logger (``trainer.logger=[...,file]``, path from
``VERL_FILE_LOGGER_PATH``) writes one ``{"step": N, "data": {...}}`` record per step; flat
``{"step": N, "<metric>": ...}`` records (older exports, the demo's metrics.jsonl) are read too. A resumed
run restarts verl's logger, so a run folder may hold several files (``metrics/*.jsonl``, one per
attempt): they are merged, the last record of a step winning.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Iterable, Optional, Sequence

SEED_SUFFIX = re.compile(r"_seed\d+$")


def _records(path: Path) -> list[dict]:
    records = []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:  # a run killed mid-write leaves a partial last line
            if number == len(lines):
                continue
            raise ValueError(f"{path}:{number}: not JSON ({error})") from error
        if "step" not in record:
            raise ValueError(f"{path}:{number}: a metrics record needs a 'step' key, got {sorted(record)[:5]}")
        data = record["data"] if isinstance(record.get("data"), dict) else {k: v for k, v in record.items() if k != "step"}
        records.append({"step": int(record["step"]), **data})
    return records


def metric_files(run: Path) -> list[Path]:
    """A run folder's metric files in attempt order (``metrics.jsonl``, then ``metrics/*.jsonl``), or the
    file itself."""
    run = Path(run)
    if run.is_file():
        return [run]
    files = [run / "metrics.jsonl"] if (run / "metrics.jsonl").exists() else []
    return files + sorted((run / "metrics").glob("*.jsonl")) if (run / "metrics").is_dir() else files


def load_metrics(run: Path) -> list[dict]:
    """One flat record per step, in step order, merged over the run's metric files."""
    by_step: dict[int, dict] = {}
    for path in metric_files(run):
        for record in _records(path):
            by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]


def mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    """(mean, sample std (0 for one value), n)."""
    if not values:
        raise ValueError("mean_std of no values")
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.mean(values), spread, len(values)


def format_mean_std(values: Sequence[float], digits: int = 4) -> str:
    if not values:
        return "-"
    mean, spread, count = mean_std(values)
    return f"{mean:.{digits}f} ± {spread:.{digits}f} (n={count})"


def group_name(run: Path) -> str:
    return SEED_SUFFIX.sub("", Path(run).name)


def metric_series(records: Sequence[dict], metric: str) -> list[tuple[int, float]]:
    """(step, value) of one metric in one run's records (as ``load_metrics`` returns them)."""
    return [(record["step"], float(record[metric])) for record in records if record.get(metric) is not None]


def curves_by_step(series_per_run: Iterable[Sequence[tuple[int, float]]]) -> dict[int, list[float]]:
    """step -> the metric's value in each run that logged it at that step."""
    by_step: dict[int, list[float]] = {}
    for series in series_per_run:
        for step, value in series:
            by_step.setdefault(step, []).append(value)
    return by_step


def compare(runs: list[Path], metrics: list[str], window: int) -> tuple[dict, dict]:
    """Returns (table: group -> column -> "mean ± std", curves: metric -> group -> {step: [values per run]}).

    Runs are grouped by folder name without ``_seed<N>``; a metric's per-run value is the mean of its last
    ``window`` logged steps; every ``eval.json`` entry (pass@k) becomes a column in %. Raises when no run
    has any of ``metrics`` and no run has an ``eval.json`` (a table of "-" says nothing).
    """
    loaded = {run: load_metrics(run) for run in runs}
    groups: dict[str, list[Path]] = {}
    for run in runs:
        groups.setdefault(group_name(run), []).append(run)
    table: dict[str, dict[str, str]] = {}
    curves: dict[str, dict[str, dict[int, list[float]]]] = {metric: {} for metric in metrics}
    found = False
    for group, members in groups.items():
        row: dict[str, str] = {}
        for metric in metrics:
            series = [metric_series(loaded[run], metric) for run in members]
            finals = [sum(value for _, value in s[-window:]) / len(s[-window:]) for s in series if s]
            if finals:
                curves[metric][group] = curves_by_step(series)
            found = found or bool(finals)
            row[metric] = format_mean_std(finals)
        evals: dict[str, list[float]] = {}
        for run in members:
            table_json = load_eval_table(run)
            for benchmark, entry in (table_json or {}).items():
                for key, value in entry.items():
                    if key.startswith("pass@"):
                        evals.setdefault(f"{benchmark} {key} (%)", []).append(100 * value)
        found = found or bool(evals)
        row.update({column: format_mean_std(values) for column, values in evals.items()})
        table[group] = row
    if not found:
        available = sorted({key for records in loaded.values() for record in records[:1] for key in record})
        raise ValueError(
            f"none of the runs has the metrics {metrics} or an eval.json; metric files found: "
            f"{[str(path) for run in runs for path in metric_files(run)] or 'none'}; keys in them: {available[:40]}"
        )
    return table, curves


def load_eval_table(run: Path) -> Optional[dict]:
    """``eval.json`` of a run folder (or its ``eval/`` subfolder), None when absent."""
    for path in (Path(run) / "eval.json", Path(run) / "eval" / "eval.json"):
        if path.exists():
            return json.loads(path.read_text())
    return None


def markdown(table: dict) -> str:
    columns = list(dict.fromkeys(column for row in table.values() for column in row))
    lines = ["| run | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for group, row in table.items():
        lines.append(f"| {group} | " + " | ".join(row.get(column, "-") for column in columns) + " |")
    return "\n".join(lines)


def plot(curves: dict, path: Path, titles: Optional[dict[str, str]] = None) -> Path:
    """One panel per metric, one line per group: the mean over runs with a ±1 std band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, max(1, len(curves)), figsize=(5 * max(1, len(curves)), 4), squeeze=False)
    for axis, (metric, groups) in zip(axes[0], curves.items()):
        for group, by_step in groups.items():
            steps = sorted(by_step)
            stats = [mean_std(by_step[s]) for s in steps]
            means = [mean for mean, _, _ in stats]
            axis.plot(steps, means, label=group)
            axis.fill_between(steps, [m - d for m, d, _ in stats], [m + d for m, d, _ in stats], alpha=0.2)
        axis.set_title((titles or {}).get(metric, metric))
        axis.set_xlabel("step")
        if groups:
            axis.legend(fontsize=7)
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return Path(path)
