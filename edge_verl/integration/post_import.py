"""Run a hook right after a module is imported, or at once if it already is.

The plugin is imported inside ``import verl`` in every process; importing verl's trainer modules there
to patch them would make every worker pay for them (and risks import cycles). Hooks registered here run
when, and only if, the process imports the module.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Callable

Hook = Callable[[ModuleType], None]
_PENDING: dict[str, list[Hook]] = {}


def when_imported(module_name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once ``module_name`` has finished importing (now, if it has)."""
    module = sys.modules.get(module_name)
    if module is not None:
        hook(module)
        return
    _PENDING.setdefault(module_name, []).append(hook)
    if not any(isinstance(finder, _PostImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())


class _HookedLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, name: str):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for hook in _PENDING.pop(self._name, []):
            hook(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _PENDING:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _HookedLoader(spec.loader, fullname)
        return spec

