"""ARCHITECTURE.md's trace of one step, checked against the code: every function the table names is defined in the
module it names (a ``Class.method`` as a method of that class), the integration modules of the trace each run in
one kind of process, and the modules the traced ones import are the trace's or named below it with their reason."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "ARCHITECTURE.md").read_text()
SECTION = DOC[DOC.index("## One step, function by function") : DOC.index("## How values travel")]
ROW = re.compile(r"^\| (\d+) \| ([\w -]+) \| `([\w.]+)` \| `([\w/]+\.py)` \| .+ \|$")


def _rows() -> list[tuple[int, str, str, str]]:
    """(number, process, function, path from the checkout's root) of each row of the trace."""
    rows = []
    for line in SECTION.splitlines():
        found = ROW.match(line)
        if found:
            number, process, function, module = found.groups()
            rows.append((int(number), process.strip(), function, f"edge_verl/{module}"))
    return rows


def _defined(path: Path) -> set[str]:
    """The module's top-level functions and classes, and ``Class.method`` for each class's methods."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{item.name}" for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def test_the_trace_is_numbered_in_order_and_names_processes_of_a_verl_run():
    rows = _rows()
    assert [number for number, *_ in rows] == list(range(1, len(rows) + 1)) and len(rows) >= 20
    assert {process for _, process, _, _ in rows} == {"agent-loop worker", "trainer", "actor worker"}


def test_every_function_of_the_trace_is_defined_in_the_module_the_page_names():
    missing = [(number, function, module) for number, _, function, module in _rows()
               if not (ROOT / module).is_file() or function not in _defined(ROOT / module)]
    assert not missing, f"ARCHITECTURE.md's trace names functions its modules do not define: {missing}"


def test_each_integration_module_of_the_trace_runs_in_one_kind_of_process():
    processes: dict[str, set[str]] = {}
    for _, process, _, module in _rows():
        processes.setdefault(module, set()).add(process)
    mixed = {module: sorted(found) for module, found in processes.items() if "/integration/" in module and len(found) > 1}
    assert not mixed, f"integration modules whose traced functions run in more than one kind of process: {mixed}"


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


def test_every_module_the_traced_modules_import_is_in_the_trace_or_named_below_it():
    traced = {module for *_, module in _rows()} | {"edge_verl/estimators/gepo.py"}  # GEPO's step: EDA's with gepo.py
    named = {name if name.startswith("edge_verl/") else f"edge_verl/{name}"
             for name in re.findall(r"`([\w/]+(?:\.py|/))`", SECTION[SECTION.index("Not in the table") :])}
    allowed = traced | named
    seen: set[Path] = set()
    todo = [ROOT / name for name in traced]
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
    assert not outside, f"the traced modules import project files ARCHITECTURE.md neither traces nor names: {sorted(outside)}"
