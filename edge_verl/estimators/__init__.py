"""The advantage estimators: one module each, named by its registry key (verl's ``algorithm.adv_estimator`` and
the ``algorithm.<name>`` section of its options), and what they share (``SHARED_MODULES``): ``base.py``, the
registry they declare themselves in (``base.ESTIMATORS``), ``groups.py``, the group arithmetic, and
``statistics.py``, the step statistics.

``names()`` lists every estimator's key without importing torch or any estimator (``edge-verl method`` and the
methods' definitions stay a fraction of a second): the modules of this package by name, then the estimators
registered from outside it in this process (a module named in ``EDGE_VERL_FEATURE_MODULES``).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from typing import Mapping

PACKAGE = __name__
BASE_MODULE = "base"
SHARED_MODULES = (BASE_MODULE, "groups", "statistics")
# Comma-separated modules outside the package that register estimators of their own: every verl process
# imports them first (``integration/plugin.py``), and so do the doctor and the OpenRLHF launcher.
FEATURE_MODULES_VARIABLE = "EDGE_VERL_FEATURE_MODULES"


def builtin_names() -> tuple[str, ...]:
    """The estimators of this package: its modules but the shared ones, in name order."""
    return tuple(sorted(module.name for module in pkgutil.iter_modules(__path__)
                        if module.name not in SHARED_MODULES and not module.name.startswith("_")))


def names() -> tuple[str, ...]:
    """Every estimator's registry key: this package's, then those registered from outside it (only once the
    registry is loaded, which registering one does)."""
    builtin = builtin_names()
    base = sys.modules.get(f"{PACKAGE}.{BASE_MODULE}")
    registered = tuple(base.ESTIMATORS.registered_names()) if base is not None else ()
    return builtin + tuple(name for name in registered if name not in builtin)


def import_feature_modules(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Import the modules ``EDGE_VERL_FEATURE_MODULES`` names (each registers its estimators); their names."""
    modules = tuple(filter(None, (name.strip() for name in environ.get(FEATURE_MODULES_VARIABLE, "").split(","))))
    for module_name in modules:
        importlib.import_module(module_name)
    return modules
