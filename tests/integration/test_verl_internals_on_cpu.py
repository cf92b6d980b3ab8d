"""Every verl internal the plugin relies on still exists with the parameters it relies on: an upgrade
breaks this test (and ``edge-verl doctor``), not a cluster run."""

from importlib import metadata

import pytest

pytest.importorskip("verl")

from edge_verl.integration import trainer_hooks  # noqa: E402
from edge_verl.integration.cpu.megatron_engine import MEGATRON_CPU_INTERNALS  # noqa: E402
from edge_verl.integration.internals import find_internal_mismatches  # noqa: E402

pytestmark = pytest.mark.verl

CPU_BACKEND_INTERNALS = {
    "verl.plugin.platform": {"PlatformBase": (), "PlatformRegistry": (), "get_platform": ()},
    "verl.workers.rollout.base": {"BaseRollout": (), "_ROLLOUT_REGISTRY": (), "get_rollout_class": ()},
    "verl.workers.rollout.replica": {"RolloutReplica": (), "RolloutReplicaRegistry.register": (), "TokenOutput": ()},
    "verl.utils.distributed": {"initialize_global_process_group_ray": ()},
    "verl.utils.tracking": {"FileLogger": ()},
}


def verl_from_source() -> bool:
    """verl is an editable install of a source checkout (scripts/setup_verl_main.sh: the by-hand run against
    verl's main branch, README "verl versions"), not a release."""
    direct_url = metadata.distribution("verl").read_text("direct_url.json") or ""
    return '"editable": true' in direct_url.replace("'", '"')


def test_verl_is_the_pinned_release():
    if verl_from_source():
        assert metadata.version("verl").startswith("0.10.")  # upstream/verl/VERL_COMMIT's line
    else:
        assert metadata.version("verl") == "0.9.1"


@pytest.mark.parametrize(
    "table",
    [trainer_hooks.VERL_INTERNALS, CPU_BACKEND_INTERNALS, MEGATRON_CPU_INTERNALS],
    ids=["trainer_hooks", "cpu_backend", "megatron_cpu"],
)
def test_every_internal_exists_with_the_parameters_relied_on(table):
    assert find_internal_mismatches(table) == []


def test_a_changed_signature_is_caught_even_behind_the_plugins_wrapper(monkeypatch):
    from verl.trainer.ppo.v1 import trainer_base

    def _compute_advantage(self, batch):  # an upgrade that dropped ``metrics``
        return batch

    monkeypatch.setattr(trainer_base.PPOTrainer, "_compute_advantage", _compute_advantage)
    problems = find_internal_mismatches({"verl.trainer.ppo.v1.trainer_base": trainer_hooks.VERL_INTERNALS["verl.trainer.ppo.v1.trainer_base"]})
    assert problems == [
        "verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage(self, batch): "
        "expected leading parameters (self, batch, metrics)"
    ]


def test_a_removed_class_field_and_a_missing_attribute_are_caught(monkeypatch):
    from dataclasses import dataclass

    from verl.trainer.ppo.v1 import trainer_base

    @dataclass
    class KVBatchMeta:  # an upgrade that renamed ``tags``
        keys: list
        labels: list
        partition_id: str

    monkeypatch.setattr(trainer_base, "KVBatchMeta", KVBatchMeta)
    monkeypatch.delattr(trainer_base.tq, "kv_batch_get")
    problems = find_internal_mismatches({"verl.trainer.ppo.v1.trainer_base": trainer_hooks.VERL_INTERNALS["verl.trainer.ppo.v1.trainer_base"]})
    assert "verl.trainer.ppo.v1.trainer_base.tq.kv_batch_get: missing" in problems
    assert any(line.startswith("verl.trainer.ppo.v1.trainer_base.KVBatchMeta: fields ['tags'] missing") for line in problems)


def test_hooks_are_installed_on_the_verl_modules():
    from verl.experimental.agent_loop import agent_loop
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.v1 import trainer_base, utils

    assert ray_trainer.compute_advantage.__edge_verl_wrapped__
    assert utils.compute_advantage.__edge_verl_wrapped__
    assert trainer_base.PPOTrainer._compute_advantage.__edge_verl_wrapped__
    assert trainer_base.PPOTrainer.fit.__edge_verl_wrapped__
    assert ray_trainer.RayPPOTrainer._save_checkpoint.__edge_verl_wrapped__
    assert agent_loop.AgentLoopManager.generate_sequences.__edge_verl_wrapped__
