"""No import circles in edge_verl/ and edge_verl_lab/: the graph of which module imports which, read with ast from
the source files, every import counted wherever it sits (module level, inside a function, under
``if TYPE_CHECKING:``), relative imports resolved, plus the imports a string hides (``importlib.import_module``
and ``sys.modules`` looked up with a literal name). An import moved into a function still runs, and a
``sys.modules`` lookup still needs the other module: neither breaks a circle, each only hides it.

A module that imports ``a.b.c`` depends on ``a.b.c`` (the longest prefix that is one of these modules); ``from
a.b import c`` depends on ``a.b.c`` when that is a module, else on ``a.b``; and on the packages Python
initialises on the way (``a``, ``a.b``), except its own (a module inside ``a.b`` runs while ``a.b`` is already
being initialised: a package's ``__init__`` that imports its own submodules is no circle)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("edge_verl", "edge_verl_lab")


def module_files(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _literal(node: ast.AST) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_sys_modules(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id == "sys"


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(base module, names imported from it) for every import in ``tree``; ``import a.b`` gives ("a.b", ())."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the importing module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = package[: len(package) - (node.level - 1)]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            yield name, tuple(alias.name for alias in node.names)
        elif isinstance(node, ast.Call) and node.args:  # importlib.import_module("a.b"), sys.modules.get("a.b")
            function, text = node.func, _literal(node.args[0])
            if text is None or not isinstance(function, ast.Attribute):
                continue
            if function.attr == "import_module" or (function.attr in ("get", "setdefault") and _is_sys_modules(function.value)):
                yield text, ()
        elif isinstance(node, ast.Subscript) and _is_sys_modules(node.value):  # sys.modules["a.b"]
            text = _literal(node.slice)
            if text is not None:
                yield text, ()


def _known(name: str, modules: dict[str, Path]) -> Optional[str]:
    """The longest prefix of ``name`` that is one of ``modules``."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def _packages_of(name: str) -> list[str]:
    """``a.b.c`` -> ["a", "a.b"]."""
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` its imports run (itself and its own packages excluded)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        own = {module, *_packages_of(module)}
        targets = set()
        for base, names in imported_names(ast.parse(path.read_text(), str(path)), module, path.name == "__init__.py"):
            for name in names or ("",):
                target = _known(f"{base}.{name}" if name else base, modules)
                if target is not None:
                    targets |= {target, *(package for package in _packages_of(target) if package in modules)} - own
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, as lists."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    """A component with the edges that hold it together."""
    members = set(component)
    edges = [f"{source} -> {target}" for source in component for target in sorted(graph[source] & members)]
    return "; ".join(edges)


def test_edge_verl_and_the_lab_have_no_import_circles():
    graph = import_graph(module_files())
    found = cycles(graph)
    assert not found, "import circles:\n" + "\n".join(describe(graph, component) for component in found)


def test_the_plugin_never_imports_the_lab():
    graph = import_graph(module_files())
    into_lab = sorted(
        f"{source} -> {target}" for source, targets in graph.items() if source.split(".")[0] == "edge_verl"
        for target in targets if target.split(".")[0] == "edge_verl_lab"
    )
    assert into_lab == []


def test_the_graph_sees_every_form_of_import(tmp_path):
    """The reader itself, on a package written here: function-level, relative, TYPE_CHECKING and string imports
    are edges, and a circle through any of them is found."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "def f():\n    from pkg import b\n",
        "b.py": "from .sub import c\n",
        "sub/__init__.py": "from . import d\n",
        "sub/c.py": "import sys\nx = sys.modules['pkg.e']\n",
        "sub/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..e import Thing\n",
        "e.py": "import importlib\ndef g():\n    return importlib.import_module('pkg.a')\n",
        "f.py": "import pkg.sub.c as c\nfrom pkg.sub.d import name\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    graph = import_graph(module_files(tmp_path, ("pkg",)))
    assert graph == {
        "pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.sub", "pkg.sub.c"}, "pkg.sub": {"pkg.sub.d"},
        "pkg.sub.c": {"pkg.e"}, "pkg.sub.d": {"pkg.e"}, "pkg.e": {"pkg.a"}, "pkg.f": {"pkg.sub", "pkg.sub.c", "pkg.sub.d"},
    }
    # through sys.modules (sub.c) and through the package sub's __init__, which imports sub.d (TYPE_CHECKING)
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.e", "pkg.sub", "pkg.sub.c", "pkg.sub.d"]]
