"""The papers' tables as data: which recipe (per backend), model and training set each row runs, and the
numbers the paper reports for it (pass@1 %, EDGE_GRPO.md section 4). No verl import."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

from edge_verl.data import PAPER_EVAL
from edge_verl.methods import Method, get_method

BENCHMARK_COLUMNS = ("Avg", *PAPER_EVAL)
BACKENDS = ("fsdp", "megatron")
# Per-step curves the papers plot (EDGE-GRPO Fig. 4/5: entropy, advantage variance), plus the reward.
CURVES = {
    "actor/entropy": "policy entropy (actor/entropy)",
    "edge_verl/adv/var": "advantage variance (edge_verl/adv/var)",
    "critic/score/mean": "training reward (critic/score/mean)",
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
    reported pass@1 (%) by column."""

    key: str
    label: str
    models: Mapping[str, str]
    recipes: Mapping[str, str] = field(default_factory=dict)
    method: Optional[str] = None
    train_set: Optional[str] = None
    paper: Mapping[str, float] = field(default_factory=dict)
    size: Optional[str] = None

    def __post_init__(self) -> None:
        missing = set(self.recipes) - set(self.models)
        if missing:
            raise ValueError(f"row {self.key}: recipes for {sorted(missing)} but no model")
        if (self.method is not None) != self.trains:
            raise ValueError(f"row {self.key}: a row with recipes names their method, a base-model row none")
        if self.method is not None:
            get_method(self.method)  # a defined method, or an error naming the defined ones

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

    def train_file(self, data_dir: Path) -> Path:
        return self.definition.train_file(Path(data_dir) / f"train_{self.train_set}.parquet")


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    rows: tuple[Row, ...]
    note: str = ""

    @property
    def train_sets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(row.train_set for row in self.rows if row.trains))

    def row(self, key: str) -> Row:
        for row in self.rows:
            if row.key == key:
                return row
        raise KeyError(f"table {self.key} has no row {key!r}; rows: {[row.key for row in self.rows]}")


MATH_1_5B = "Qwen/Qwen2.5-Math-1.5B"
MATH_7B = "Qwen/Qwen2.5-Math-7B"
EDGE_RECIPES = {size: {b: f"run_edge_qwen2.5-math-{size}_{b}.sh" for b in BACKENDS} for size in ("1.5b", "7b")}
GRPO_EDGE_KNOBS = {b: f"run_grpo_qwen2.5-math-7b_{b}.sh" for b in BACKENDS}  # MODEL_PATH picks the size
# GEPO's table runs Qwen2.5-7B with the FSDP recipes and Qwen3.5-9B with the Megatron ones (the recipes' own
# models); a user who wants one model on both backends passes --model.
GEPO_MODELS = {"fsdp": "Qwen/Qwen2.5-7B", "megatron": "Qwen/Qwen3.5-9B"}


def _every_backend(model: str) -> dict[str, str]:
    return {backend: model for backend in BACKENDS}


def _edge_table(key: str, title: str, train_set: str, numbers: Mapping[str, dict]) -> Table:
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
    note = (
        "EDGE-GRPO (arXiv 2507.21848): G = 8, 1 prompt per step, 1000 steps, one sample per problem at T = 0.1, "
        "max 3000 new tokens; Avg = problem-weighted mean over the 1560 problems. The paper reports single seeds; "
        "base-model rows report only Avg."
    )
    return Table(key, title, tuple(rows), note)


TABLES: dict[str, Table] = {
    "edge_random_1k": _edge_table(
        "edge_random_1k",
        "EDGE-GRPO Table 1 (Random-1K)",
        "random_1k",
        {
            "base_1.5b": {"Avg": 25.71},
            "grpo_1.5b": _paper(40.32, 13.33, 39.76, 65.60, 19.49, 31.26),
            "edge_1.5b": _paper(48.08, 13.33, 44.58, 76.40, 28.68, 36.89),
            "base_7b": {"Avg": 29.04},
            "grpo_7b": _paper(46.47, 23.33, 55.42, 72.40, 27.94, 34.67),
            "edge_7b": _paper(49.30, 16.67, 50.60, 75.60, 33.09, 37.04),
        },
    ),
    "edge_hard_1k": _edge_table(
        "edge_hard_1k",
        "EDGE-GRPO Table 2 (Hard-1K)",
        "hard_1k",
        {
            "base_1.5b": {"Avg": 25.71},
            "grpo_1.5b": _paper(40.26, 10.00, 46.99, 65.00, 20.59, 30.37),
            "edge_1.5b": _paper(47.24, 10.00, 44.58, 73.20, 29.04, 37.33),
            "base_7b": {"Avg": 29.04},
            "grpo_7b": _paper(47.69, 26.67, 53.01, 74.20, 25.74, 37.19),
            "edge_7b": _paper(53.21, 16.67, 53.01, 79.00, 36.03, 42.67),
        },
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
