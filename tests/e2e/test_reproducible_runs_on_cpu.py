"""A GRPO baseline is paired with the method beside it, and a seed is the run's: verl's real main_ppo on the CPU
rollout with the plugin's seeding, one step each, one after another on one shared Ray cluster: GRPO and GEPO at
one seed sample the same responses at step 1 (before any update), which is what makes them a pair; GRPO at another
seed samples other responses from its first step on.

The same command trained twice is the same run (every per-step metric but the wall-clock ones, the final weights,
every step's sampled responses: ``edge_verl_lab.same_run``) in tests/e2e/test_study_on_cpu.py (GRPO and GEPO, each
on a cluster of its own and again on another), tests/e2e/test_two_nodes_on_cpu.py (EDGE with GEC's three branches on
one node two at a time and on two nodes alone; GEPO resumed after a lost node against uninterrupted) and
tests/e2e/test_demo_command_on_cpu.py (the demo's figures, to the digit, on any machine)."""

import pytest

from edge_verl_lab.demo.run import DemoConfig
from edge_verl_lab.same_run import read_rows, sampled_groups
from edge_verl_lab.study.cluster import study_cluster
from tests.e2e.conftest import train_demo


def _config(root, method, seed, name, ray_address):
    out = root / name
    return DemoConfig(
        algorithm=method, steps=1, seed=seed, out=out, model_dir=root / f"model_seed{seed}", ray_address=ray_address,
        extra_overrides=[f"trainer.rollout_data_dir={out / 'rollouts'}"],
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: run folder}: "grpo", "gepo" and "grpo_seed1", one after another on one cluster."""
    root = tmp_path_factory.mktemp("paired")
    with study_cluster(1) as address:
        return {name: train_demo(_config(root, method, seed, name, address))
                for name, method, seed in (("grpo", "grpo", 0), ("gepo", "gepo", 0), ("grpo_seed1", "grpo", 1))}


def test_another_seed_samples_other_responses_from_the_first_step(runs):
    first, other = sampled_groups(runs["grpo"] / "rollouts", 1), sampled_groups(runs["grpo_seed1"] / "rollouts", 1)
    assert len(first) == len(other) == DemoConfig.prompts_per_step
    assert first != other


def test_grpo_and_gepo_at_one_seed_sample_the_same_first_step_so_they_are_paired(runs):
    grpo, gepo = (read_rows(runs[name] / "metrics.jsonl")[0] for name in ("grpo", "gepo"))
    assert sampled_groups(runs["grpo"] / "rollouts", 1) == sampled_groups(runs["gepo"] / "rollouts", 1)
    assert grpo["critic/score/mean"] == gepo["critic/score/mean"]
    assert grpo["response_length/mean"] == gepo["response_length/mean"]
