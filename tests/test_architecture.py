"""ARCHITECTURE.md's per-step table, checked: each step's files exist and number at most 6, and every project module
the step's modules import (at any depth, in functions too) is either in the table or among the files the document
names as not counted, each with its reason."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "ARCHITECTURE.md").read_text()
SECTION = DOC[DOC.index("## Reading one step") : DOC.index("## How values travel")]
# the modules a step starts in: the rollout, the trainer's adapter (the run, its step, the estimator adapter, the
# loss hook) and each estimator
STEP_MODULES = ("edge_verl/integration/rollout.py", "edge_verl/integration/trainer.py", "edge_verl/estimators/edge_eda.py", "edge_verl/estimators/gepo.py")


def _path(name: str) -> str:
    """A backticked name of the table as a path from the checkout's root (``integration/x.py`` -> ``edge_verl/...``)."""
    return name if name.startswith("edge_verl/") else f"edge_verl/{name}"


def _columns() -> list[set[str]]:
    rows = [line for line in SECTION.splitlines() if re.match(r"\| \d+ \|", line)]
    columns: list[set[str]] = [set(), set(), set()]
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")][1:]
        for column, cell in zip(columns, cells):
            found = re.match(r"`([\w/]+\.py)`", cell)
            if found:
                column.add(_path(found.group(1)))
    return columns


def _not_counted() -> set[str]:
    block = SECTION[SECTION.index("Not counted") :]
    return {_path(name) for name in re.findall(r"`([\w/]+(?:\.py|/))`", block)}


def _module_file(module: str) -> Path | None:
    for candidate in (ROOT / (module.replace(".", "/") + ".py"), ROOT / module.replace(".", "/") / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _project_imports(path: Path) -> set[Path]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        names += [f"{node.module}.{alias.name}" for alias in node.names] if isinstance(node, ast.ImportFrom) and node.module else []
        names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        found |= {_module_file(name) for name in names if name.startswith("edge_verl.") and _module_file(name) is not None}
    return found


def test_each_step_of_the_table_passes_through_at_most_six_files_that_exist():
    gec, eda, edge = _columns()
    assert (len(gec), len(eda), len(edge)) == (5, 5, 6), (gec, eda, edge)
    assert edge == gec | eda
    for name in edge:
        assert (ROOT / name).is_file(), name


def test_every_module_the_step_imports_is_counted_or_named_as_not_counted_with_its_reason():
    counted = set().union(*_columns()) | {"edge_verl/estimators/gepo.py"}  # GEPO's step: EDA's with gepo.py
    allowed = counted | _not_counted()
    seen: set[Path] = set()
    todo = [ROOT / name for name in STEP_MODULES]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += _project_imports(path)
    outside = set()
    for path in seen:
        relative = str(path.relative_to(ROOT))
        if relative.endswith("__init__.py") and relative[: -len("__init__.py")] in allowed:
            continue
        if relative not in allowed and not any(relative.startswith(folder) for folder in allowed if folder.endswith("/")):
            outside.add(relative)
    assert not outside, f"the step's modules import project files ARCHITECTURE.md neither counts nor names: {sorted(outside)}"
