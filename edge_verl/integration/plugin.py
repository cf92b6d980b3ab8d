"""Entry point ``edge_verl`` of the ``verl.plugins`` group: ``import verl`` imports this module in every
verl process (driver, TaskRunner, workers, agent-loop and reward workers).

It imports no verl module itself: each hook in ``HOOKS`` (estimator registration, the trainer adapters,
the actor-loss hook, the GEC agent loop, the preflight) runs when, and only if, the process imports the verl
module it touches (wrapt's post-import hooks). The CPU backend has its own entry point (``edge_verl.integration.cpu.plugin``). verl swallows
plugin load errors; ``edge-verl doctor`` re-does the import loudly.

``EDGE_VERL_FEATURE_MODULES`` (comma-separated module names, optional): modules imported first, in every
verl process that inherits the variable (Ray's workers do), which add entries to the plugin's estimator
table (``edge_verl.integration.estimators.register_estimator``): an estimator of one's own, registered in verl's registry
with the paper's two and served by the same adapters.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable

from wrapt import register_post_import_hook

from edge_verl.integration import actor_loss, estimator_adapter, fused_head, seeding
from edge_verl.integration.internals import CORE
from edge_verl.integration.legacy_trainer import LegacyAdapter
from edge_verl.integration.run import plugin_in_use, preflight_or_exit
from edge_verl.integration.trainer import V1Adapter


FEATURE_MODULES_VARIABLE = "EDGE_VERL_FEATURE_MODULES"


def _make_validate_config(original: Callable) -> Callable:
    def validate_config(config, *args, **kwargs):
        result = original(config, *args, **kwargs)
        if plugin_in_use(config.algorithm):
            preflight_or_exit(config)
        return result

    return validate_config


def patch_verl_config(module: Any) -> None:
    """verl's ``main`` validates its config before ``ray.init``: the plugin's preflight runs right after."""
    CORE.wrap(module, "validate_config", _make_validate_config)


def patch_agent_loop(module: Any) -> None:
    from edge_verl.integration import gec_agent_loop  # noqa: F401  (@register("edge_gec"))

    CORE.wrap(module, "AgentLoopManager.generate_sequences", LegacyAdapter.generate_sequences)
    seeding.install_agent_loop(module)


HOOKS: dict[str, Callable[[Any], None]] = {
    "verl.utils.config": patch_verl_config,
    "verl.workers.utils.losses": actor_loss.patch_losses,
    "verl.experimental.agent_loop.agent_loop": patch_agent_loop,
    "verl.trainer.ppo.core_algos": estimator_adapter.register_estimators,
    "verl.trainer.ppo.ray_trainer": LegacyAdapter.install,
    "verl.trainer.ppo.v1.utils": V1Adapter.install_utils,
    "verl.trainer.ppo.v1.trainer_base": V1Adapter.install,
    "verl.trainer.ppo.v1.replay_buffer": seeding.install_replay_buffer,
    "verl.models.transformers.monkey_patch": fused_head.patch_monkey_patch,
    "verl.utils.experimental.torch_functional": fused_head.patch_torch_functional,
}


def register() -> None:
    for module_name in filter(None, (name.strip() for name in os.environ.get(FEATURE_MODULES_VARIABLE, "").split(","))):
        importlib.import_module(module_name)
    for module_name, hook in HOOKS.items():
        register_post_import_hook(hook, module_name)


register()
