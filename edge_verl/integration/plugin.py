"""Entry point ``edge_verl`` of the ``verl.plugins`` group: ``import verl`` imports this module in every
verl process (driver, TaskRunner, workers, agent-loop and reward workers).

It imports no verl module itself: each hook in ``trainer_hooks.HOOKS`` (estimator registration, the
trainer wrappers, the GEC agent loop) runs when, and only if, the process imports the verl module it
touches. The CPU backend has its own entry point (``edge_verl.integration.cpu.plugin``). verl swallows
plugin load errors; ``edge-verl doctor`` re-does the import loudly.
"""

from __future__ import annotations

from edge_verl.integration.post_import import when_imported
from edge_verl.integration.trainer_hooks import HOOKS


def register() -> None:
    for module_name, hook in HOOKS.items():
        when_imported(module_name, hook)


register()
