"""Reading runs back: verl's per-step metrics (training curves, per-step validation), evaluation tables,
mean +- std over seeds, paired differences with a Student-t interval, curve and sensitivity plots.

The t distribution is scipy's; matplotlib draws the plots. verl's file logger (``trainer.logger=[...,file]``,
path from ``VERL_FILE_LOGGER_PATH``) writes one ``{"step": N, "data": {...}}`` record per step; flat
``{"step": N, "<metric>": ...}`` records (exports, the demo's metrics.jsonl) are read too. A resumed
run restarts verl's logger, so a run folder may hold several files (``metrics/*.jsonl``, one per
attempt): they are merged, the last record of a step winning."""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from scipy import stats

SEED_SUFFIX = re.compile(r"_seed\d+$")
# verl's validation during training (trainer.test_freq): val-core/<data source>/<core variable>/mean@<n>, the
# core variable being "acc" when the reward returns one (edge_verl.reward does), else "reward".
VALIDATION_KEY = re.compile(r"^val-core/(?P<source>.+)/(?P<variable>[^/]+)/mean@(?P<n>\d+)$")


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


@dataclass(frozen=True)
class PairedDifference:
    """``values - baseline`` over the seeds both have: each seed's difference, their mean, sample std and
    count, and the two-sided ``confidence`` interval of the mean (Student t, df = n - 1), None for n < 2."""

    per_seed: dict[str, float]
    mean: float
    std: Optional[float]
    n: int
    confidence: float
    interval: Optional[tuple[float, float]]

    def as_dict(self) -> dict:
        return {"per_seed": self.per_seed, "mean": self.mean, "std": self.std, "n": self.n, "confidence": self.confidence,
                "interval": list(self.interval) if self.interval is not None else None}


def paired_difference(
    values: Mapping[str, float], baseline: Mapping[str, float], confidence: float = 0.95
) -> Optional[PairedDifference]:
    """The paired difference ``values[s] - baseline[s]`` over the seeds s in both (seed -> value each);
    None when they share no seed. Interval: mean ± t((1 + confidence) / 2, n - 1) * std / sqrt(n), the interval
    of ``scipy.stats.ttest_rel``, written out because scipy's numpy sums differ from these in the last bits (in
    about half of random cases) and the published reports must stay byte-identical (tests/test_paired_difference.py
    holds the two to 1e-12)."""
    seeds = [seed for seed in values if seed in baseline]
    if not seeds:
        return None
    per_seed = {seed: float(values[seed]) - float(baseline[seed]) for seed in seeds}
    differences = list(per_seed.values())
    mean = statistics.mean(differences)
    if len(differences) < 2:
        return PairedDifference(per_seed, mean, None, 1, confidence, None)
    spread = statistics.stdev(differences)
    half = float(stats.t.ppf((1 + confidence) / 2, len(differences) - 1)) * spread / math.sqrt(len(differences))
    return PairedDifference(per_seed, mean, spread, len(differences), confidence, (mean - half, mean + half))


def seed_summary(values: Sequence[float]) -> dict:
    """{mean, std (sample; 0 for one seed), n} of one column over seeds."""
    mean, std, count = mean_std(values)
    return {"mean": mean, "std": std, "n": count}


def columns_over_seeds(per_seed: Mapping[str, Mapping[str, float]], columns: Sequence[str]) -> dict[str, dict]:
    """column -> ``seed_summary`` over the seeds that have the column (``per_seed``: seed -> column -> value);
    a column no seed has is left out. The one summary of a row (reproduce) or a method (study) over seeds."""
    summary = {}
    for column in columns:
        values = [scores[column] for scores in per_seed.values() if column in scores]
        if values:
            summary[column] = seed_summary(values)
    return summary


def paired_columns(
    per_seed: Mapping[str, Mapping[str, float]],
    baseline: Mapping[str, Mapping[str, float]],
    columns: Sequence[str],
    confidence: float = 0.95,
) -> dict[str, dict]:
    """column -> the paired difference (``PairedDifference.as_dict``) to the baseline's same seeds; a column
    the two share no seed of is left out. The one contrast to a baseline of reproduce's rows and the study's
    methods."""
    differences = {}
    for column in columns:
        mine = {seed: scores[column] for seed, scores in per_seed.items() if column in scores}
        theirs = {seed: scores[column] for seed, scores in baseline.items() if column in scores}
        difference = paired_difference(mine, theirs, confidence)
        if difference is not None:
            differences[column] = difference.as_dict()
    return differences


def paired_p_value(difference: PairedDifference) -> Optional[float]:
    """Two-sided p-value of a paired difference's mean against 0 (Student t, df = n - 1; ``scipy.stats.ttest_rel``'s
    to 1e-12, written out as ``paired_difference`` is); None below two pairs; 0 when every pair differs by the same
    nonzero amount, 1 when all are 0."""
    if difference.n < 2 or difference.std is None:
        return None
    if difference.std == 0:
        return 1.0 if difference.mean == 0 else 0.0
    t = abs(difference.mean) / (difference.std / math.sqrt(difference.n))
    return float(2 * stats.t.sf(t, difference.n - 1))


def minimum_detectable_difference(std: float, n: int, confidence: float = 0.95, power: float = 0.8) -> Optional[float]:
    """The smallest true paired mean difference a two-sided paired t-test at level 1 - ``confidence`` detects
    with probability ``power``, given the paired SD ``std`` and ``n`` pairs: (t(1 - alpha/2, n - 1) +
    t(power, n - 1)) * std / sqrt(n) (the usual approximation of the noncentral t). None below two pairs.
    n = 4, std = 0.02: (3.182 + 0.978) * 0.02 / 2 = 0.0416."""
    if n < 2:
        return None
    if not 0 < confidence < 1 or not 0.5 < power < 1:
        raise ValueError(f"confidence={confidence!r} must be in (0, 1), power={power!r} in (0.5, 1)")
    df = n - 1
    return float(stats.t.ppf((1 + confidence) / 2, df) + stats.t.ppf(power, df)) * std / math.sqrt(n)


def holm_adjust(p_values: Mapping[str, Optional[float]]) -> dict[str, Optional[float]]:
    """Holm's step-down adjustment of a family of p-values (name -> p; None stays None and is not counted):
    the k-th smallest of m is multiplied by m - k + 1, then made monotone and capped at 1.
    {a: 0.01, b: 0.04, c: 0.03} -> a 0.03, c 0.06, b 0.06 (0.04 * 1 = 0.04 raised to the running max 0.06).
    Written here because scipy 1.17 has no Holm (``scipy.stats.false_discovery_control`` is Benjamini-Hochberg
    or -Yekutieli only) and statsmodels' ``multipletests``, which has it, would be a dependency for these 7 lines."""
    present = sorted((value, name) for name, value in p_values.items() if value is not None)
    adjusted: dict[str, Optional[float]] = {name: None for name in p_values}
    running = 0.0
    for rank, (value, name) in enumerate(present):
        running = max(running, min(1.0, value * (len(present) - rank)))
        adjusted[name] = running
    return adjusted


def difference_text(entry: Optional[Mapping], digits: int = 2) -> str:
    """A paired difference (``PairedDifference.as_dict``) as "+1.23 [-0.50, +2.96]"; one pair: no interval."""
    if entry is None:
        return "—"
    mean = f"{entry['mean']:+.{digits}f}"
    if entry["interval"] is None:
        return f"{mean} ({entry['n']} paired seed: no interval)"
    low, high = entry["interval"]
    return f"{mean} [{low:+.{digits}f}, {high:+.{digits}f}]"


def markdown_table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table's lines: the header, the rule, one line per row of cells."""
    return ["| " + " | ".join(header) + " |", "|---" * len(header) + "|", *("| " + " | ".join(line) + " |" for line in lines)]


def validation_series(records: Sequence[dict]) -> list[tuple[int, float]]:
    """(step, score) at every step verl validated, from one run's records (``load_metrics``): the
    unweighted mean over validation sets of verl's core metric (``val-core/<set>/<acc|reward>/mean@N``)."""
    series = []
    for record in records:
        scores = [float(value) for key, value in record.items() if value is not None and VALIDATION_KEY.match(key)]
        if scores:
            series.append((record["step"], statistics.mean(scores)))
    return series


def best_and_last(series: Sequence[tuple[int, float]]) -> Optional[dict]:
    """{best_step, best, last_step, last} of a (step, score) series (the earliest step on a tie), None if empty."""
    if not series:
        return None
    best_step, best = max(series, key=lambda item: (item[1], -item[0]))
    last_step, last = max(series, key=lambda item: item[0])
    return {"best_step": best_step, "best": best, "last_step": last_step, "last": last}


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


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, figure, path: Path) -> Path:
    figure.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return Path(path)


def plot(curves: dict, path: Path, titles: Optional[dict[str, str]] = None, columns: int = 4) -> Path:
    """One panel per metric (``columns`` per line), one line per group: the mean over runs with a ±1 std
    band; a metric no group logged gets a panel saying so."""
    plt = _pyplot()
    count = max(1, len(curves))
    width, height = min(columns, count), math.ceil(count / columns)
    figure, axes = plt.subplots(height, width, figsize=(5 * width, 4 * height), squeeze=False)
    flat = [axis for line in axes for axis in line]
    for axis in flat[len(curves):]:
        axis.set_visible(False)
    for axis, (metric, groups) in zip(flat, curves.items()):
        if not groups:
            axis.text(0.5, 0.5, "not logged by these runs", ha="center", va="center", transform=axis.transAxes)
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
    return _save(plt, figure, path)


def plot_sensitivity(
    points: Sequence[tuple[float, Mapping[str, float]]], path: Path, coefficient: str, marked: float, ylabel: str
) -> Path:
    """Score against one coefficient's value: every seed's point, the mean ± sample std over seeds as a line
    with error bars, and the value ``marked`` (the paper's) as a dashed vertical line. ``points``: (value,
    seed -> score) per grid value. A log x axis when the values are positive and span 20x or more."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    points = sorted((value, scores) for value, scores in points if scores)
    for value, scores in points:
        axis.scatter([value] * len(scores), list(scores.values()), color="tab:blue", alpha=0.4, s=18)
    stats = [(value, *mean_std(list(scores.values()))) for value, scores in points]
    if stats:
        axis.errorbar([s[0] for s in stats], [s[1] for s in stats], yerr=[s[2] for s in stats], color="tab:blue",
                      marker="o", capsize=3, label="mean ± std over seeds")
    values = [value for value, _ in points] + [marked]
    if min(values) > 0 and max(values) / min(values) >= 20:
        axis.set_xscale("log")
    axis.axvline(marked, color="tab:red", linestyle="--", label=f"paper: {marked:g}")
    axis.set_xlabel(coefficient)
    axis.set_ylabel(ylabel)
    axis.set_title(f"sensitivity to {coefficient}")
    axis.legend(fontsize=7)
    return _save(plt, figure, path)
