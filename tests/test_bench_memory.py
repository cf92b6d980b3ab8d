"""scripts/bench_memory.py's reading of verl's per-step records and its table (the run itself is a real main_ppo
run per cell: see the script and docs/performance.md)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_memory.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_memory", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_peak_is_the_updates_largest_over_the_steps(bench):
    rows = [{"step": 1, "actor/perf/max_memory_allocated_gb": 3.5, "perf/cpu_memory_used_gb": 99.0,
             "critic/perf/max_memory_allocated_gb": 50.0},
            {"step": 2, "actor/perf/max_memory_allocated_gb": 4.25}]
    assert bench.update_peak_gb(rows) == 4.25  # neither the host's memory in use nor another worker's peak
    with pytest.raises(RuntimeError, match="actor/perf/max_memory_allocated_gb"):
        bench.update_peak_gb([{"step": 1, "perf/cpu_memory_used_gb": 1.0}])


def test_the_step_time_is_the_median_after_the_first_step(bench):
    rows = [{"timing_s/step": 100.0}, {"timing_s/step": 2.0}, {"timing_s/step": 4.0}, {"timing_s/step": 3.0}]
    assert bench.step_seconds(rows) == 3.0  # median of 2, 4, 3; the first step's 100 s left out
    with pytest.raises(RuntimeError, match="at least 2 steps"):
        bench.step_seconds(rows[:1])


def test_a_budget_is_one_micro_batch_of_groups_of_two_to_four(bench):
    assert bench.shape(2) == (1, 2)
    assert bench.shape(8) == (2, 4)
    assert bench.shape(6) == (3, 2)
    for bad in (0, 1, 3):
        with pytest.raises(ValueError, match="even number >= 2"):
            bench.shape(bad)


def _cell(micro_batch, head, method, tokens, peak, step):
    return {"micro_batch": micro_batch, "head": head, "method": method, "tokens_per_micro_batch": tokens,
            "peak_gb": peak, "step_s": step, "update_s": step / 2}


def test_the_table_gives_ratios_to_grpo_on_the_same_head_and_to_eager_grpo_and_the_slope_per_token(bench):
    results = {
        "a": _cell(2, "eager", "grpo", 2048, 2.0, 10.0),
        "b": _cell(2, "edge_tiled", "grpo", 2048, 1.0, 11.0),
        "c": _cell(2, "edge_tiled", "eda gradient", 2048, 1.05, 11.5),
        "d": _cell(8, "eager", "grpo", 8192, 5.0, 30.0),
        "e": _cell(8, "edge_tiled", "grpo", 8192, 1.0, 33.0),
        "f": _cell(8, "edge_tiled", "eda gradient", 8192, 1.1, 34.5),
    }
    rows = {tuple(part.strip() for part in line.strip("|").split("|")[:3]): line for line in bench.table(results)[2:]}
    # eager grpo: (5.0 - 2.0) GiB over 6144 tokens = 3072 MiB / 6144 = 0.500 MiB per token
    assert rows[("2048", "eager", "grpo")].split("|")[7].strip() == "0.500"
    # tiled eda at 8k: 1.1 / 1.0 = 1.10 of grpo on the tiled head, 1.1 / 5.0 = 0.22 of eager grpo;
    # slope (1.1 - 1.05) * 1024 / 6144 = 0.008 MiB per token; step 34.5 / 30 = 1.15
    cells = [part.strip() for part in rows[("8192", "edge_tiled", "eda gradient")].strip("|").split("|")]
    assert cells[3:] == ["1.10", "1.10", "0.22", "0.008", "34.5", "1.15", "17.2", "1.15"]


RESULT = SCRIPT.parents[1] / "docs" / "benchmarks" / "bench_memory.json"


def test_the_published_table_is_the_committed_runs_and_the_tiled_head_gives_eda_grpos_memory(bench):
    import json

    results = json.loads(RESULT.read_text())["results"]
    page = (SCRIPT.parents[1] / "docs" / "performance.md").read_text()
    assert "\n".join(bench.table(results)) in page  # docs/performance.md prints this run's table, as it is
    assert len(results) == len(bench.METHODS) * len(bench.HEADS) * 2

    def cell(micro_batch, head, method):
        return next(c for c in results.values() if (c["micro_batch"], c["head"], c["method"]) == (micro_batch, head, method))

    for micro_batch in (2, 8):  # issue 59's acceptance, at both budgets of the one run
        tiled, eager_grpo = cell(micro_batch, "edge_tiled", "eda gradient"), cell(micro_batch, "eager", "grpo")
        assert tiled["peak_gb"] <= 1.05 * cell(micro_batch, "edge_tiled", "grpo")["peak_gb"]
        assert tiled["peak_gb"] <= eager_grpo["peak_gb"]
        assert tiled["step_s"] <= 1.15 * eager_grpo["step_s"]
