"""Entry point of the ``verl.plugins`` group: ``import verl`` imports this module in every verl process
(driver, TaskRunner, workers, agent-loop and reward workers) and so registers edge_verl's components.

verl swallows plugin load errors; ``edge-verl doctor`` re-does the import loudly.
"""

from __future__ import annotations

import os

from edge_verl.integration.cpu_overrides import CPU_ENV_FLAG, cpu_backend_requested

REGISTERED: dict[str, list[str]] = {"estimators": [], "rollouts": [], "platforms": [], "agent_loops": []}


def register_cpu_backend() -> None:
    """CPU platform (gloo) + HF rollout; only when EDGE_VERL_CPU=1 so GPU users see no change."""
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    # verl's engine registry keys the FSDP engine by device "cuda"; the engine itself follows the platform.
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    from edge_verl.integration import cpu_platform  # registers "cpu" in PlatformRegistry

    cpu_platform.patch_init_process_group()

    REGISTERED["platforms"].append("cpu")


def register_hf_rollout() -> None:
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from edge_verl.integration import hf_rollout

    rollout_base._ROLLOUT_REGISTRY[(hf_rollout.ROLLOUT_NAME, "async")] = "edge_verl.integration.hf_rollout.HFServerAdapter"
    RolloutReplicaRegistry.register(hf_rollout.ROLLOUT_NAME, lambda: hf_rollout.HFRolloutReplica)
    REGISTERED["rollouts"].append(hf_rollout.ROLLOUT_NAME)


def register_trainer_hooks() -> None:
    """Estimators into verl's registry and the trainer hooks, each when verl imports the module."""
    from edge_verl.integration.post_import import when_imported
    from edge_verl.integration.trainer_hooks import HOOKS

    for module_name, hook in HOOKS.items():
        when_imported(module_name, hook)
    REGISTERED["estimators"].extend(["edge_eda", "gepo"])


def register() -> None:
    register_trainer_hooks()
    if cpu_backend_requested():
        register_cpu_backend()
        register_hf_rollout()


register()

__all__ = ["CPU_ENV_FLAG", "REGISTERED", "register"]
