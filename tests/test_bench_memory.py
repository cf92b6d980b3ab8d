"""scripts/bench_memory.py's reading of verl's per-step records (the run itself is a real main_ppo run per
method: see the script and docs/performance.md)."""

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


def test_the_peak_is_the_largest_memory_figure_verl_logged_in_any_step(bench):
    rows = [{"step": 1, "actor/perf/max_memory_allocated_gb": 3.5, "perf/cpu_memory_used_gb": 99.0},
            {"step": 2, "actor/perf/max_memory_allocated_gb": 4.25}]
    assert bench.peak_gb(rows) == 4.25  # the host's memory in use is not the worker's peak
    with pytest.raises(RuntimeError, match="no metric ending in max_memory_allocated_gb"):
        bench.peak_gb([{"step": 1, "perf/cpu_memory_used_gb": 1.0}])


def test_times_are_per_1000_response_tokens_median_over_the_steps_after_the_first(bench):
    # 8 responses of mean length 500 = 4000 tokens; update 2 s -> 500 ms per 1000 tokens, 4 s -> 1000; step 1 left out
    rows = [{"timing_s/update_actor": 100.0, "timing_s/old_log_prob": 1.0, "response_length/mean": 500},
            {"timing_s/update_actor": 2.0, "timing_s/old_log_prob": 1.0, "response_length/mean": 500},
            {"timing_s/update_actor": 4.0, "timing_s/old_log_prob": 1.0, "response_length/mean": 500},
            {"timing_s/update_actor": 3.0, "timing_s/old_log_prob": 1.0, "response_length/mean": 500}]
    found = bench.per_token_ms(rows, responses=8)
    assert found == {"update_actor": pytest.approx(750.0), "old_log_prob": pytest.approx(250.0)}


def test_every_row_is_a_method_the_demo_runs_with_verl_switches_only(bench):
    from edge_verl_lab.demo.run import DEMO_METHODS, EDA_FORMS

    assert "grpo" in bench.METHODS
    for algorithm, form, extra in bench.METHODS.values():
        assert algorithm in DEMO_METHODS and form in EDA_FORMS
        assert all(item.startswith("actor_rollout_ref.actor.entropy_") and item.endswith("=True") for item in extra)
