"""The lab: the demo, the study, the papers' reproduction and their reports and plots, beside the plugin.

``edge_verl`` is the plugin a verl user installs (estimators, GEC, reward, the verl coupling, the CPU backend);
this package is what this repository does with it: ``edge-verl demo`` (``demo``), ``edge-verl study``
(``study``), ``edge-verl reproduce`` (``reproduce``, with ``evaluation`` and ``experiment``), the reports and
curves (``reporting``) and the benchmarks' helpers (``benchmarks``). The dependency runs one way: the lab
imports the plugin, the plugin never imports the lab (tests/test_core_without_lab.py). What the lab needs
beyond the plugin's dependencies is pyproject.toml's ``lab`` extra; ``edge_verl.cli`` checks for it with
``missing_requirements`` before it hands a lab command over.
"""

from __future__ import annotations

import importlib.util

# The modules the lab imports that neither the plugin nor verl brings: pyproject.toml's lab extra.
REQUIREMENTS = ("matplotlib",)


def missing_requirements() -> list[str]:
    """The lab's requirements that are not installed (looked up, not imported)."""
    return [name for name in REQUIREMENTS if importlib.util.find_spec(name) is None]
