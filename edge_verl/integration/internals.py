"""Checks that the verl internals the plugin relies on still exist with the parameters it relies on.

A table maps a module to attribute paths and the parameters used: for a function or method, its
leading parameters in order (the wrappers pass them through positionally); for a class, constructor
fields that must exist (built and read by keyword). An empty tuple checks existence only. Wrapped
functions are inspected through ``__wrapped__``, so the plugin's own wrappers do not hide a change.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Mapping

InternalsTable = Mapping[str, Mapping[str, tuple[str, ...]]]


def _resolve(module: Any, path: str) -> Any:
    target = module
    for part in path.split("."):
        target = getattr(target, part)
    return target


def signature_problem(qualified_name: str, target: Any, expected: tuple[str, ...]) -> str | None:
    """Why ``target`` does not offer the ``expected`` parameters (None when it does)."""
    if not expected:
        return None
    try:
        parameters = list(inspect.signature(target).parameters)
    except (TypeError, ValueError) as error:
        return f"{qualified_name}: signature unreadable ({error})"
    if inspect.isclass(target):
        missing = [name for name in expected if name not in parameters]
        return f"{qualified_name}: fields {missing} missing (has {parameters})" if missing else None
    if parameters[: len(expected)] != list(expected):
        return f"{qualified_name}{inspect.signature(target)}: expected leading parameters ({', '.join(expected)})"
    return None


def find_internal_mismatches(table: InternalsTable) -> list[str]:
    """One line per verl internal in ``table`` that is missing or whose parameters changed."""
    problems = []
    for module_name, attributes in table.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            problems.append(f"{module_name}: cannot be imported ({error})")
            continue
        for path, expected in attributes.items():
            qualified_name = f"{module_name}.{path}"
            try:
                target = _resolve(module, path)
            except AttributeError:
                problems.append(f"{qualified_name}: missing")
                continue
            problem = signature_problem(qualified_name, target, expected)
            if problem is not None:
                problems.append(problem)
    return problems
