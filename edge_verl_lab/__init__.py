"""The lab: the demo, the study, the papers' reproduction and their reports and plots, beside the plugin.

``edge_verl`` is the plugin a verl user installs (estimators, GEC, reward, the verl coupling, the CPU backend);
this package is what this repository does with it: ``edge-verl demo`` (``demo``), ``edge-verl study``
(``study``), ``edge-verl reproduce`` (``reproduce``, with ``evaluation`` and ``experiment``), the reports and
curves (``reporting``) and the benchmarks' helpers (``benchmarks``). The dependency runs one way: the lab
imports the plugin, the plugin never imports the lab (tests/test_import_graph.py); the lab is a distribution of
its own (lab/pyproject.toml) that adds its commands to ``edge-verl`` through entry points (``cli.py``). What it
needs beyond the plugin's dependencies is in lab/pyproject.toml's dependencies; ``cli.main`` checks for it with
``missing_requirements`` before it runs a command (an install with pip's ``--no-deps`` lacks it).
"""

from __future__ import annotations

import importlib.util

# The modules the lab imports that neither the plugin nor verl brings: lab/pyproject.toml's dependencies.
REQUIREMENTS = ("matplotlib", "scipy")


def missing_requirements() -> list[str]:
    """The lab's requirements that are not installed (looked up, not imported)."""
    return [name for name in REQUIREMENTS if importlib.util.find_spec(name) is None]
