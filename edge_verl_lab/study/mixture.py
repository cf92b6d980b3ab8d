"""A study on a mixture (``edge_verl_lab.demo.task.Mixture``, GEPO's setting), task by task: each part's exact
evaluation (its slice of the mixture's problem lists) and its training statistics (the runs' per-source
metrics, ``edge_verl/by_source/<part's data source>/<stat>``, logged by ``algorithm.edge_metrics.per_source``),
per run, summarised over seeds, and every method's paired difference to the baseline on each part's held-out
accuracy with its MDD; the parts x methods contrasts are one Holm family (the mixture as a whole has its
named contrasts in the main report).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

from edge_verl_lab.demo import task as tasks
from edge_verl_lab.demo.run import trained_steps
from edge_verl.methods import get_method
from edge_verl_lab.reporting import columns_over_seeds, holm_adjust, markdown_table
from edge_verl_lab.study.config import BASELINE, method_of
from edge_verl_lab.study.verdict import CONTRAST_HEADER, contrast, contrast_cells, judge

BY_SOURCE = "edge_verl/by_source"


@dataclass(frozen=True)
class PartColumn:
    """One number per (run, part): an exact-evaluation mean over the part's problems (``split``, ``stat``,
    ``final``), or the window mean of the part's per-source training statistic ``metric`` (``gepo``: logged by
    GEPO runs only)."""

    key: str
    label: str
    split: Optional[str] = None
    stat: Optional[str] = None
    final: bool = True
    metric: Optional[str] = None
    gepo: bool = False


PART_COLUMNS = (
    PartColumn("heldout_sampled", "held-out sampled", "heldout", "sampled"),
    PartColumn("heldout_greedy", "held-out greedy", "heldout", "greedy"),
    PartColumn("heldout_gold_prob", "held-out gold prob", "heldout", "gold_prob"),
    PartColumn("seen_sampled", "seen sampled", "seen", "sampled"),
    PartColumn("heldout_sampled_start", "held-out sampled @0", "heldout", "sampled", final=False),
    PartColumn("seen_sampled_start", "seen sampled @0", "seen", "sampled", final=False),
    # training, as sampled (a GEC method's per-source reward is its corrected one: it is labelled so there)
    PartColumn("reward", "reward", metric="score_mean"),
    PartColumn("all_wrong_groups", "all-wrong groups", metric="all_wrong_group_frac"),
    PartColumn("entropy_sampled", "entropy (−log π_old)", metric="sampled_entropy"),
    PartColumn("response_length", "response length", metric="response_length"),
    PartColumn("group_entropy", "GEPO group entropy", metric="group_entropy_mean", gepo=True),
    PartColumn("pos_attenuated", "GEPO pos. attenuated", metric="pos_attenuated_frac", gepo=True),
    PartColumn("neg_attenuated", "GEPO neg. attenuated", metric="neg_attenuated_frac", gepo=True),
)
PART_KEYS = tuple(column.key for column in PART_COLUMNS)
PART_METRIC = "heldout_sampled"


def part_values(the_task: tasks.Mixture, records: Sequence[dict], window: tuple[int, int], method: str, evaluation: dict) -> dict:
    """part name -> column -> value for one run. ``evaluation``: {final, start} exact evaluations ({split:
    result}); a per-source metric the run did not log in its ``window`` raises ``ValueError``."""
    low, high = window
    trained = [record for record in trained_steps(list(records)) if low <= record["step"] <= high]
    is_gepo = get_method(method_of(method)).estimator == "gepo"
    found: dict[str, dict[str, float]] = {}
    for split in tasks.VALIDATION_SPLITS:
        ranges = tasks.part_ranges(the_task, split)
        for column in PART_COLUMNS:
            if column.split != split:
                continue
            per_problem = evaluation["final" if column.final else "start"][split]["per_problem"][column.stat]
            if len(per_problem) != ranges[-1][2]:
                raise ValueError(f"its {split} evaluation has {len(per_problem)} problems, the mixture's parts {ranges[-1][2]}")
            for part, start, stop in ranges:
                found.setdefault(part.name, {})[column.key] = statistics.fmean(per_problem[start:stop])
    for part in the_task.parts:
        for column in PART_COLUMNS:
            if column.metric is None or (column.gepo and not is_gepo):
                continue
            metric = f"{BY_SOURCE}/{part.data_source}/{column.metric}"
            series = [float(record[metric]) for record in trained if record.get(metric) is not None]
            if not series:
                raise ValueError(f"part {part.name}: the run did not log {metric} in steps {low}-{high} "
                                 "(a mixture's runs log +algorithm.edge_metrics.per_source=True)")
            found[part.name][column.key] = statistics.fmean(series)
    return found


def part_summary(the_task: tasks.Mixture, methods: Sequence[str], runs: dict, confidence: float, gate) -> dict:
    """part -> {methods: method -> {per_seed, summary}, contrasts: [each method - baseline on PART_METRIC]},
    the contrasts Holm-adjusted over all parts and methods (``p_holm``) with their verdicts."""
    found = {}
    family = {}
    for part in the_task.parts:
        per_method = {}
        for method in methods:
            per_seed = {str(run["seed"]): run["by_part"][part.name] for run in runs.values() if run["method"] == method}
            per_method[method] = {"per_seed": per_seed, "summary": columns_over_seeds(per_seed, PART_KEYS)}
        values = {method: {seed: v[PART_METRIC] for seed, v in entry["per_seed"].items()} for method, entry in per_method.items()}
        compared = [entry for method in methods if method != BASELINE and (entry := contrast(values, method, BASELINE, confidence))]
        for entry in compared:
            family[f"{part.name}:{entry['method']}"] = entry
        found[part.name] = {"data_source": part.data_source, "methods": per_method, "contrasts": compared}
    adjusted = holm_adjust({name: entry["p"] for name, entry in family.items()})
    for name, entry in family.items():
        entry["p_holm"] = adjusted[name]
        judge(entry, gate)
    return found


def _cell(entry: Optional[dict]) -> str:
    if entry is None:
        return "-"
    return f"{entry['mean']:.3f}" + (f" ± {entry['std']:.3f}" if entry["n"] > 1 else "")


def part_markdown(report: dict) -> list[str]:
    """The report's section on each task of the mixture."""
    lines = ["### Per task of the mixture", "",
             "Each task's slice of the exact evaluation, and its training statistics from the runs' per-source metrics "
             f"(`{BY_SOURCE}/<data source>/*`, mean over the same window; a GEC method's reward there is the corrected one). "
             f"Δ: each method − {BASELINE} on the task's held-out sampled accuracy, paired by seed; p Holm-adjusted over "
             "all tasks and methods.", ""]
    for name, part in report["parts"].items():
        lines += [f"**{name}** (`{part['data_source']}`)", ""]
        keys = [key for key in PART_KEYS if any(key in entry["summary"] for entry in part["methods"].values())]
        labels = {column.key: column.label for column in PART_COLUMNS}
        lines += markdown_table(["method", *(labels[key] for key in keys)],
                                [[method, *(_cell(entry["summary"].get(key)) for key in keys)] for method, entry in part["methods"].items()])
        if part["contrasts"]:
            lines += [""]
            lines += markdown_table(CONTRAST_HEADER, [contrast_cells(entry) for entry in part["contrasts"]])
        lines += [""]
    return lines
