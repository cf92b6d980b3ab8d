"""Checks of what a function does, read from its source with ``ast``, and of a registry's functions: the
behaviours an integration table (``edge_verl.integration.internals``) relies on that no parameter list
shows, such as how a function calls another or a bound it clamps to. Pure Python: the code read is never
run, and this module knows nothing of verl; the table says which attribute each check applies to.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class Relied:
    """A behaviour of an attribute that the plugin relies on and no parameter list shows: ``check(target)``
    (the package's own object, behind any wrapper of the plugin's) says how the installed package differs,
    or None. ``what`` says what is relied on, for the problem's line."""

    what: str
    check: Callable[[Any], Optional[str]]


def _function_tree(function: Any) -> ast.AST:
    if isinstance(function, property):  # its getter's code
        function = function.fget
    return ast.parse(textwrap.dedent(inspect.getsource(function)))


def _dotted(node: ast.AST) -> str:
    """``config.global_batch_info`` for that expression, "" for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _attribute_tail(node: ast.AST) -> str:
    """``.compute_score.remote`` for ``handles[0].compute_score.remote``: the attributes at the end of an
    expression, whatever they are taken from."""
    tail = ""
    while isinstance(node, ast.Attribute):
        tail, node = f".{node.attr}{tail}", node.value
    return tail


def _calls(tree: ast.AST, callee: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _dotted(node.func) == callee]


def calls_by_keyword(callee: str, keywords: tuple[str, ...]) -> Relied:
    """The function calls ``callee`` with exactly these keywords and no positional argument."""

    def check(function: Any) -> Optional[str]:
        calls = _calls(_function_tree(function), callee)
        if not calls:
            return f"no call of {callee}"
        for call in calls:
            passed = [keyword.arg for keyword in call.keywords]
            if call.args or sorted(passed) != sorted(keywords):
                return f"line {call.lineno} passes {len(call.args)} positional and the keywords {passed}"
        return None

    return Relied(f"calls {callee}({'=, '.join(keywords)}=)", check)


def sets_keys_before(container: str, keys: tuple[str, ...], callee: str) -> Relied:
    """The function assigns ``container[key]`` for every key before its first call of ``callee``."""

    def check(function: Any) -> Optional[str]:
        tree = _function_tree(function)
        calls = _calls(tree, callee)
        first_call = min((call.lineno for call in calls), default=None)
        assigned = {
            target.slice.value: node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Subscript) and _dotted(target.value) == container and isinstance(target.slice, ast.Constant)
        }
        late = [key for key in keys if key not in assigned or (first_call is not None and assigned[key] > first_call)]
        return f"{late} not assigned before the call of {callee}" if late else None

    return Relied(f"sets {container}{list(keys)} before calling {callee}", check)


def clamps(variable: str, low: float, high: float) -> Relied:
    """The function clamps ``variable`` to [low, high] (``torch.clamp(variable, min=low, max=high)``): the
    plugin recomputes that value with its own copy of the bounds."""

    def check(function: Any) -> Optional[str]:
        for call in _calls(_function_tree(function), "torch.clamp"):
            if call.args and _dotted(call.args[0]) == variable:
                try:
                    bounds = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
                except ValueError:
                    return f"line {call.lineno} clamps to bounds that are not literals"
                if (bounds.get("min"), bounds.get("max")) != (low, high):
                    return f"line {call.lineno} clamps to [{bounds.get('min')}, {bounds.get('max')}], the plugin's copy is [{low}, {high}]"
                return None
        return f"no torch.clamp({variable}, ...)"

    return Relied(f"clamps {variable} to [{low}, {high}]", check)


def calls_with_constant(callee: str, constant: Any) -> Relied:
    """The function calls ``callee`` with ``constant`` among its arguments."""

    def check(function: Any) -> Optional[str]:
        for call in _calls(_function_tree(function), callee):
            values = [*call.args, *(keyword.value for keyword in call.keywords)]
            if any(isinstance(value, ast.Constant) and value.value == constant for value in values):
                return None
        return f"no call of {callee} with {constant!r}"

    return Relied(f"calls {callee}(..., {constant!r})", check)


def registry_of(parameters: tuple[str, ...], **named: str) -> Relied:
    """Every function of the registry (a dict) has exactly ``parameters``; ``named``: key -> the function's name."""

    def check(registry: Any) -> Optional[str]:
        found_names = {key: getattr(registry.get(key), "__name__", None) for key in named}
        problems = [f"{key!r} is {found_names[key]}, not {name}" for key, name in named.items() if found_names[key] != name]
        for key, function in registry.items():
            found = tuple(inspect.signature(function).parameters)
            if found != parameters:
                problems.append(f"{key!r} takes {found}")
        return "; ".join(problems) or None

    mapped = "".join(f", {key!r} is {name}" for key, name in named.items())
    return Relied(f"every entry takes ({', '.join(parameters)}){mapped}", check)


def _same_tree(node: ast.AST, wanted: ast.AST) -> bool:
    return ast.dump(node, annotate_fields=False) == ast.dump(wanted, annotate_fields=False)


def _parsed(code: str) -> ast.AST:
    """``code`` (one statement or expression) as the node it parses to."""
    statement = ast.parse(textwrap.dedent(code)).body[0]
    return statement.value if isinstance(statement, ast.Expr) else statement


def contains_code(code: str) -> Relied:
    """The function contains ``code`` (a statement or an expression), compared as syntax trees: layout and
    comments do not matter, names and values do."""
    wanted = _parsed(code)

    def check(function: Any) -> Optional[str]:
        if any(_same_tree(node, wanted) for node in ast.walk(_function_tree(function))):
            return None
        return f"no `{ast.unparse(wanted)}`"

    return Relied(f"contains `{ast.unparse(wanted)}`", check)


def calls_only_if(callee_suffix: str, condition: str) -> Relied:
    """Every call whose callee ends with ``callee_suffix`` lies inside an ``if`` whose test contains the
    expression ``condition`` (and there is such a call)."""
    wanted = _parsed(condition)

    def check(function: Any) -> Optional[str]:
        tree = _function_tree(function)
        guarded: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and any(_same_tree(part, wanted) for part in ast.walk(node.test)):
                guarded |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _attribute_tail(node.func).endswith(callee_suffix)]
        if not calls:
            return f"no call of *{callee_suffix}"
        unguarded = [call.lineno for call in calls if id(call) not in guarded]
        return f"calls *{callee_suffix} outside `if {ast.unparse(wanted)}` (line {unguarded[0]})" if unguarded else None

    return Relied(f"calls *{callee_suffix} only if {ast.unparse(wanted)}", check)
