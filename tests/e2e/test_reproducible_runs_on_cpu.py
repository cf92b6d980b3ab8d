"""The same command gives the same run: GRPO, GEPO and EDGE (GEC's three branches reached), 3 steps each of verl's real
main_ppo on the CPU rollout, trained twice, once alone (own Ray cluster) and once two at a time on one shared
cluster (the study's way), and compared number for number: every per-step metric but the wall-clock ones, the
final weights, and every step's sampled responses (``edge_verl_lab.same_run``). A run with another seed samples
other responses from its first step on; GRPO and GEPO at one seed sample the same responses at step 1 (before
any update), which is what makes them a pair."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from edge_verl_lab.demo.run import DemoConfig, build_warm_model, model_recipe
from edge_verl_lab.same_run import final_weights, read_rows, run_differences, sampled_groups
from edge_verl_lab.study.cluster import study_cluster
from tests.e2e.conftest import train_demo

METHODS = ("grpo", "gepo", "edge")
STEPS = 3
GEC_BRANCHES = ("regenerate", "inject_answer", "replace_solution")


def _config(root, method, seed, name, ray_address=None):
    out = root / name
    return DemoConfig(
        algorithm=method, steps=STEPS, seed=seed, out=out, model_dir=root / f"model_seed{seed}", save_final_weights=True,
        ray_address=ray_address, extra_overrides=[f"trainer.rollout_data_dir={out / 'rollouts'}"],
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: run folder}: "<method>" alone, "<method>_shared" on the shared cluster, "grpo_seed1" there too."""
    root = tmp_path_factory.mktemp("same_run")
    for seed in (0, 1):  # built before any run: two runs at a time must not build one folder together
        config = _config(root, "grpo", seed, "unused")
        build_warm_model(model_recipe(config), config.model_dir)
    folders = {method: train_demo(_config(root, method, 0, method)) for method in METHODS}
    with study_cluster(2) as address, ThreadPoolExecutor(max_workers=2) as pool:
        for pair in ((("grpo", 0), ("gepo", 0)), (("edge", 0), ("grpo", 1))):
            names = [f"{method}_shared" if seed == 0 else f"{method}_seed{seed}" for method, seed in pair]
            configs = [_config(root, method, seed, name, address) for (method, seed), name in zip(pair, names)]
            folders.update(zip(names, pool.map(train_demo, configs)))
    return folders


@pytest.mark.parametrize("method", METHODS)
def test_a_run_trained_again_two_at_a_time_on_one_cluster_is_the_same_run(runs, method):
    first, second = runs[method], runs[f"{method}_shared"]
    assert final_weights(first) is not None and final_weights(second) is not None  # the weights are compared
    assert sorted(path.name for path in (first / "rollouts").glob("*.jsonl")) == [f"{step}.jsonl" for step in range(1, STEPS + 1)]
    assert len(read_rows(first / "metrics.jsonl")) == STEPS
    assert run_differences(first, second) == []


def test_the_edge_runs_correct_responses_by_all_three_branches(runs):
    rows = read_rows(runs["edge"] / "metrics.jsonl")
    for branch in GEC_BRANCHES:
        assert sum(row[f"edge_verl/gec/corrected_{branch}"] for row in rows) > 0, branch


def test_another_seed_samples_other_responses_from_the_first_step(runs):
    first, other = sampled_groups(runs["grpo"] / "rollouts", 1), sampled_groups(runs["grpo_seed1"] / "rollouts", 1)
    assert len(first) == len(other) == DemoConfig.prompts_per_step
    assert first != other


def test_grpo_and_gepo_at_one_seed_sample_the_same_first_step_so_they_are_paired(runs):
    grpo, gepo = (read_rows(runs[method] / "metrics.jsonl")[0] for method in ("grpo", "gepo"))
    assert sampled_groups(runs["grpo"] / "rollouts", 1) == sampled_groups(runs["gepo"] / "rollouts", 1)
    assert grpo["critic/score/mean"] == gepo["critic/score/mean"]
    assert grpo["response_length/mean"] == gepo["response_length/mean"]
