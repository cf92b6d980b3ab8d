"""The same command gives the same run: verl's GRPO with the plugin's seeding, 3 steps of verl's real main_ppo on the
CPU rollout, trained twice, once alone (own Ray cluster) and once beside GEPO on one shared cluster (the study's
way), and compared number for number: every per-step metric but the wall-clock ones, the final weights, and every
step's sampled responses (``edge_verl_lab.same_run``). A run with another seed samples other responses from its
first step on; GRPO and GEPO at one seed sample the same responses at step 1 (before any update), which is what
makes them a pair.

GEPO and EDGE (GEC's three branches reached) are trained twice in tests/e2e/test_two_nodes_on_cpu.py: on two nodes
alone and on one node two at a time (EDGE), and resumed after a lost node against uninterrupted (GEPO)."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from edge_verl_lab.demo.run import DemoConfig, build_warm_model, model_recipe
from edge_verl_lab.same_run import final_weights, read_rows, run_differences, sampled_groups
from edge_verl_lab.study.cluster import study_cluster
from tests.e2e.conftest import train_demo

STEPS = 3


def _config(root, method, seed, name, ray_address=None, steps=STEPS):
    out = root / name
    return DemoConfig(
        algorithm=method, steps=steps, seed=seed, out=out, model_dir=root / f"model_seed{seed}", save_final_weights=True,
        ray_address=ray_address, extra_overrides=[f"trainer.rollout_data_dir={out / 'rollouts'}"],
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: run folder}: "grpo" alone; "grpo_shared" and "gepo_shared" two at a time on one cluster, then
    "grpo_seed1" (one step: only its first step's samples are compared) on it."""
    root = tmp_path_factory.mktemp("same_run")
    for seed in (0, 1):  # built before any run: two runs at a time must not build one folder together
        config = _config(root, "grpo", seed, "unused")
        build_warm_model(model_recipe(config), config.model_dir)
    folders = {"grpo": train_demo(_config(root, "grpo", 0, "grpo"))}
    with study_cluster(2) as address, ThreadPoolExecutor(max_workers=2) as pool:
        pair = [_config(root, method, 0, f"{method}_shared", address) for method in ("grpo", "gepo")]
        folders.update(zip(("grpo_shared", "gepo_shared"), pool.map(train_demo, pair)))
        folders["grpo_seed1"] = train_demo(_config(root, "grpo", 1, "grpo_seed1", address, steps=1))
    return folders


def test_a_run_trained_again_beside_another_on_one_cluster_is_the_same_run(runs):
    first, second = runs["grpo"], runs["grpo_shared"]
    assert final_weights(first) is not None and final_weights(second) is not None  # the weights are compared
    assert sorted(path.name for path in (first / "rollouts").glob("*.jsonl")) == [f"{step}.jsonl" for step in range(1, STEPS + 1)]
    assert len(read_rows(first / "metrics.jsonl")) == STEPS
    assert run_differences(first, second) == []


def test_another_seed_samples_other_responses_from_the_first_step(runs):
    first, other = sampled_groups(runs["grpo"] / "rollouts", 1), sampled_groups(runs["grpo_seed1"] / "rollouts", 1)
    assert len(first) == len(other) == DemoConfig.prompts_per_step
    assert first != other


def test_grpo_and_gepo_at_one_seed_sample_the_same_first_step_so_they_are_paired(runs):
    grpo, gepo = (read_rows(runs[name] / "metrics.jsonl")[0] for name in ("grpo", "gepo_shared"))
    assert sampled_groups(runs["grpo"] / "rollouts", 1) == sampled_groups(runs["gepo_shared"] / "rollouts", 1)
    assert grpo["critic/score/mean"] == gepo["critic/score/mean"]
    assert grpo["response_length/mean"] == gepo["response_length/mean"]
