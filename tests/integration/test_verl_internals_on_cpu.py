"""Every verl internal the plugin relies on still exists: an upgrade breaks this test, not a cluster run."""

import importlib
from importlib import metadata

import pytest

pytest.importorskip("verl")

from edge_verl.integration import trainer_hooks  # noqa: E402

pytestmark = pytest.mark.verl

CPU_BACKEND_INTERNALS = {
    "verl.plugin.platform": ("PlatformBase", "PlatformRegistry", "get_platform"),
    "verl.workers.rollout.base": ("BaseRollout", "_ROLLOUT_REGISTRY", "get_rollout_class"),
    "verl.workers.rollout.replica": ("RolloutReplica", "RolloutReplicaRegistry", "TokenOutput"),
    "verl.utils.distributed": ("initialize_global_process_group_ray",),
    "verl.utils.tracking": ("FileLogger",),
    "verl.experimental.agent_loop.agent_loop": ("_agent_loop_registry",),
}


def test_verl_is_the_pinned_release():
    assert metadata.version("verl") == "0.9.1"


@pytest.mark.parametrize(
    "module_name, attribute",
    [(m, a) for table in (trainer_hooks.VERL_INTERNALS, CPU_BACKEND_INTERNALS) for m, attrs in table.items() for a in attrs],
)
def test_verl_internal_exists(module_name, attribute):
    target = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)


def test_hooks_are_installed_on_the_verl_modules():
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.v1 import trainer_base, utils

    assert ray_trainer.compute_advantage.__edge_verl_wrapped__
    assert utils.compute_advantage.__edge_verl_wrapped__
    assert trainer_base.PPOTrainer._compute_advantage.__edge_verl_wrapped__
    assert ray_trainer.RayPPOTrainer._save_checkpoint.__edge_verl_wrapped__
