"""Entry point ``edge_verl`` of the ``verl.plugins`` group: ``import verl`` imports this module in every
verl process (driver, TaskRunner, workers, agent-loop and reward workers).

It imports no verl module itself: each hook in ``trainer_hooks.HOOKS`` (estimator registration, the
trainer wrappers, the GEC agent loop) runs when, and only if, the process imports the verl module it
touches. The CPU backend has its own entry point (``edge_verl.integration.cpu.plugin``). verl swallows
plugin load errors; ``edge-verl doctor`` re-does the import loudly.

``EDGE_VERL_FEATURE_MODULES`` (comma-separated module names, optional): modules imported first, in every
verl process that inherits the variable (Ray's workers do), which add entries to the plugin's feature
table (``edge_verl.features.register_estimator``): an estimator of one's own, registered in verl's registry
with the paper's two and served by the same adapters.
"""

from __future__ import annotations

import importlib
import os

from edge_verl.integration.post_import import when_imported
from edge_verl.integration.trainer_hooks import HOOKS


FEATURE_MODULES_VARIABLE = "EDGE_VERL_FEATURE_MODULES"


def register() -> None:
    for module_name in filter(None, (name.strip() for name in os.environ.get(FEATURE_MODULES_VARIABLE, "").split(","))):
        importlib.import_module(module_name)
    for module_name, hook in HOOKS.items():
        when_imported(module_name, hook)


register()
