"""The papers' tables as data: which recipe (per backend), model and training set each row runs, any Hydra
overrides appended after the recipe's name, the row each row is compared with, and the numbers the paper
reports for it (pass@1 %, EDGE_GRPO.md section 4). Also GEPO's sensitivity sweep (one coefficient at a
time around the paper's values) as a table whose rows are grid points. No verl (and no torch) import:
the grid is validated with edge_verl.estimators.gepo.GepoConfig on demand (``Sweep.check``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

from edge_verl.data import PAPER_EVAL
from edge_verl.estimators.base import ESTIMATORS
from edge_verl.methods import Method, get_method

BENCHMARK_COLUMNS = ("Avg", *PAPER_EVAL)
BACKENDS = ("fsdp", "megatron")
# Per-step curves, one panel each, one line per row (mean ± std over its seeds): what the papers plot
# (EDGE-GRPO Fig. 4/5: entropy, advantage variance), the reward, and the stability of EDA's rescaling (the
# spread of |advantage| and of the entropy ratio P_hat, the gradient norm, GEC's sampled-only advantage
# variance). A key a run did not log (GRPO has no edge_eda/*) is skipped for that run; a panel no run logged
# says so.
CURVES = {
    "actor/entropy": "policy entropy (actor/entropy)",
    "edge_verl/adv/var": "advantage variance (edge_verl/adv/var)",
    "critic/score/mean": "training reward (critic/score/mean)",
    "edge_verl/edge_eda/abs_adv_p1": "EDA |advantage| p1",
    "edge_verl/edge_eda/abs_adv_p50": "EDA |advantage| p50",
    "edge_verl/edge_eda/abs_adv_p99": "EDA |advantage| p99",
    "edge_verl/edge_eda/entropy_ratio_p1": "EDA entropy ratio p1",
    "edge_verl/edge_eda/entropy_ratio_p50": "EDA entropy ratio p50",
    "edge_verl/edge_eda/entropy_ratio_p99": "EDA entropy ratio p99",
    "actor/grad_norm": "gradient norm (actor/grad_norm)",
    "edge_verl/gec/sampled/adv_var": "advantage variance, sampled responses only (GEC)",
}


def _paper(avg: float, *per_benchmark: float) -> dict[str, float]:
    return dict(zip(BENCHMARK_COLUMNS, (avg, *per_benchmark)))


@dataclass(frozen=True)
class Row:
    """One row: ``recipes`` maps a backend to the recipe file that trains it ({} for a base-model row,
    which is evaluated only); ``method`` is the method those recipes run (their METHOD, edge_verl/methods.py;
    None for a base-model row); ``models`` maps a backend to the model it runs (passed as MODEL_PATH, so the
    table, not a recipe default, says which model each backend runs); ``size`` is the model size a user
    names in ``--model SIZE=PATH``; ``train_set`` names the prepared set ``train_<set>.parquet``, read in
    the variant the method trains on (``train_<set>_gec.parquet`` for a GEC method); ``paper`` holds the
    reported pass@1 (%) by column; ``overrides``: Hydra overrides appended after the recipe's name (the
    recipes end with "$@"), part of the run's identity (a sensitivity grid point)."""

    key: str
    label: str
    models: Mapping[str, str]
    recipes: Mapping[str, str] = field(default_factory=dict)
    method: Optional[str] = None
    train_set: Optional[str] = None
    paper: Mapping[str, float] = field(default_factory=dict)
    size: Optional[str] = None
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        missing = set(self.recipes) - set(self.models)
        if missing:
            raise ValueError(f"row {self.key}: recipes for {sorted(missing)} but no model")
        if (self.method is not None) != self.trains:
            raise ValueError(f"row {self.key}: a row with recipes names their method, a base-model row none")
        if self.method is not None:
            get_method(self.method)  # a defined method, or an error naming the defined ones
        if self.overrides and not self.trains:
            raise ValueError(f"row {self.key}: overrides {list(self.overrides)} but no recipe to pass them to")

    @property
    def trains(self) -> bool:
        return bool(self.recipes)

    def model(self, backend: str) -> str:
        if backend not in self.models:
            raise ValueError(f"row {self.key} has no model for backend {backend} (has {sorted(self.models)})")
        return self.models[backend]

    @property
    def definition(self) -> Method:
        """The definition of the method the row trains (a training row only)."""
        if self.method is None:
            raise ValueError(f"row {self.key} trains nothing: it has no method")
        return get_method(self.method)

    @property
    def supervised(self) -> bool:
        """Trains with verl's SFT trainer (a method without an advantage estimator)."""
        return self.trains and self.definition.estimator is None

    def train_file(self, data_dir: Path) -> Path:
        """The prepared file the row trains on: ``sft_<set>.parquet`` (the reference solutions as messages,
        scripts/prepare_data.py) for SFT, else ``train_<set>.parquet`` in its method's variant."""
        if self.supervised:
            return Path(data_dir) / f"sft_{self.train_set}.parquet"
        return self.definition.train_file(Path(data_dir) / f"train_{self.train_set}.parquet")


# Default grid per coefficient of GEPO's sensitivity table, the paper's value in the middle: alphas in steps of 0.1
# on the side that keeps alpha_high < alpha_low (GepoConfig refuses the other); betas from 0 (thresholds at the
# batch mean) to 4x; gamma over two decades (EMA time constants 1000 to 10 steps).
GEPO_DEFAULT_GRID = {
    "alpha_low": (0.3, 0.4, 0.5, 0.6, 0.8),
    "alpha_high": (0.0, 0.1, 0.2, 0.3, 0.4),
    "beta_low": (0.0, 0.1, 0.2, 0.4, 0.8),
    "beta_high": (0.0, 0.15, 0.3, 0.6, 1.2),
    "gamma": (0.001, 0.003, 0.01, 0.03, 0.1),
}
SWEEP_CENTRE_ROW = "paper"


def estimator_defaults(estimator: str, names: Sequence[str]) -> dict[str, float]:
    """The defaults of ``names`` among ``estimator``'s options, read from its options class (the paper's values)."""
    options = ESTIMATORS[estimator].options(None)
    return {name: float(getattr(options, name)) for name in names}


# The sweep's centre: the paper's values of the coefficients (GepoConfig's defaults, GEPO.md "Defaults").
GEPO_PAPER = estimator_defaults("gepo", tuple(GEPO_DEFAULT_GRID))


@dataclass(frozen=True)
class Sweep:
    """One coefficient at a time around ``centre`` (coefficient -> value): ``points`` maps a coefficient to
    its (value, row key) pairs sorted by value; the centre's value is the row ``centre_row``, run once and
    shared by every coefficient."""

    centre: Mapping[str, float]
    centre_row: str
    points: Mapping[str, tuple[tuple[float, str], ...]]

    def check(self) -> None:
        """Every grid point is a valid GepoConfig (the centre with one coefficient replaced), else a
        ValueError naming the point and GepoConfig's reason."""
        from edge_verl.estimators.gepo import GepoConfig

        for coefficient, points in self.points.items():
            for value, _ in points:
                try:
                    GepoConfig(**{**self.centre, coefficient: value})
                except ValueError as error:
                    raise ValueError(f"sensitivity grid point {coefficient}={value!r} is invalid: {error}") from error


@dataclass(frozen=True)
class Table:
    """``baseline``: the row key every other training row is compared with (paired by seed); None: the
    row of the same model size that runs method grpo."""

    key: str
    title: str
    rows: tuple[Row, ...]
    note: str = ""
    baseline: Optional[str] = None
    sweep: Optional[Sweep] = None

    @property
    def train_sets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(row.train_set for row in self.rows if row.trains))

    def row(self, key: str) -> Row:
        for row in self.rows:
            if row.key == key:
                return row
        raise KeyError(f"table {self.key} has no row {key!r}; rows: {[row.key for row in self.rows]}")

    def baseline_of(self, row: Row, rows: Sequence[Row]) -> Optional[Row]:
        """The row among ``rows`` that ``row`` is compared with: the table's baseline row, else the GRPO row
        of the same size; None for a base-model row, the baseline itself, or a baseline not among ``rows``."""
        if not row.trains:
            return None
        for other in rows:
            chosen = other.key == self.baseline if self.baseline else (other.method == "grpo" and other.size == row.size)
            if chosen and other.key != row.key and other.trains:
                return other
        return None


MATH_1_5B = "Qwen/Qwen2.5-Math-1.5B"
MATH_7B = "Qwen/Qwen2.5-Math-7B"
EDGE_RECIPES = {size: {b: f"run_edge_qwen2.5-math-{size}_{b}.sh" for b in BACKENDS} for size in ("1.5b", "7b")}
GRPO_EDGE_KNOBS = {b: f"run_grpo_qwen2.5-math-7b_{b}.sh" for b in BACKENDS}  # MODEL_PATH picks the size
# GEPO's table runs Qwen2.5-7B with the FSDP recipes and Qwen3.5-9B with the Megatron ones (the recipes' own
# models); a user who wants one model on both backends passes --model.
GEPO_MODELS = {"fsdp": "Qwen/Qwen2.5-7B", "megatron": "Qwen/Qwen3.5-9B"}
GEPO_RECIPES = {"fsdp": "run_gepo_qwen7b.sh", "megatron": "run_gepo_qwen3.5-9b_megatron.sh"}

# EDGE-GRPO's reported numbers by training set and row (EDGE_GRPO.md section 4); "+ Force-R & EDA" from the
# paper's ablation table, which reports only its Avg (EDGE_GRPO.md gives no other ablation number).
EDGE_PAPER: dict[str, dict[str, dict[str, float]]] = {
    "random_1k": {
        "base_1.5b": {"Avg": 25.71}, "base_7b": {"Avg": 29.04}, "forcer_eda_7b": {"Avg": 45.71},
        "grpo_1.5b": _paper(40.32, 13.33, 39.76, 65.60, 19.49, 31.26), "edge_1.5b": _paper(48.08, 13.33, 44.58, 76.40, 28.68, 36.89),
        "grpo_7b": _paper(46.47, 23.33, 55.42, 72.40, 27.94, 34.67), "edge_7b": _paper(49.30, 16.67, 50.60, 75.60, 33.09, 37.04),
    },
    "hard_1k": {
        "base_1.5b": {"Avg": 25.71}, "base_7b": {"Avg": 29.04}, "forcer_eda_7b": {"Avg": 45.19},
        "grpo_1.5b": _paper(40.26, 10.00, 46.99, 65.00, 20.59, 30.37), "edge_1.5b": _paper(47.24, 10.00, 44.58, 73.20, 29.04, 37.33),
        "grpo_7b": _paper(47.69, 26.67, 53.01, 74.20, 25.74, 37.19), "edge_7b": _paper(53.21, 16.67, 53.01, 79.00, 36.03, 42.67),
    },
}
EDGE_NOTE = (
    "EDGE-GRPO (arXiv 2507.21848): G = 8, 1 prompt per step, 1000 steps, one sample per problem at T = 0.1, "
    "max 3000 new tokens; Avg = problem-weighted mean over the 1560 problems. The paper reports single seeds."
)


def _every_backend(model: str) -> dict[str, str]:
    return {backend: model for backend in BACKENDS}


def _edge_table(key: str, title: str, train_set: str) -> Table:
    numbers = EDGE_PAPER[train_set]
    rows = []
    for size, model in (("1.5b", MATH_1_5B), ("7b", MATH_7B)):
        models = _every_backend(model)
        rows += [
            Row(f"base_{size}", f"{model} (base)", models, paper=numbers[f"base_{size}"], size=size),
            Row(f"grpo_{size}", f"GRPO {size.upper()}", models, GRPO_EDGE_KNOBS, "grpo", train_set,
                paper=numbers[f"grpo_{size}"], size=size),
            Row(f"edge_{size}", f"EDGE-GRPO {size.upper()}", models, EDGE_RECIPES[size], "edge", train_set,
                paper=numbers[f"edge_{size}"], size=size),
        ]
    return Table(key, title, tuple(rows), EDGE_NOTE + " Base-model rows report only Avg.")


# EDGE-GRPO's ablations and the reviewers' controls on 7B: (method, label). Each method's 7B recipe is
# run_<method with hyphens>_qwen2.5-math-7b_<backend>.sh; SFT (verl's SFT trainer) has an FSDP recipe only.
ABLATIONS = (
    ("grpo", "GRPO"),
    ("gec", "+ GEC only (GRPO advantages)"),
    ("forcer", "+ Force-R (GRPO advantages)"),
    ("eda", "+ EDA only"),
    ("forcer_eda", "+ Force-R & EDA"),
    ("edge", "EDGE-GRPO (EDA + GEC)"),
    ("sft", "SFT on the reference solutions"),
    ("edge_masked", "control: EDGE, injected tokens masked"),
    ("edge_sft_injected", "control: EDGE, injected tokens by NLL"),
    ("edge_placebo", "control: EDGE, placebo answers"),
    ("edge_drop_first", "control: EDGE, first attempt dropped"),
)
FSDP_ONLY_METHODS = ("sft",)


def _ablation_recipes(method: str) -> dict[str, str]:
    backends = ("fsdp",) if method in FSDP_ONLY_METHODS else BACKENDS
    return {b: f"run_{method.replace('_', '-')}_qwen2.5-math-7b_{b}.sh" for b in backends}


def _ablation_table(key: str, title: str, train_set: str) -> Table:
    numbers = EDGE_PAPER[train_set]
    models = _every_backend(MATH_7B)
    rows = tuple(
        Row(f"{method}_7b", label, models, _ablation_recipes(method), method, train_set,
            paper=numbers.get(f"{method}_7b", {}), size="7b")
        for method, label in ABLATIONS
    )
    note = EDGE_NOTE + (
        " Paper numbers: GRPO and EDGE-GRPO from the main tables, '+ Force-R & EDA' from the ablation table (Avg "
        "only); the other ablations' numbers are not given in this project's spec, and the controls (reviewers' "
        "questions, not in the paper) have none: —. SFT has an FSDP recipe only."
    )
    return Table(key, title, rows, note)


def _number_text(value: float) -> str:
    """A grid value as it appears in a row key and an override: the shortest text that reads back the same."""
    return repr(float(value))


def gepo_sensitivity_table(grid: Optional[Mapping[str, Sequence[float]]] = None, check: bool = True) -> Table:
    """GEPO's sensitivity sweep as a table: the paper's point (row ``paper``, run once) and, for each
    coefficient in ``grid`` (default ``GEPO_DEFAULT_GRID``), one row per other value, running the GEPO
    recipes with ``+algorithm.gepo.<coefficient>=<value>`` appended. Values are deduplicated; a value equal to
    the paper's is the paper's row. Raises on an unknown coefficient, a non-finite value or (``check``) a
    grid point GepoConfig refuses (``Sweep.check``), naming it."""
    grid = GEPO_DEFAULT_GRID if grid is None else grid
    unknown = sorted(set(grid) - set(GEPO_PAPER))
    if unknown or not grid:
        raise ValueError(f"sensitivity coefficients {unknown or '(none)'}; choose from {list(GEPO_PAPER)}")
    rows = [Row(SWEEP_CENTRE_ROW, "GEPO, paper's point", GEPO_MODELS, GEPO_RECIPES, "gepo", "random_1k")]
    points: dict[str, tuple[tuple[float, str], ...]] = {}
    for coefficient, values in grid.items():
        numbers = []
        for value in values:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"sensitivity grid point {coefficient}={value!r} is not a finite number")
            numbers.append(float(value))
        chosen = sorted(set(numbers) | {GEPO_PAPER[coefficient]})
        pairs = []
        for value in chosen:
            if value == GEPO_PAPER[coefficient]:
                pairs.append((value, SWEEP_CENTRE_ROW))
                continue
            key = f"{coefficient}_{_number_text(value)}"
            rows.append(Row(key, f"GEPO {coefficient} = {value:g}", GEPO_MODELS, GEPO_RECIPES, "gepo", "random_1k",
                            overrides=(f"+algorithm.gepo.{coefficient}={_number_text(value)}",)))
            pairs.append((value, key))
        points[coefficient] = tuple(pairs)
    sweep = Sweep(dict(GEPO_PAPER), SWEEP_CENTRE_ROW, points)
    if check:
        sweep.check()
    paper = ", ".join(f"{name} {value:g}" for name, value in GEPO_PAPER.items())
    note = (
        f"GEPO sensitivity: one coefficient at a time around the paper's point ({paper}), every other knob as in gepo_math "
        "(K = 16, 32 prompts per step, 300 steps, Random-1K); held-out pass@1 of each run's final checkpoint on "
        "the math suite. Δ: paired over seeds against the paper's point."
    )
    return Table("gepo_sensitivity", "GEPO sensitivity (one coefficient at a time)", tuple(rows), note,
                 baseline=SWEEP_CENTRE_ROW, sweep=sweep)


TABLES: dict[str, Table] = {
    "edge_random_1k": _edge_table("edge_random_1k", "EDGE-GRPO Table 1 (Random-1K)", "random_1k"),
    "edge_hard_1k": _edge_table("edge_hard_1k", "EDGE-GRPO Table 2 (Hard-1K)", "hard_1k"),
    "edge_ablation_random_1k": _ablation_table(
        "edge_ablation_random_1k", "EDGE-GRPO ablations and controls, 7B (Random-1K)", "random_1k"
    ),
    "edge_ablation_hard_1k": _ablation_table(
        "edge_ablation_hard_1k", "EDGE-GRPO ablations and controls, 7B (Hard-1K)", "hard_1k"
    ),
    "gepo_math": Table(
        "gepo_math",
        "GEPO vs GRPO vs Clip-Cov vs KL-Cov (math, GEPO's knobs)",
        tuple(
            Row(
                method,
                label,
                GEPO_MODELS,  # GEPO's two models: one per backend's recipes
                {"fsdp": f"run_{method}_qwen7b.sh", "megatron": f"run_{method}_qwen3.5-9b_megatron.sh"},
                method,
                "random_1k",
            )
            for method, label in (("grpo", "GRPO"), ("gepo", "GEPO"), ("clipcov", "Clip-Cov"), ("klcov", "KL-Cov"))
        ),
        "GEPO (arXiv 2607.16850) reports averages over 13 benchmarks (math, physics, science, code, instruction "
        "following) that are not available here: 54.2 (GEPO) vs 51.5 (GRPO) on one model, 71.2 (GEPO) vs 70.9 "
        "(Clip-Cov) vs 70.7 (GRPO) on the other. This table compares the methods on the math suite with K = 16, "
        "32 prompts per step, 300 steps; it reproduces the comparison, not the paper's numbers.",
    ),
}
# The default grid; `edge-verl reproduce gepo_sensitivity --vary NAME[=V,...]` builds another. Built without
# GepoConfig's import (torch) at import time; Settings checks the sweep before anything runs.
TABLES["gepo_sensitivity"] = gepo_sensitivity_table(check=False)
