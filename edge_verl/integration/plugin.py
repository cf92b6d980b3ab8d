"""Entry point ``edge_verl`` of the ``verl.plugins`` group: ``import verl`` imports this module in every
verl process (driver, TaskRunner, workers, agent-loop and reward workers).

It imports no verl module itself: each hook in ``HOOKS`` (estimator registration, the trainer adapters,
the actor-loss hook, the GEC agent loop, the preflight) runs when, and only if, the process imports the verl
module it touches (wrapt's post-import hooks). The CPU backend has its own entry point
(``edge_verl.integration.cpu.plugin``). verl swallows plugin load errors; ``edge-verl doctor`` re-does the import loudly.

``EDGE_VERL_FEATURE_MODULES`` (comma-separated module names, optional): modules imported first, in every
verl process that inherits the variable (Ray's workers do), which add entries to the plugin's estimator
registry (``edge_verl.estimators.base.register_estimator``): an estimator of one's own, registered in verl's registry
with the paper's two and served by the same adapters.
"""

from __future__ import annotations

from typing import Any, Callable

from wrapt import register_post_import_hook

from edge_verl.estimators import import_feature_modules
from edge_verl.integration import actor_loss, cluster, estimator_adapter, fused_head, v1_trainer
from edge_verl.integration.internals import CORE
from edge_verl.integration.legacy_trainer import LegacyAdapter
from edge_verl.integration.preflight import preflight_or_exit
from edge_verl.integration.run import plugin_in_use
from edge_verl.integration.v1_trainer import V1Adapter


def _make_validate_config(original: Callable) -> Callable:
    def validate_config(config, *args, **kwargs):
        result = original(config, *args, **kwargs)
        if plugin_in_use(config.algorithm):
            preflight_or_exit(config)
            cluster.arm(config)  # the nodes checked and watched from ray.init on
        return result

    return validate_config


def patch_verl_config(module: Any) -> None:
    """verl's ``main`` validates its config before ``ray.init``: the plugin's preflight runs right after."""
    CORE.wrap(module, "validate_config", _make_validate_config)


def patch_agent_loop(module: Any) -> None:
    from edge_verl.integration import rollout  # @register("edge_gec") on import

    CORE.wrap(module, "AgentLoopManager.generate_sequences", LegacyAdapter.generate_sequences)
    rollout.install_agent_loop(module)


def patch_v1_trainer(module: Any) -> None:
    """The v1 trainer's adapter (``v1_trainer.py``; its checkpoints, ``trainer_run.py``, ``checkpoint.py``) and the seeded update batch's
    order."""
    V1Adapter.install(module)
    CORE.wrap(module, "PPOTrainer._build_replay_buffer", v1_trainer.wrap_build_replay_buffer)


HOOKS: dict[str, Callable[[Any], None]] = {
    "verl.utils.config": patch_verl_config,
    "verl.trainer.constants_ppo": cluster.patch_constants,
    "verl.workers.utils.losses": actor_loss.patch_losses,
    "verl.experimental.agent_loop.agent_loop": patch_agent_loop,
    "verl.trainer.ppo.core_algos": estimator_adapter.register_estimators,
    "verl.trainer.ppo.ray_trainer": LegacyAdapter.install,
    "verl.trainer.ppo.v1.utils": V1Adapter.install_utils,
    "verl.trainer.ppo.v1.trainer_base": patch_v1_trainer,
    "verl.trainer.ppo.v1.replay_buffer": v1_trainer.install_replay_buffer,
    "verl.models.transformers.monkey_patch": fused_head.patch_monkey_patch,
    "verl.utils.experimental.torch_functional": fused_head.patch_torch_functional,
}


def register() -> None:
    import_feature_modules()
    for module_name, hook in HOOKS.items():
        register_post_import_hook(hook, module_name)


register()
