"""The study's report, read back from each run's own ``metrics.jsonl``: ``report.json`` (every number, the
metric it was read from, the run's folder and metrics file), ``report.md`` and ``curves.png``.

What a run reports (``COLUMNS``):
- accuracy on the held-out and on the seen problems at the LAST validation (after the last step; the
  headline), and before training (step 0: the same model for every method of a seed);
- training statistics, each the mean over the last half of the training steps (steps > steps / 2):
  reward and group outcomes AS SAMPLED (a GEC run's logged reward is its corrected one; its sampled
  statistics are ``edge_verl/gec/sampled/*``), policy entropy (on the sampled tokens, and on every trained
  token as verl logs it), advantage variance before shaping (GRPO's
  advantages of the rewards as trained) and after (what the loss saw), response length, GEC's injected
  token share.
A column names the one metric it reads for each kind of method (``Column.metric_for``; ``sources`` in the
JSON says which a run used): e.g. the sampled reward is ``edge_verl/gec/sampled/score_mean`` in a GEC run,
``critic/score/mean`` otherwise; a run that did not log the metric its column names stops the report
(a renamed metric can never be replaced silently by another). Per method: every seed, mean ± sample std, and the paired difference to GRPO over the seeds both
ran with a 95% Student-t interval (``edge_verl_lab.reporting``, shared with ``edge-verl reproduce``).
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from edge_verl_lab.demo import task as tasks
from edge_verl_lab.demo.run import trained_steps
from edge_verl_lab.experiment import source_commit
from edge_verl.estimators import names as estimator_names
from edge_verl.estimators.base import declared_metrics
from edge_verl.methods import get_method
from edge_verl_lab.reporting import VALIDATION_KEY, columns_over_seeds, difference_text, load_metrics, markdown_table, paired_columns, plot
from edge_verl_lab.study.config import (
    BASELINE,
    CALIBRATION_FILE,
    DONE_FILE,
    EVAL_FILE,
    IDENTITY_FILE,
    LEGACY_PROTOCOL,
    StudyConfig,
    StudyError,
    eda_form_of,
    eval_file,
    method_of,
    plan,
)
from edge_verl_lab.study import checks
from edge_verl_lab.study.checks import ADVANTAGE_EXTREMES, GRAD_NORM
from edge_verl_lab.study.mixture import part_markdown, part_summary, part_values
from edge_verl_lab.study.protocol import deviation_table
from edge_verl_lab.study.verdict import CONTRAST_HEADER, GATE_MARGIN, baseline_gate, contrast_cells, contrasts, judge

CONFIDENCE = 0.95
FORMAT = 1
# One line per invocation of ``edge-verl study`` that trained or evaluated a run: its wall time, ``jobs``, the
# runs it trained and its commit (``runner.run_study``): the study's wall time, which the runs' own times
# overstate when runs train side by side.
INVOCATIONS_FILE = "invocations.jsonl"


def read_invocations(folder: Path) -> list[dict]:
    """The records of ``folder / INVOCATIONS_FILE`` in order ([] when there is none)."""
    path = Path(folder) / INVOCATIONS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def invocations_text(invocations: list[dict]) -> str:
    """"; the invocations that trained its runs: 1 (62.0 min, 2 runs at a time)": the study's own wall time."""
    training = [record for record in invocations if record.get("trained")]
    if not training:
        return ""
    jobs = sorted({record["jobs"] for record in training})
    at_a_time = " or ".join(map(str, jobs)) + (" run" if jobs == [1] else " runs") + " at a time"
    minutes = sum(record["seconds"] for record in training) / 60
    return f"; the invocations that trained them: {len(training)} ({minutes:.1f} min in all, {at_a_time} on one Ray cluster)"


@dataclass(frozen=True)
class Column:
    """One reported number per run. ``split``: a validation accuracy (``final`` after the last step, else
    at step 0); ``exact``: a statistic of the exact evaluation; otherwise a training statistic read from ONE
    named metric per run (``metric_for``), averaged over the run's window: a run that lacks the metric its
    column names is an error, never read from another metric."""

    key: str
    label: str
    description: str
    # The metric every run reads; ``gec``: a GEC method's instead (its as-sampled statistic); ``estimators``:
    # (estimator, metric) pairs for the estimators that log their own. None: not reported for that method.
    metric: Optional[str] = None
    gec: Optional[str] = None
    estimators: tuple[tuple[str, str], ...] = ()
    split: Optional[str] = None
    final: bool = True
    digits: int = 3
    # evaluation="exact": the statistic of edge_verl_lab/study/exact_eval.py (greedy_acc, sampled_acc, gold_prob)
    # on ``split``, of the final weights (``final``) or of the seed's step-0 model.
    exact: Optional[str] = None
    # Only for rows that run EDA in this form (config.eda_form_of: a method's own rows run the gradient form).
    eda_form: Optional[str] = None

    def metric_for(self, method: str) -> Optional[str]:
        """The one metric this column reads in a run of study row ``method`` (None: the column does not apply)."""
        found = get_method(method_of(method))
        if self.eda_form is not None and (not found.eda or eda_form_of(method) != self.eda_form):
            return None
        if found.gec and self.gec is not None:
            return self.gec
        return dict(self.estimators).get(found.estimator, self.metric)

    def reads(self) -> str:
        """Which metric the column reads, for the report's column list."""
        parts = [f"`{self.metric}`" if self.metric else "nothing"]
        parts += [f"{estimator} runs `{metric}`" for estimator, metric in self.estimators]
        if self.gec:
            parts.append(f"GEC methods `{self.gec}`")
        if self.eda_form:
            parts.append(f"only in rows running EDA's {self.eda_form} form")
        return "; ".join(parts)


# The as-sampled statistics of a run: its estimator's own, or GRPO's advantage_stats.
_BEFORE = tuple((name, f"edge_verl/{name}/adv_var_before") for name in estimator_names())
COLUMNS = (
    Column("heldout_acc", "held-out acc", "accuracy on the held-out problems after the last step", split="heldout"),
    Column("seen_acc", "seen acc", "accuracy on the seen (training) problems after the last step", split="seen"),
    Column("heldout_acc_start", "held-out acc @0", "held-out accuracy before training", split="heldout", final=False),
    Column("seen_acc_start", "seen acc @0", "seen accuracy before training", split="seen", final=False),
    Column("reward_sampled", "reward (sampled)", "training reward of the responses as sampled",
           "critic/score/mean", gec="edge_verl/gec/sampled/score_mean"),
    Column("reward_trained", "reward (trained)", "training reward of the responses as trained (GEC: corrected)",
           "critic/score/mean"),
    Column("entropy_sampled", "entropy (sampled)", "old policy's entropy on the tokens it sampled (GEC: first attempts only)",
           "actor/entropy", gec="edge_verl/gec/sampled/entropy"),
    Column("entropy", "entropy (trained)", "verl's actor/entropy: every trained token (GEC: injected text included)", "actor/entropy"),
    Column("adv_var_before", "adv var before", "variance of the GRPO advantages before shaping (rewards as trained)",
           "edge_verl/adv/var", estimators=_BEFORE),
    Column("adv_var_after", "adv var after", "variance of the advantages as trained (after EDA's / GEPO's shaping)",
           "edge_verl/adv/var"),
    Column("adv_var_sampled", "adv var (sampled)", "variance of the GRPO advantages of the rewards as sampled",
           "edge_verl/adv/var", gec="edge_verl/gec/sampled/adv_var", estimators=_BEFORE),
    Column("zero_var_groups", "tied groups (sampled)", "fraction of groups whose sampled rewards all tie",
           "edge_verl/adv/zero_variance_group_frac", gec="edge_verl/gec/sampled/zero_variance_group_frac"),
    Column("all_wrong_groups", "all-wrong groups", "fraction of groups with no correct sampled response",
           "edge_verl/adv/all_wrong_group_frac", gec="edge_verl/gec/sampled/all_wrong_group_frac"),
    Column("all_right_groups", "all-right groups", "fraction of groups whose sampled responses are all correct",
           "edge_verl/adv/all_right_group_frac", gec="edge_verl/gec/sampled/all_right_group_frac"),
    Column("response_length", "response length", "mean trained response length in tokens (GEC: after correction)",
           "response_length/mean", digits=1),
    Column("injected_token_frac", "injected tokens", "GEC: fraction of trained tokens that were injected",
           gec="edge_verl/gec/injected_token_frac"),
    Column("entropy_grad_share", "EDA entropy-term grad share",
           "EDA's gradient form: of the loss gradient with respect to the policy's outputs, the share that reaches them "
           "through the entropy term (|dL/dH| / (|dL/dlogp| + |dL/dH|), edge_verl/integration/trainer.py); 0 by "
           "construction in every other row, whose loss has no such term",
           "actor/edge_eda/entropy_grad_share", eda_form="gradient"),
)
COLUMN_KEYS = tuple(column.key for column in COLUMNS)
HEADLINE = ("heldout_acc", "seen_acc")

_EXACT_STATS = (("greedy_acc", "greedy", "greedy accuracy"), ("sampled_acc", "sampled", "accuracy of seeded samples at the evaluation's temperature"),
                ("gold_prob", "gold prob", "teacher-forced probability of the gold answer"))
EXACT_COLUMNS = tuple(
    Column(f"{split}_{short.replace(' ', '_')}{'' if final else '_start'}", f"{split} {short}{'' if final else ' @0'}",
           f"{what} on the {split} problems, {'after the last step' if final else 'of the step-0 model'} (exact evaluation)",
           split=split, final=final, exact=stat)
    for final in (True, False) for split in tasks.VALIDATION_SPLITS for stat, short, what in _EXACT_STATS
)
# evaluation="exact": the contrasts' metric, and the gate's (seen accuracy sampled as in training).
PRIMARY_METRIC = "heldout_sampled"
GATE_SEEN, GATE_SEEN_START = "seen_sampled", "seen_sampled_start"
# What the final models WRITE on the held-out problems (the exact evaluation's completion statistics,
# exact_eval.SUMMARY): reward-graded (last box) vs first-box accuracy, reflections, truncation at the cap and
# length, per method. key in the evaluation file -> (label, digits).
COMPLETION_STATS = {
    "sampled_acc": ("sampled acc (last box)", 3),
    "sampled_first_acc": ("sampled acc (first box)", 3),
    "greedy_acc": ("greedy acc (last box)", 3),
    "greedy_first_acc": ("greedy acc (first box)", 3),
    "sampled_reflected_frac": ("samples with a 2nd box", 3),
    "sampled_capped_frac": ("samples truncated", 3),
    "greedy_capped_frac": ("greedy truncated", 3),
    "sampled_length": ("sample length", 1),
}


def columns_for(evaluation: str) -> tuple[Column, ...]:
    """The report's columns: verl's validation accuracies, or the exact evaluation's, then the training statistics."""
    if evaluation == "exact":
        return EXACT_COLUMNS + tuple(column for column in COLUMNS if column.split is None)
    return COLUMNS


def validation_points(records: Sequence[dict], source: str) -> list[tuple[int, float]]:
    """(step, accuracy) at every validation of one data source (verl's ``val-core/<source>/acc/mean@N``)."""
    points = []
    for record in records:
        for key, value in record.items():
            match = VALIDATION_KEY.match(key)
            if match and match["source"] == source and match["variable"] == "acc" and value is not None:
                points.append((record["step"], float(value)))
    return points


def window_of(steps: int) -> tuple[int, int]:
    """The training steps the statistics average over: the last half, (steps / 2, steps]."""
    return steps // 2 + 1, steps


def run_values(records: Sequence[dict], task: tasks.Task, steps: int, method: str, columns: Sequence[Column] = COLUMNS,
               evaluation: Optional[dict] = None) -> dict:
    """One run's numbers: {values: column -> value, sources: column -> metric read, validation: split ->
    [(step, accuracy)]}; a column that does not apply to ``method`` (``Column.metric_for``) is absent, a
    column whose metric the run did not log in its window raises ``ValueError``. ``evaluation``: {final,
    start} exact evaluations ({split: result}) for the exact columns; a missing one is an error too."""
    low, high = window_of(steps)
    trained = [record for record in trained_steps(list(records)) if low <= record["step"] <= high]
    values, sources = {}, {}
    # a mixture validates per part only, and its study evaluates exactly (study/mixture.py splits it by part)
    validation = {split: [] if isinstance(task, tasks.Mixture) else validation_points(records, task.validation_source(split))
                  for split in tasks.VALIDATION_SPLITS}
    for column in columns:
        if column.exact is not None:
            which = "final" if column.final else "start"
            if evaluation is None or which not in evaluation:
                raise ValueError(f"column {column.key}: the run has no {which} exact evaluation ({EVAL_FILE})")
            values[column.key], sources[column.key] = float(evaluation[which][column.split][column.exact]), f"{EVAL_FILE}:{which}/{column.split}/{column.exact}"
            continue
        if column.split is not None:
            points = dict(validation[column.split])  # step -> accuracy
            step = max(points, default=None) if column.final else 0
            if step in points:
                values[column.key], sources[column.key] = points[step], f"val-core/{task.validation_source(column.split)}/acc"
            continue
        metric = column.metric_for(method)
        if metric is None:
            continue
        found = [float(record[metric]) for record in trained if record.get(metric) is not None]
        if not found:
            raise ValueError(f"column {column.key}: a {method} run reads {metric}, which it did not log in steps {low}-{high}")
        values[column.key], sources[column.key] = statistics.mean(found), metric
    return {"values": values, "sources": sources, "validation": {split: [list(p) for p in points] for split, points in validation.items()}}


# A run diverged at the first training step whose sampled entropy passes this many nats per token (the
# warm-started models sample ~0.1: past 1.0 the answer format is being lost, as in the EDA gradient-form
# runs that diverged before) or where a statistic it logs is not finite. A diverged run's report shows,
# step by step, what each method logs of its stability: entropy, |advantage|, EDA's entropy ratio, the
# gradient norm.
DIVERGED_ENTROPY = 1.0
# ... or where |advantage| or the gradient norm before clipping passes these: a std-normalised group advantage of
# G = 8 is at most (G - 1) / sqrt(G - 1) = 2.65 and EDA's with P_hat clamped to [0.1, 10] at most 26.5, so past 100
# one response's advantage is the step (EDA's 1e-6 entropy floor reached 2.5e6); GRPO's norm stayed below 1.
DIVERGED_ADVANTAGE = 100.0
DIVERGED_GRAD_NORM = 100.0
STABILITY = (
    ("entropy", None),  # the run's sampled-entropy metric (Column entropy_sampled)
    ("|adv| p99", "edge_verl/edge_eda/abs_adv_p99"),
    ("adv max", "critic/advantages/max"),
    ("adv min", "critic/advantages/min"),
    ("entropy ratio p1", "edge_verl/edge_eda/entropy_ratio_p1"),
    ("entropy ratio p99", "edge_verl/edge_eda/entropy_ratio_p99"),
    ("grad norm", "actor/grad_norm"),
)


def divergence(records: Sequence[dict], method: str) -> Optional[dict]:
    """None, or {step, why, series: label -> [[step, value]]} for a run that diverged (``DIVERGED_ENTROPY``)."""
    entropy_metric = _BY_KEY["entropy_sampled"].metric_for(method)
    rows = trained_steps(list(records))
    found = None
    for row in rows:
        bad = sorted(key for key, value in row.items() if isinstance(value, float) and not math.isfinite(value))
        if bad:
            found = (row["step"], f"not finite: {', '.join(bad[:3])}")
        elif row.get(entropy_metric) is not None and float(row[entropy_metric]) > DIVERGED_ENTROPY:
            found = (row["step"], f"{entropy_metric} {float(row[entropy_metric]):.3f} > {DIVERGED_ENTROPY}")
        elif (extreme := max((abs(float(row[key])) for key in ADVANTAGE_EXTREMES if row.get(key) is not None), default=0.0)) > DIVERGED_ADVANTAGE:
            found = (row["step"], f"|advantage| {extreme:.3g} > {DIVERGED_ADVANTAGE:g}")
        elif row.get(GRAD_NORM) is not None and float(row[GRAD_NORM]) > DIVERGED_GRAD_NORM:
            found = (row["step"], f"{GRAD_NORM} {float(row[GRAD_NORM]):.3g} > {DIVERGED_GRAD_NORM:g}")
        if found:
            break
    if found is None:
        return None
    series = {}
    for label, metric in STABILITY:
        metric = metric or entropy_metric
        points = [[row["step"], float(row[metric])] for row in rows if row.get(metric) is not None]
        if points:
            series[label] = points
    return {"step": found[0], "why": found[1], "series": series}


def finished_records(config: StudyConfig) -> dict[str, list[dict]]:
    """run name -> its metrics records (``load_metrics``), for every finished run (``done.json``)."""
    return {
        config.run_name(method, seed): load_metrics(config.run_folder(method, seed))
        for method, seed in config.runs()
        if (config.run_folder(method, seed) / DONE_FILE).exists()
    }


def summarize(config: StudyConfig, published_from: Optional[str] = None, records: Optional[dict[str, list[dict]]] = None) -> dict:
    """The report as data, from the finished runs' folders (a run without ``done.json`` is listed as not
    finished and left out of every statistic). ``published_from``: the folder the study ran in, for a copy
    made by ``export`` (its report then says how to regenerate it there); ``records``: the finished runs'
    metrics (``finished_records``), read here when not given."""
    task = tasks.get_task(config.task)
    records = finished_records(config) if records is None else records
    columns = columns_for(config.evaluation)
    column_keys = tuple(column.key for column in columns)
    runs, not_finished, final_heldout = {}, [], {}
    for method, seed in config.runs():
        folder = config.run_folder(method, seed)
        done = folder / DONE_FILE
        if config.run_name(method, seed) not in records:
            not_finished.append(config.run_name(method, seed))
            continue
        evaluation = None
        if config.evaluation == "exact":
            evaluation = {"final": json.loads((folder / EVAL_FILE).read_text()),
                          "start": json.loads((config.seed_model_folder(seed) / EVAL_FILE).read_text())}
            final_heldout[config.run_name(method, seed)] = evaluation["final"]["heldout"]
        try:
            entry = run_values(records[config.run_name(method, seed)], task, config.steps, method, columns, evaluation)
        except ValueError as error:
            raise StudyError(f"run {config.run_name(method, seed)} ({folder / 'metrics.jsonl'}): {error}") from error
        entry["diverged"] = divergence(records[config.run_name(method, seed)], method)
        if config.evaluation == "exact":
            metric = entry["sources"].get("reward_sampled")
            first = [float(r[metric]) for r in trained_steps(records[config.run_name(method, seed)]) if r["step"] == 1 and r.get(metric) is not None]
            entry["reward_first_step"] = first[0] if first else None
            entry["heldout_sampled_se"] = sampling_se(evaluation["final"]["heldout"]["per_problem"]["sampled"])
            if config.is_mixture:
                try:
                    entry["by_part"] = part_values(task, records[config.run_name(method, seed)], window_of(config.steps), method, evaluation)
                except ValueError as error:
                    raise StudyError(f"run {config.run_name(method, seed)} ({folder}): {error}") from error
        entry.update({
            "method": method,
            "seed": seed,
            "folder": str(folder.relative_to(config.out)),
            "metrics_file": str((folder / "metrics.jsonl").relative_to(config.out)),
            **{key: value for key, value in json.loads(done.read_text()).items() if key in ("seconds", "commit", "modified")},
        })
        runs[config.run_name(method, seed)] = entry
    methods = {}
    for method in config.methods:
        per_seed = {str(run["seed"]): run["values"] for run in runs.values() if run["method"] == method}
        methods[method] = {"per_seed": per_seed, "summary": columns_over_seeds(per_seed, column_keys), "vs_baseline": {}}
    baseline = methods.get(BASELINE)
    if baseline is not None:
        for method, found in methods.items():
            if method != BASELINE:
                found["vs_baseline"] = paired_columns(found["per_seed"], baseline["per_seed"], column_keys, CONFIDENCE)
    low, high = window_of(config.steps)
    extra = {} if config.evaluation != "exact" else {**exact_verdicts(config, runs, methods), **completion_summary(config, runs, final_heldout),
                                                     "calibration": seed_calibrations(config)}
    extra["mechanisms"] = mechanism_summary(config, runs, records)
    extra["clipping"] = checks.clipping(config, runs, records)
    if config.evaluation == "exact":
        primary = extra["contrasts"]["primary"]
        extra.update(lengths=checks.lengths(config), twice=checks.twice(config), power=checks.power_of(primary),
                     lr_sensitivity=checks.lr_sensitivity(config, primary, summarize))
    return {
        **extra,
        "protocol": deviation_table(config),
        "format": FORMAT,
        "study": config.as_dict(),
        "published_from": published_from,
        "task": {"name": task.name, "description": task.description, "train_problems": len(task.train_problems),
                 "heldout_problems": len(task.heldout_problems), "seen_problems": len(task.seen_problems()),
                 **({"parts": list(task.part_names)} if isinstance(task, tasks.Mixture) else {})},
        "report_commit": source_commit(),
        "run_commits": sorted({f"{run.get('commit')}{' (modified)' if run.get('modified') else ''}" for run in runs.values()}),
        "baseline": BASELINE if baseline is not None else None,
        "confidence": CONFIDENCE,
        "window": {"from_step": low, "to_step": high},
        "columns": [{"key": c.key, "label": c.label, "description": c.description, "reads": c.reads() if c.split is None else None}
                    for c in columns],
        "wall_time_s": round(sum(run["seconds"] for run in runs.values()), 1),
        **({"invocations": invocations} if (invocations := read_invocations(config.out)) else {}),
        "runs": runs,
        "not_finished": not_finished,
        "methods": methods,
    }


def completion_summary(config: StudyConfig, runs: dict, final_heldout: dict[str, dict]) -> dict:
    """evaluation="exact": {completions: method -> stat -> summary over seeds, of the final models on the held-out
    problems (``COMPLETION_STATS``; ``final_heldout``: run name -> its final evaluation's held-out result, as
    ``summarize`` read it), eval_cap, longest_response}; empty for evaluation files that predate the completion
    statistics."""
    per_method: dict[str, dict[str, dict]] = {}
    for name, run in runs.items():
        final = final_heldout[name]
        if not all(key in final for key in COMPLETION_STATS):
            return {}
        per_method.setdefault(run["method"], {})[str(run["seed"])] = {key: float(final[key]) for key in COMPLETION_STATS}
    return {"completions": {method: columns_over_seeds(per_seed, tuple(COMPLETION_STATS)) for method, per_seed in per_method.items()},
            "eval_cap": config.eval_max_new_tokens, "longest_response": config.longest_response()}


def sampling_se(per_problem: Sequence[float]) -> Optional[float]:
    """The sampling standard error of an evaluation's mean over problems: per-problem SD / sqrt(n) (what
    re-drawing the per-problem noise would move it by; the same weights and seed always give the same mean)."""
    return statistics.stdev(per_problem) / math.sqrt(len(per_problem)) if len(per_problem) > 1 else None


# Did each method's own mechanism move within the study's steps? Per method, the metrics that show it, where
# its runs log them: each estimator's own, as it declares them (a ``Metric`` with a ``label``: GEPO's thresholds
# and the shares of advantages it attenuated; EDA's entropy ratios, how far it rescales, and, in its gradient
# form, the entropy term's share of the loss gradient), then GEC's corrections and the policy's probability of
# the tokens it injected (does the policy come to write them?).
GEC_MECHANISM_METRICS = {
    "edge_verl/gec/corrected": "GEC responses corrected (a step's count)",
    "edge_verl/gec/regenerate_became_correct": "GEC regenerations that became correct (a step's count)",
    "edge_verl/gec/old_prob_injected_mean": "policy's mean probability of the injected tokens",
    "actor/gec/sampled/grad_share": "GEC: the sampled tokens' share of the gradient",
}


def mechanism_metrics() -> dict[str, str]:
    """metric -> its label in the table: every estimator's declared metrics with a label, then GEC's."""
    return {**{key: metric.label for key, metric in declared_metrics() if metric.label}, **GEC_MECHANISM_METRICS}


def mechanism_summary(config: StudyConfig, runs: dict, records: dict[str, list[dict]]) -> dict:
    """method -> metric -> {first, last, mean}: over the method's seeds, the mean of the metric at step 1, at
    the last step and over all steps (``mechanism_metrics()`` its runs log at every step)."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    metrics = mechanism_metrics()
    for method in config.methods:
        names = [name for name in runs if runs[name]["method"] == method]
        for metric in metrics:
            series = [[float(row[metric]) for row in trained_steps(records[name]) if row.get(metric) is not None] for name in names]
            if not names or any(len(one) != config.steps for one in series):
                continue
            found.setdefault(method, {})[metric] = {"first": statistics.fmean(one[0] for one in series),
                                                    "last": statistics.fmean(one[-1] for one in series),
                                                    "mean": statistics.fmean(statistics.fmean(one) for one in series)}
    return found


def _mechanism_lines(report: dict) -> list[str]:
    """The table of ``mechanism_summary``."""
    found = report.get("mechanisms") or {}
    labels = mechanism_metrics()
    rows = [[method, labels[metric], f"{values['first']:.3f}", f"{values['last']:.3f}", f"{values['mean']:.3f}"]
            for method, metrics in found.items() for metric, values in metrics.items()]
    return _table_section(
        "### Did each method's mechanism move?",
        "Per method, the statistics of its own mechanism (mean over seeds) at the first and the last step and over "
        "all steps: GEPO's thresholds and the shares it attenuated, EDA's entropy ratios and its entropy term's share "
        "of the gradient, GEC's corrections and the policy's probability of the tokens it injected.",
        ["method", "statistic", "step 1", "last step", "all steps"], rows)


def _table_section(title: str, text: str, header: list[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A section of the page: its title, a paragraph, a table and the blank line that ends it; none without rows."""
    return [title, "", text, "", *markdown_table(header, rows), ""] if rows else []


def seed_calibrations(config: StudyConfig) -> dict:
    """seed -> its warm start's ``CALIBRATION_FILE`` (study/calibrate.py), for the seeds that have one."""
    found = {}
    for seed in config.seeds:
        path = config.seed_model_folder(seed) / CALIBRATION_FILE
        if path.exists():
            found[str(seed)] = json.loads(path.read_text())
    return found


def _calibration_lines(report: dict) -> list[str]:
    """The table of each seed's warm start as GRPO's first step samples it (study/calibrate.py)."""
    found = report.get("calibration") or {}
    if not found:
        return []
    rows = []
    for seed, calibration in found.items():
        for part, measured in calibration["parts"].items():
            success = measured["regenerate_success"]
            rows.append([seed, part, f"{measured['p0']:.3f}", f"{measured['all_wrong_group_frac']:.2f}", f"{measured['reflected_frac']:.3f}",
                         "-" if success is None else f"{success:.3f}", str(measured["regenerated"])])
    config = next(iter(found.values()))["config"]
    return [f"Each seed's warm start as GRPO's first step samples it (`edge-verl study --calibrate`, stored per seed): "
            f"K={config['group_size']} samples at T={config['temperature']:g} on the first {config['problems']} training problems; "
            f"GEC's regenerate branch run on every wrong sample (the phrase, then up to {config['continuation_tokens']} tokens), "
            "graded by the reward (its last box).", "",
            *markdown_table(["seed", "task", "p0", "all-wrong groups", "reflects", "regenerate success", "wrong samples regenerated"], rows), ""]


def exact_verdicts(config: StudyConfig, runs: dict, methods: dict) -> dict:
    """evaluation="exact": p0 per seed, the baseline gate and the contrasts of ``PRIMARY_METRIC``."""
    low, high = window_of(config.steps)
    p0 = {}
    for run in runs.values():
        p0.setdefault(str(run["seed"]), run["values"][GATE_SEEN_START])
    baseline = methods.get(BASELINE, {"per_seed": {}})["per_seed"]
    reward_start, reward_final = {}, {}
    for run in runs.values():
        if run["method"] == BASELINE and run["reward_first_step"] is not None and "reward_sampled" in run["values"]:
            reward_start[str(run["seed"])] = run["reward_first_step"]
            reward_final[str(run["seed"])] = run["values"]["reward_sampled"]
    gate = baseline_gate({seed: v[GATE_SEEN_START] for seed, v in baseline.items()}, {seed: v[GATE_SEEN] for seed, v in baseline.items()},
                         reward_start, reward_final)
    values = {method: {seed: v[PRIMARY_METRIC] for seed, v in found["per_seed"].items() if PRIMARY_METRIC in v} for method, found in methods.items()}
    found = contrasts(values, list(methods), CONFIDENCE)
    for entry in found["primary"] + found["further"]:
        judge(entry, gate)
    errors = [run["heldout_sampled_se"] for run in runs.values() if run.get("heldout_sampled_se") is not None]
    task = tasks.get_task(config.task)
    parts = {"parts": part_summary(task, list(methods), runs, CONFIDENCE, gate)} if isinstance(task, tasks.Mixture) else {}
    return {"p0": p0, "gate": {**gate.as_dict(), "margin": GATE_MARGIN, "reward_window": [low, high]},
            "primary_metric": PRIMARY_METRIC, "contrasts": found, "heldout_sampled_se_max": max(errors, default=None), **parts}


# --- markdown ------------------------------------------------------------------------------------------------

_BY_KEY = {column.key: column for column in COLUMNS + EXACT_COLUMNS}


def _cell(entry: Optional[dict], digits: int) -> str:
    if entry is None:
        return "-"
    return f"{entry['mean']:.{digits}f}" + (f" ± {entry['std']:.{digits}f}" if entry["n"] > 1 else "")


# What a study's default evaluation cap and temperature follow from.
_DERIVED_FROM = ("task", "methods", "seeds", "prompts_per_step", "responses_per_prompt", "continuation_tokens", "temperature",
                 "updates_per_step")


def command_of(study: dict, out: Optional[str] = None) -> str:
    """The ``edge-verl study`` command that regenerates a report (its options as recorded; ``out``: another
    output folder)."""
    defaults = StudyConfig()
    study = {**LEGACY_PROTOCOL, **study}  # recorded before the protocol was an option: it ran the legacy one
    parts = ["edge-verl study"]
    for name, flag in (("task", "--task"), ("steps", "--steps"), ("test_freq", "--test-freq"), ("val_samples", "--val-samples"),
                       ("val_temperature", "--val-temperature"), ("prompts_per_step", "--prompts-per-step"),
                       ("responses_per_prompt", "--responses-per-prompt"), ("trainer", "--trainer"), ("evaluation", "--evaluation"),
                       ("eval_samples", "--eval-samples"), ("eval_seed", "--eval-seed"), ("loss_agg_mode", "--loss-agg-mode"),
                       ("temperature", "--temperature"), ("updates_per_step", "--updates-per-step"), ("lr", "--lr"),
                       ("lr_warmup_steps", "--lr-warmup-steps"), ("weight_decay", "--weight-decay"),
                       ("continuation_tokens", "--continuation-tokens")):
        if study.get(name, getattr(defaults, name)) != getattr(defaults, name):
            parts.append(f"{flag} {study[name]}")
    # the evaluation's cap and temperature follow the study's methods and temperature unless set
    derived = StudyConfig(**{key: value for key, value in study.items() if key in _DERIVED_FROM}) if study.get("task") else defaults
    for name, flag in (("eval_max_new_tokens", "--eval-max-new-tokens"), ("eval_temperature", "--eval-temperature")):
        if study.get(name) is not None and study[name] != getattr(derived, name):
            parts.append(f"{flag} {study[name]}")
    if tuple(study["methods"]) != defaults.methods:
        parts.append("--methods " + " ".join(study["methods"]))
    if tuple(study["seeds"]) != defaults.seeds:
        parts.append("--seeds " + " ".join(map(str, study["seeds"])))
    parts.append(f"--out {out if out is not None else study['out']}")
    parts += list(study["extra_overrides"])
    return " ".join(parts)


def report_markdown(report: dict) -> str:
    study, methods = report["study"], report["methods"]
    low, high = report["window"]["from_step"], report["window"]["to_step"]
    commit = ", ".join(report["run_commits"]) or "none"
    if report.get("published_from"):
        run = command_of(study, out=report["published_from"])
        regenerate = f"`{run}`, then `{run} --export <this folder>` (it recomputes this report from the copied files)"
    else:
        regenerate = f"`{command_of(study)}`"
    lines = [
        f"## Study: {report['task']['name']} — {len(study['methods'])} methods × {len(study['seeds'])} seeds × {study['steps']} steps",
        "",
        f"Task: {report['task']['description']}; {report['task']['train_problems']} training problems, "
        f"{report['task']['heldout_problems']} held out (never in the warm start or training), "
        f"{report['task']['seen_problems']} of the training problems validated as 'seen'. "
        + ("Evaluation: exact (below). " if study.get("evaluation", "verl") == "exact" else
           f"Validation: uncorrected, {study['val_samples']} samples per problem at temperature {study['val_temperature']:g}. ")
        + f"Trainer: verl's {study['trainer']}; "
        f"{study['prompts_per_step']} prompts x {study['responses_per_prompt']} responses per step.",
        f"Runs trained at commit {commit}; wall time of the runs {report['wall_time_s'] / 60:.1f} min"
        f"{invocations_text(report.get('invocations', []))}. Regenerate: {regenerate}.",
        "",
    ]
    baseline = report["baseline"]
    keys = [column["key"] for column in report["columns"]]
    if study.get("evaluation", "verl") == "exact":
        lines += _exact_headline(report)
        lines += _calibration_lines(report)
        lines += _completion_lines(report)
        lines += _mechanism_lines(report)
    else:
        lines += _verl_headline(report, low, high)
    lines += _protocol_lines(report)
    if report.get("parts"):
        lines += part_markdown(report)
    training = [key for key in keys if _BY_KEY[key].split is None]
    lines += ["### Training statistics (mean ± std over seeds)", ""]
    lines += markdown_table(["method", *(_BY_KEY[key].label for key in training)],
                            [[method, *(_cell(found["summary"].get(key), _BY_KEY[key].digits) for key in training)]
                             for method, found in methods.items()])
    compared = [(method, found) for method, found in methods.items() if found["vs_baseline"]]
    if compared:
        columns = [key for key in keys if any(key in found["vs_baseline"] for _, found in compared)]
        lines += ["", f"### Paired difference to {baseline}, every column (mean [95% interval over seeds])", ""]
        lines += markdown_table(["method", *(_BY_KEY[key].label for key in columns)],
                                [[method, *(difference_text(found["vs_baseline"].get(key), _BY_KEY[key].digits) for key in columns)]
                                 for method, found in compared])
    lines += _divergence_lines(report)
    lines += ["", *checks.markdown(report)]
    lines += _invocation_lines(report)
    lines += ["", "### Per seed", ""]
    per_seed = [[name, *(f"{run['values'][key]:.{_BY_KEY[key].digits}f}" if key in run["values"] else "-" for key in keys),
                 f"[metrics]({run['metrics_file']})"] for name, run in report["runs"].items()]
    lines += markdown_table(["run", *(_BY_KEY[key].label for key in keys), "file"], per_seed)
    lines += ["", "### Columns", ""]
    lines += [f"- **{c['label']}**: {c['description']}" + (f"; reads {c['reads']}" if c.get("reads") else "")
              for c in report["columns"]]
    if report["not_finished"]:
        lines += ["", "Not finished (left out): " + ", ".join(report["not_finished"]) + "."]
    lines += ["", "A ~90k-parameter model on a synthetic task, a few CPU steps: not the papers' setting (7B models, "
              "thousands of steps, math benchmarks). It tests whether the methods do what they claim to the "
              "training signal here, and reports what it finds."]
    return "\n".join(lines) + "\n"


def _protocol_lines(report: dict) -> list[str]:
    """The deviation table: every setting of the training protocol against EDGE-GRPO's reference."""
    rows = report.get("protocol") or []
    return _table_section(
        "### Protocol against EDGE-GRPO's reference (edge_verl_lab/study/protocol.py)",
        f"{sum(row['deviates'] for row in rows)} of {len(rows)} settings differ from the reference's; each run trained with the "
        "verl option and value shown (set in its command.txt, or verl's default there for a study recorded before the protocol was an option).",
        ["setting", "reference", "this study", "verl override", "why it differs"],
        [[row["setting"], row["reference"], row["study"], f"`{row['override']}`" if row["override"] else "-",
          row["reason"] if row["deviates"] else "(the reference's)"] for row in rows])


def _completion_lines(report: dict) -> list[str]:
    """evaluation="exact": what the final models write on the held-out problems, per method."""
    found = report.get("completions")
    if not found:
        return []
    return _table_section(
        "### What the final models write (held-out problems, mean ± std over seeds)",
        f"Graded as in training (the reward reads the LAST box) and by the first box alone; a 2nd box is an answer "
        f"after the first (a reflection); truncated: the {report['eval_cap']}-token cap reached without the end token "
        f"(the longest response any method trains on: {report['longest_response']} tokens).",
        ["method", *(label for label, _ in COMPLETION_STATS.values())],
        [[method, *(_cell(stats.get(key), digits) for key, (_, digits) in COMPLETION_STATS.items())] for method, stats in found.items()])


def _divergence_lines(report: dict) -> list[str]:
    """Which runs diverged, at which step and why, and each one's stability statistics step by step."""
    diverged = {name: run["diverged"] for name, run in report["runs"].items() if run.get("diverged")}
    rule = (f"a run diverges at the first step whose sampled entropy exceeds {DIVERGED_ENTROPY:g} nats per token, "
            f"whose |advantage| exceeds {DIVERGED_ADVANTAGE:g}, whose gradient norm before clipping exceeds {DIVERGED_GRAD_NORM:g}, "
            "or whose statistics are not finite")
    lines = ["", "### Diverged runs", ""]
    if not diverged:
        return lines + [f"None ({rule})."]
    lines += [f"{len(diverged)} of {len(report['runs'])} runs ({rule}):", ""]
    for name, found in diverged.items():
        lines += [f"**{name}** diverged at step {found['step']}: {found['why']}.", ""]
        labels = list(found["series"])
        steps = sorted({step for points in found["series"].values() for step, _ in points})
        values = {label: dict((step, value) for step, value in points) for label, points in found["series"].items()}
        lines += markdown_table(["step", *labels], [[str(step), *(f"{values[label][step]:.3g}" if step in values[label] else "-"
                                                               for label in labels)] for step in steps])
        lines += [""]
    return lines


def _invocation_lines(report: dict) -> list[str]:
    """Every invocation of ``edge-verl study`` that trained or evaluated this page's runs, in order."""
    return _table_section(
        "### Invocations",
        f"Every `edge-verl study` that trained or evaluated a run of this page ({INVOCATIONS_FILE}), in order; "
        "runs an invocation trained that the page does not hold are named with the reason.",
        ["#", "finished", "commit", "runs at a time", "minutes", "trained", "evaluated again", "discarded"],
        [[str(number), str(record.get("finished", "-")), f"{str(record.get('commit'))[:7]}{' (modified)' if record.get('modified') else ''}",
          str(record.get("jobs", "-")), f"{record['seconds'] / 60:.1f}", _runs_text(record.get("trained", [])),
          _runs_text(record.get("evaluated_again", [])),
          f"{_runs_text(discarded_runs(record))}: {record['discarded']}" if record.get("discarded") else "-"]
         for number, record in enumerate(report.get("invocations") or [], 1)])


def discarded_runs(record: dict) -> list[str]:
    """The runs an invocation trained that its study no longer holds (``discarded_runs``; all it trained when it
    names only the reason, ``discarded``)."""
    if not record.get("discarded"):
        return []
    return list(record.get("discarded_runs", record.get("trained", [])))


def _runs_text(names: Sequence[str]) -> str:
    """run names grouped by row: "grpo seeds 1-8, eda seeds 1-8"; "-" for none."""
    if not names:
        return "-"
    by_row: dict[str, list[int]] = {}
    for name in names:
        row, _, seed = name.rpartition("_seed")
        by_row.setdefault(row, []).append(int(seed))
    return ", ".join(f"{row} seed{'s' if len(seeds) > 1 else ''} {_seed_ranges(sorted(seeds))}" for row, seeds in by_row.items())


def _seed_ranges(seeds: list[int]) -> str:
    parts, start = [], seeds[0]
    for previous, current in zip(seeds, seeds[1:] + [None]):
        if current != previous + 1:
            parts.append(f"{start}" if start == previous else f"{start}-{previous}")
            start = current
    return " ".join(parts)


def _verl_headline(report: dict, low: int, high: int) -> list[str]:
    methods, baseline = report["methods"], report["baseline"]
    lines = []
    head = []
    for method, found in methods.items():
        cells = [method, str(max((e["n"] for e in found["summary"].values()), default=0))]
        for key in HEADLINE:
            cells.append(_cell(found["summary"].get(key), 3))
            cells.append("(baseline)" if method == baseline else difference_text(found["vs_baseline"].get(key), 3))
        cells += [_cell(found["summary"].get("heldout_acc_start"), 3), _cell(found["summary"].get("reward_sampled"), 3)]
        head.append(cells)
    lines += markdown_table(
        ["method", "seeds", "held-out acc", f"Δ vs {baseline} [95% CI]", "seen acc", f"Δ vs {baseline} [95% CI]",
         "held-out acc @0", "reward (sampled)"], head)
    lines += ["", f"Accuracy after the last step (mean ± sample std over seeds). Δ: paired by seed (same model, warm start "
              f"and data order), mean [95% interval, Student t, df = n − 1]. Training statistics: mean over steps {low}-{high}.", ""]
    return lines




def _exact_headline(report: dict) -> list[str]:
    """evaluation="exact": p0 per seed, the gate, the named contrasts with their MDD, the further ones (Holm)."""
    methods, baseline, gate = report["methods"], report["baseline"], report["gate"]
    evaluation = report["study"]
    lines = [f"Evaluation: offline on the final weights and the step-0 model, identical for every method: greedy, gold-answer "
             f"probability, {evaluation['eval_samples']} samples per problem at T={evaluation.get('eval_temperature', 1.0):g} seeded per problem "
             f"(seed {evaluation['eval_seed']}), "
             f"every completion capped at {evaluation['eval_max_new_tokens']} tokens.", "",
             "p0 (step-0 seen accuracy, sampled) per seed: " + ", ".join(f"seed {seed} {value:.3f}" for seed, value in report["p0"].items()) + ".", "",
             *([f"Evaluation noise: the sampling SE of a run's held-out sampled accuracy (per-problem SD / √n) is at most "
                f"{report['heldout_sampled_se_max']:.4f}; two evaluations of one checkpoint are identical.", ""]
               if report.get("heldout_sampled_se_max") is not None else []),
             f"**Baseline gate: {'passed' if gate['passed'] else 'FAILED'}**: {gate['reason']}."]
    if not gate["passed"]:
        lines += ["", "The baseline did not learn, so the comparison is uninformative: the numbers below are printed, no verdicts."]
    lines += [""]
    head = []
    for method, found in methods.items():
        cells = [method, str(max((e["n"] for e in found["summary"].values()), default=0))]
        for key in ("heldout_sampled", "heldout_greedy", "heldout_gold_prob", "seen_sampled"):
            cells.append(_cell(found["summary"].get(key), 3))
        cells.append(_cell(found["summary"].get("reward_sampled"), 3))
        head.append(cells)
    lines += markdown_table(["method", "seeds", "held-out sampled", "held-out greedy", "held-out gold prob", "seen sampled",
                             "reward (sampled)"], head)
    metric = _BY_KEY[report["primary_metric"]].label
    lines += ["", f"### Primary contrasts (named in advance), {metric}", ""]
    lines += markdown_table(CONTRAST_HEADER, [contrast_cells(entry) for entry in report["contrasts"]["primary"]])
    if report["contrasts"]["further"]:
        lines += ["", f"### Further contrasts against {baseline}", ""]
        lines += markdown_table(CONTRAST_HEADER, [contrast_cells(entry) for entry in report["contrasts"]["further"]])
    lines += ["", "MDD: the smallest true difference a paired t-test at 5% detects with 80% power, from the observed paired SD and n. "
              "p (Holm): adjusted within its family (the primary contrasts; the further ones), and what the verdict reads. "
              "Sign test: exact, two-sided, over the seeds that differ.", ""]
    return lines


# --- curves --------------------------------------------------------------------------------------------------

CURVES = ("heldout_acc", "seen_acc", "reward_sampled", "entropy_sampled", "adv_var_sampled", "adv_var_after", "all_wrong_groups",
          "response_length")


def curves_of(config: StudyConfig, report: dict, records: dict[str, list[dict]]) -> dict:
    """column -> method -> {step: [value per seed]}: validation accuracies at every validation, training
    columns at every training step, each run's column read from the metric its report used (``records``:
    the runs' metrics, ``finished_records``)."""
    task = tasks.get_task(config.task)
    curves: dict[str, dict[str, dict[int, list[float]]]] = {key: {} for key in CURVES}
    for name, run in report["runs"].items():
        for key in CURVES:
            column = _BY_KEY[key]
            if column.split is not None and isinstance(task, tasks.Mixture):
                continue  # no verl validation (study/mixture.py: the exact evaluation per part)
            if column.split is not None:
                series = validation_points(records[name], task.validation_source(column.split))
            elif key in run["sources"]:
                metric = run["sources"][key]
                series = [(r["step"], float(r[metric])) for r in trained_steps(records[name]) if r.get(metric) is not None]
            else:
                continue
            by_step = curves[key].setdefault(run["method"], {})
            for step, value in series:
                by_step.setdefault(step, []).append(value)
    return curves


def write_report(config: StudyConfig, published_from: Optional[str] = None) -> dict:
    """``report.json``, ``report.md`` and ``curves.png`` in ``config.out``; returns the report."""
    records = finished_records(config)  # each metrics file read once, for the numbers and the curves
    report = summarize(config, published_from, records)
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (config.out / "report.md").write_text(report_markdown(report))
    if report["runs"]:
        titles = {key: f"{_BY_KEY[key].label}" for key in CURVES}
        plot(curves_of(config, report, records), config.out / "curves.png", titles=titles, columns=4)
    return report


# What a published study keeps of each run: enough to recompute every number of its report (not the model,
# data or verl's full log).
EXPORTED_FILES = ("metrics.jsonl", IDENTITY_FILE, DONE_FILE, "command.txt", EVAL_FILE)


def export(config: StudyConfig, destination: Path) -> dict:
    """Copy the finished runs' ``EXPORTED_FILES`` to ``destination/runs/<run>/`` and write the report there,
    recomputed from the copies (so the published numbers are the ones its files give). Returns the report."""
    destination = Path(destination)
    if destination.resolve() == config.out.resolve():
        raise ValueError(f"--export {destination}: that is the study's own folder")
    moved = StudyConfig.from_dict(config.as_dict(), out=destination)
    for method, seed, state in plan(config):
        if state != "done":
            continue
        target = moved.run_folder(method, seed)
        target.mkdir(parents=True, exist_ok=True)
        for name in (*EXPORTED_FILES, *(eval_file(length) for length in config.own_lengths())):
            source = config.run_folder(method, seed) / name
            if source.exists():
                shutil.copyfile(source, target / name)
    for seed in config.seeds:  # exact evaluation: each seed's step-0 evaluations and calibration (not its model)
        for name in (EVAL_FILE, CALIBRATION_FILE, *(eval_file(length) for length in config.own_lengths())):
            source = config.seed_model_folder(seed) / name
            if source.exists():
                moved.seed_model_folder(seed).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, moved.seed_model_folder(seed) / name)
    if (config.out / INVOCATIONS_FILE).exists():
        destination.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(config.out / INVOCATIONS_FILE, destination / INVOCATIONS_FILE)
    plan(moved)  # the copies are the same runs
    for sub in [*checks.sub_studies(config, checks.TWICE_FOLDER, nested=False), *checks.sub_studies(config, checks.LR_FOLDER)]:
        export(sub, destination / sub.out.relative_to(config.out))  # the trained-twice and other-lr studies beside it
    return write_report(moved, published_from=str(config.out))
