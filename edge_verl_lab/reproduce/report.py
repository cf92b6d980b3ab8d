"""A reproduced table from its runs' results, as data (JSON) and text (markdown), and a sweep's plots.

Works on what ``pipeline`` has loaded (each run's pass@1 % by column, each run's validation series); reads
no file. What a row reports, and in which order of trust:
- the headline: each run's FINAL checkpoint evaluated on the held-out benchmarks, mean ± sample std over
  seeds, the paper's number beside it;
- every seed's value;
- the paired difference to the row's baseline (the GRPO row of the same size, or the table's baseline row:
  the paper's point of a sensitivity sweep), seed by seed, with a 95% interval over seeds (Student t,
  df = n - 1); fewer than two paired seeds: the difference alone, saying so;
- the best step on verl's per-step validation, labelled optimistic and never the headline: it is chosen
  after the fact, on the validation sets (by default the very benchmarks of the headline), and that step's
  checkpoint is not what the headline evaluated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence

from edge_verl_lab.reporting import best_and_last, columns_over_seeds, difference_text, markdown_table, paired_columns, plot_sensitivity, seed_summary
from edge_verl_lab.reproduce.tables import BENCHMARK_COLUMNS, Row, Table

SWEEP_COLUMN = "Avg"  # a sensitivity point's score: held-out Avg pass@1 (%) of the final checkpoint
CONFIDENCE = 0.95
OPTIMISTIC = "best step on validation — optimistic"


def row_columns(per_seed: Mapping[str, Mapping[str, float]], columns: Sequence[str], paper: Mapping[str, float]) -> dict:
    """column -> {mean, std (sample; 0 for one seed), n, paper} over the seeds that have the column."""
    return {column: {**stats, "paper": paper.get(column)} for column, stats in columns_over_seeds(per_seed, columns).items()}


def validation_summary(series_by_seed: Mapping[str, Sequence[tuple[int, float]]]) -> Optional[dict]:
    """Per seed {best_step, best, last_step, last} of the validation score (in %), and over seeds the mean ±
    std of the best and of the last, labelled ``OPTIMISTIC``; None when no run validated."""
    per_seed = {}
    for seed, series in series_by_seed.items():
        found = best_and_last([(step, 100 * score) for step, score in series])
        if found is not None:
            per_seed[seed] = found
    if not per_seed:
        return None
    return {
        "label": OPTIMISTIC,
        "per_seed": per_seed,
        "best": seed_summary([entry["best"] for entry in per_seed.values()]),
        "last": seed_summary([entry["last"] for entry in per_seed.values()]),
    }


def sweep_summary(table: Table, rows: Sequence[dict]) -> dict:
    """coefficient -> {paper_value, column, points: [{value, row, per_seed, mean, std, n, vs_paper}]}, over
    the sweep's points whose row ran (``rows``: the table's JSON rows)."""
    by_key = {row["key"]: row for row in rows}
    summary = {}
    for coefficient, points in table.sweep.points.items():
        entries = []
        for value, key in points:
            row = by_key.get(key)
            if row is None:
                continue
            scores = {seed: by_seed[SWEEP_COLUMN] for seed, by_seed in row["per_seed"].items() if SWEEP_COLUMN in by_seed}
            entry = {"value": value, "row": key, "per_seed": scores, "paper_point": key == table.sweep.centre_row}
            if scores:
                entry.update(seed_summary(list(scores.values())))
            entry["vs_paper"] = row["vs_baseline"].get(SWEEP_COLUMN)
            entries.append(entry)
        if entries:
            summary[coefficient] = {"paper_value": table.sweep.centre[coefficient], "column": SWEEP_COLUMN, "points": entries}
    return summary


def summarize(
    table: Table,
    rows: Sequence[Row],
    models: Mapping[str, str],
    evaluated: Mapping[str, Mapping[str, Mapping[str, float]]],
    validation: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
    header: Mapping,
    not_run: Optional[Mapping[str, str]] = None,
) -> dict:
    """The table as JSON. ``evaluated``: row key -> seed ("-" for a base model) -> column -> pass@1 %;
    ``validation``: row key -> seed -> (step, score in [0, 1]) series; ``header``: backend, seeds,
    evaluation (recorded as given). Columns: Avg and the papers' five benchmarks first, then any other
    benchmark evaluated (AIME25, extras)."""
    others = [name for by_seed in evaluated.values() for scores in by_seed.values() for name in scores if name not in BENCHMARK_COLUMNS]
    columns = [*BENCHMARK_COLUMNS, *dict.fromkeys(others)]
    summary_rows = []
    for row in rows:
        per_seed = evaluated.get(row.key, {})
        baseline = table.baseline_of(row, rows)
        summary_rows.append({
            "key": row.key,
            "label": row.label,
            "model": models[row.key],
            "overrides": list(row.overrides),
            "per_seed": dict(per_seed),
            "columns": row_columns(per_seed, columns, row.paper),
            "baseline": baseline.key if baseline is not None else None,
            "vs_baseline": paired_columns(per_seed, evaluated.get(baseline.key, {}), columns, CONFIDENCE) if baseline is not None else {},
            "validation": validation_summary(validation.get(row.key, {})) if row.trains else None,
        })
    result = {
        "table": table.key,
        "title": table.title,
        **header,
        "checkpoint": "last",  # the headline: each run's final checkpoint; the best step only under OPTIMISTIC
        "note": table.note,
        "columns": columns,
        "confidence": CONFIDENCE,
        "rows": summary_rows,
        "not_run": dict(not_run or {}),
    }
    if table.sweep is not None:
        result["sensitivity"] = sweep_summary(table, summary_rows)
    return result


# --- markdown ------------------------------------------------------------------------------------------------


def _cell(entry: Optional[dict], with_paper: bool) -> str:
    """"45.00 ± 7.07 [47.24]"; one seed: "30.00 [25.71]"; no paper number: "[—]"."""
    if entry is None:
        return "-"
    text = f"{entry['mean']:.2f}" + (f" ± {entry['std']:.2f}" if entry["n"] > 1 else "")
    if with_paper:
        text += f" [{entry['paper']:.2f}]" if entry["paper"] is not None else " [—]"
    return text


def _headline(table: dict) -> list[str]:
    columns = table["columns"]
    with_paper = any(entry["paper"] is not None for row in table["rows"] for entry in row["columns"].values())
    lines = []
    for row in table["rows"]:
        count = max((entry["n"] for entry in row["columns"].values()), default=0)
        if row["baseline"] is not None:
            delta = difference_text(row["vs_baseline"].get("Avg"))
        else:
            delta = "(baseline)" if any(other["baseline"] == row["key"] for other in table["rows"]) else "—"
        cells = [_cell(row["columns"].get(column), with_paper) for column in columns]
        lines.append([row["label"], row["model"], str(count), *cells, delta])
    text = markdown_table(["row", "model", "n", *columns, "Δ Avg vs baseline [95% CI]"], lines)
    legend = "pass@1 (%) of each run's final checkpoint (last step), mean ± sample std over seeds"
    legend += "; [paper's number, — where the paper gives none]" if with_paper else ""
    legend += (". Δ: the paired difference to the row's baseline (the GRPO row of the same size, or the table's "
               "baseline row) over the seeds both ran, mean [95% interval, Student t, df = n − 1], in points.")
    return [*text, "", legend]


def _differences(table: dict) -> list[str]:
    compared = [row for row in table["rows"] if row["vs_baseline"]]
    if not compared:
        return []
    labels = {row["key"]: row["label"] for row in table["rows"]}
    columns = table["columns"]
    lines = [
        [row["label"], labels[row["baseline"]], str(max(entry["n"] for entry in row["vs_baseline"].values())),
         *(difference_text(row["vs_baseline"].get(column)) for column in columns)]
        for row in compared
    ]
    return ["", "### Paired difference to the baseline, every column (points; mean [95% interval over seeds])", "",
            *markdown_table(["row", "baseline", "pairs", *columns], lines)]


def _per_seed(table: dict) -> list[str]:
    columns = table["columns"]
    lines = []
    for row in table["rows"]:
        for seed, scores in row["per_seed"].items():
            lines.append([row["label"], seed, *(f"{scores[column]:.2f}" if column in scores else "-" for column in columns)])
    if not lines:
        return []
    return ["", "### Per seed (pass@1 %, final checkpoint)", "", *markdown_table(["row", "seed", *columns], lines)]


def _optimistic(table: dict) -> list[str]:
    validated = [row for row in table["rows"] if row.get("validation")]
    if not validated:
        return []
    lines = []
    for row in validated:
        found = row["validation"]
        for seed, entry in found["per_seed"].items():
            lines.append([row["label"], seed, str(entry["best_step"]), f"{entry['best']:.2f}", str(entry["last_step"]), f"{entry['last']:.2f}"])
        best, last = found["best"], found["last"]
        lines.append([row["label"], "mean ± std", "", f"{best['mean']:.2f} ± {best['std']:.2f}", "", f"{last['mean']:.2f} ± {last['std']:.2f}"])
    return [
        "", f"### {OPTIMISTIC.capitalize()} (not the headline)", "",
        "verl's validation during training (val-core mean@N, unweighted mean over the validation sets, %). The best "
        "step is picked after the fact, on data that is by default the headline's benchmarks, and its checkpoint is "
        "not the one the headline evaluated: an upper bound, not a result.", "",
        *markdown_table(["row", "seed", "best step", "best (%)", "last step", "last (%)"], lines),
    ]


def _sensitivity(table: dict) -> list[str]:
    text = []
    seeds = [str(seed) for seed in table["seeds"]]
    for coefficient, found in table.get("sensitivity", {}).items():
        lines = []
        for point in found["points"]:
            spread = f"{point['mean']:.2f} ± {point['std']:.2f}" if "mean" in point else "-"
            per_seed = [f"{point['per_seed'][seed]:.2f}" if seed in point["per_seed"] else "-" for seed in seeds]
            delta = "(paper's point)" if point["paper_point"] else difference_text(point["vs_paper"])
            lines.append([f"{point['value']:g}" + (" (paper)" if point["paper_point"] else ""), point["row"], *per_seed, spread, delta])
        text += ["", f"### Sensitivity to {coefficient} (paper {found['paper_value']:g}; plot sensitivity_{coefficient}.png)", "",
                 *markdown_table(["value", "row", *(f"seed {seed}" for seed in seeds), "mean ± std", "Δ vs paper's point [95% CI]"], lines)]
    if text:
        text += ["", f"Score: held-out {SWEEP_COLUMN} pass@1 (%) of each run's final checkpoint."]
    return text


def table_markdown(table: dict) -> str:
    """The headline (final checkpoints: mean ± std [paper], Δ Avg vs baseline), the paired differences of
    every column, every seed's numbers, the optimistic best validation step, a sweep's points, the note."""
    seeds = ", ".join(map(str, table["seeds"]))
    lines = [f"## {table['title']} ({table['backend']}, seeds {seeds}) — final checkpoint of each run", ""]
    lines += _headline(table) + _differences(table) + _per_seed(table) + _optimistic(table) + _sensitivity(table)
    if table.get("not_run"):
        lines += ["", "Not run: " + "; ".join(f"{key} ({reason})" for key, reason in table["not_run"].items()) + "."]
    lines += ["", table["note"]]
    return "\n".join(lines)


def write_sensitivity_plots(table: dict, out: Path) -> list[Path]:
    """``sensitivity_<coefficient>.png`` in ``out`` for each swept coefficient with at least one score."""
    written = []
    for coefficient, found in table.get("sensitivity", {}).items():
        points = [(point["value"], point["per_seed"]) for point in found["points"] if point["per_seed"]]
        if points:
            path = Path(out) / f"sensitivity_{coefficient}.png"
            written.append(plot_sensitivity(points, path, coefficient, found["paper_value"],
                                            f"held-out {found['column']} pass@1 (%)"))
    return written
