"""Answer forms: the other ways of writing the same answer that graders must see through (pure strings).

A model's answer and a reference answer are each expanded into a few raw-LaTeX *candidates*, most literal
first; the text stage and math-verify compare every pred candidate with every gold candidate. Each form is
a rewriting that keeps the mathematical value and only drops what is not math:
- a unit or word after the value (``125\\textnormal{ miles}``, ``28 pct``, ``5.4 \\text{ cents}``):
  ``strip_trailing_unit``; a ``\\text``-like command holding only words is dropped after any value, a
  plain word only when it is a known unit (``UNIT_WORDS``: "2 xy" stays the product 2xy);
- a named left-hand side (``V_1:V_2=11:21``, ``f(x)=x+1``, ``x_1=1, x_2=-3``): ``strip_named_lhs``
  keeps the right-hand side of each comma-separated equation whose left side is a name, a ratio of names
  or a function of a name; a ratio LHS marks the RHS ``a:b`` as a ratio (``\\frac{a}{b}``), not a time;
- a multiple-choice label after the value (``3 \\textbf{(C)}``): ``strip_choice_label``;
- an interval written as an inequality (``-2 \\le x \\le 7``, ``x > 3``), a membership (``x \\in [-2,7]``)
  or a set-builder (``\\{x \\mid -2 \\le x \\le 7\\}``): ``as_interval``; when both answers name their
  variable the names must agree (``-2 \\le y \\le 7`` is not ``x \\in [-2,7]``: ``interval_variable``);
- several boxed answers that together form the answer: ``edge_verl.reward.boxes`` (``top_level_items``
  counts a gold's items there).
- a radical with a parenthesised argument (``4\\sqrt(2)``, ``\\sqrt[3](x+1)``): ``braced_radicals`` REPLACES
  the parentheses by braces before anything else sees the answer, so ``4\\sqrt(2)`` is 4*sqrt(2) and never
  reaches math-verify as written (there it parsed as 4, a false positive against the gold 4); an
  unbalanced one stays as written and cannot parse;
- an answer sentence in Chinese around one value (``所以答案是\\frac{1}{2}。``, ``概率为 $0.5$``):
  ``strip_cjk_sentence`` keeps the value when the words before it end in an answer-introducing word
  (是, 为, 等于, 答案, a colon) and hold no negation, bound or hedge (不是 1/2, 至少为 3, 约为, 1 或 2 stay as
  written: they are not the value), and what follows is only punctuation or a unit.
Everything is linear in the (capped) answer length and evaluates nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

UNIT_WORDS = (
    "cm", "km", "mm", "m/s", "km/h", "mph", "inches", "inch", "feet", "foot", "ft", "yards", "yard", "miles", "mile",
    "meters", "meter", "metres", "metre", "units", "unit", "squareunits", "sq.units", "squnits", "degrees", "degree",
    "dollars", "dollar", "cents", "cent", "hours", "hour", "minutes", "minute", "seconds", "second", "days", "day",
    "weeks", "week", "months", "month", "years", "year", "percentage", "percent", "pct", "kg", "grams", "gram", "liters", "litres",
    "pounds", "ounces", "gallons", "students", "people", "ways", "points",
)  # fmt: skip
# Commands whose argument is text, not math (a unit after a value inside one is dropped).
TEXT_COMMANDS = ("\\textnormal", "\\textrm", "\\text", "\\textbf", "\\mathrm", "\\textit", "\\mbox", "\\operatorname")
_WORDS = re.compile(r"^[A-Za-z][A-Za-z .\-/]*$")
_SPACING = ("\\,", "\\;", "\\:", "\\!", "\\ ", "~", "\\quad", "\\qquad")
_EXPONENT_SUFFIX = re.compile(r"\^\{?-?[1-3]\}?$")
_PLAIN_UNIT = re.compile(r"(?<=[\d}])\s*(" + "|".join(re.escape(word) for word in sorted(UNIT_WORDS, key=len, reverse=True)) + r")\.?$")
_NAME = r"(?:[A-Za-z]|\\[a-zA-Z]+)(?:_\{?[A-Za-z0-9\\ ]+\}?|'|\^\{?\*\}?)*"
_NAMED_LHS = re.compile(rf"^\s*{_NAME}(?:\s*\(\s*{_NAME}(?:\s*,\s*{_NAME})*\s*\))?(?:\s*[:/]\s*{_NAME})*\s*$")
_CHOICE_SUFFIX = re.compile(r"(?:[\s,;~]|\\[ ,;:])*(?:\\(?:textbf|text|mathrm|mathbf)\s*\{\s*\(?[A-E]\)?\s*\}|\([A-E]\))\s*$")
_RATIO = re.compile(r"^\s*([^:=<>]+?)\s*:\s*([^:=<>]+?)\s*$")
_MEMBERSHIP = re.compile(rf"^\s*({_NAME})\s*\\in\s*(.+)$")
_RELATIONS = (("\\leqslant", "<="), ("\\geqslant", ">="), ("\\leq", "<="), ("\\geq", ">="), ("\\le", "<="), ("\\ge", ">="),
              ("\\lt", "<"), ("\\gt", ">"), ("≤", "<="), ("≥", ">="))  # fmt: skip
_RELATION_SPLIT = re.compile(r"(<=|>=|<|>)")
_VARIABLE = re.compile(rf"^{_NAME}$")
MAX_CANDIDATES = 6


def _outer_dollars_removed(text: str) -> str:
    """``$f(n)=n$, $g(n)=1$`` -> ``f(n)=n, g(n)=1``: unescaped dollar signs are math delimiters, not value."""
    if "$" not in text:
        return text
    out, index = [], 0
    while index < len(text):
        if text[index] == "\\" and index + 1 < len(text):
            out.append(text[index : index + 2])
            index += 2
            continue
        if text[index] != "$":
            out.append(text[index])
        index += 1
    return "".join(out).strip()


def top_level_items(text: str) -> list[str]:
    """The comma-separated items of ``text`` outside any bracket: ``(2, 2), (6, 2)`` -> 2 items;
    ``\\{1,2\\}`` and ``1,000`` are one item."""
    if re.fullmatch(r"\s*\d{1,3}(?:,\d{3})+\s*", text):
        return [text.strip()]
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:index].strip())
            start = index + 1
    items.append(text[start:].strip())
    return [item for item in items if item] if len(items) > 1 else [text.strip()]


def is_bracketed_tuple(text: str) -> bool:
    """``(1, 2)``, ``[0, 1)``, ``\\left(1,2\\right)``: one bracketed pair of several items (a point, a tuple or
    an interval), as opposed to a set ``\\{1, 2\\}`` or a bare list ``1, 2``."""
    compact = _outer_dollars_removed(text).replace("\\left", "").replace("\\right", "").strip()
    if len(compact) < 2 or compact[0] not in "([" or compact[-1] not in ")]":
        return False
    depth = 0
    for index, char in enumerate(compact):
        depth += 1 if char in "([{" else -1 if char in ")]}" else 0
        if depth == 0 and index < len(compact) - 1:
            return False  # "(1)+(2)": the first bracket closes before the end
    return len(top_level_items(compact[1:-1])) >= 2


def _matching_open(text: str, close_index: int) -> int:
    depth = 0
    for index in range(close_index, -1, -1):
        if text[index] == "}":
            depth += 1
        elif text[index] == "{":
            depth -= 1
            if depth == 0:
                return index
    return -1


def _strip_spacing_end(text: str) -> str:
    changed = True
    while changed:
        changed = False
        text = text.rstrip()
        for token in _SPACING:
            if text.endswith(token):
                text, changed = text[: -len(token)], True
    return text


def _ends_with_value(text: str) -> bool:
    return bool(text) and (text[-1].isdigit() or text[-1] in ")}" or text.endswith("\\pi") or text.endswith("\\infty"))


def strip_trailing_unit(text: str) -> str:
    """``125\\textnormal{ miles}`` -> ``125``; ``28 pct`` -> ``28``; ``10\\text{ cm}^2`` -> ``10``; else ``text``."""
    stripped = _strip_spacing_end(text.strip().rstrip("."))
    without_power = _EXPONENT_SUFFIX.sub("", stripped)
    if without_power.endswith("}"):
        open_index = _matching_open(without_power, len(without_power) - 1)
        before = without_power[:open_index] if open_index > 0 else ""
        command = next((name for name in TEXT_COMMANDS if before.rstrip().endswith(name)), None)
        if command is not None and _WORDS.match(without_power[open_index + 1 : -1].strip() or "?"):
            value = _strip_spacing_end(before.rstrip()[: -len(command)])
            if len(without_power[open_index + 1 : -1].strip().replace(" ", "")) >= 2 and _ends_with_value(value):
                return value
    match = _PLAIN_UNIT.search(stripped)
    if match is not None:
        value = _strip_spacing_end(stripped[: match.start()])
        if _ends_with_value(value):
            return value
    return text


def strip_choice_label(text: str) -> str:
    """``3 \\textbf{(C)}`` -> ``3``; ``30^\\circ, \\textbf{B}`` -> ``30^\\circ``: the option letter a model adds
    after the value of a multiple-choice problem (a letter alone is left to the choice-letter rule)."""
    match = _CHOICE_SUFFIX.search(text)
    if match is None:
        return text
    value = _strip_spacing_end(text[: match.start()])
    return value if _ends_with_value(value) or value.endswith("\\circ") else text


def _equation_sides(text: str) -> Optional[tuple[str, str]]:
    if text.count("=") != 1 or any(token in text for token in ("\\le", "\\ge", "<", ">", "\\ne")):
        return None
    lhs, rhs = text.split("=")
    return (lhs, rhs) if rhs.strip() else None


def strip_named_lhs(text: str) -> Optional[tuple[str, bool]]:
    """(right-hand side(s), is_ratio) when every comma-separated item of ``text`` is ``name = value``;
    ``V_1:V_2=11:21`` -> (``11:21``, True); ``x_1=1, x_2=-3`` -> (``1, -3``, False); else None."""
    values, ratio = [], False
    for item in top_level_items(text):
        sides = _equation_sides(item)
        if sides is None or not _NAMED_LHS.match(sides[0]):
            return None
        ratio = ratio or ":" in sides[0]
        values.append(sides[1].strip())
    return ", ".join(values), ratio


def ratio_as_fraction(text: str) -> Optional[str]:
    """``11:21`` -> ``\\frac{11}{21}`` (only called where the context says it is a ratio)."""
    match = _RATIO.match(text)
    return f"\\frac{{{match.group(1)}}}{{{match.group(2)}}}" if match else None


_DOUBLED_RELATION = re.compile(r"\\\\(leqslant|geqslant|leq|geq|le|ge|lt|gt|in)(?![a-zA-Z])")
_SET_BUILDER = re.compile(rf"^\\\{{\s*({_NAME})\s*(?:\\mid|\||:)\s*(.+?)\s*\\\}}$")


def interval_with_variable(text: str) -> Optional[tuple[str, str]]:
    """(interval, variable) of an inequality, a membership or a set-builder ``\\{x \\mid -2 \\le x \\le 7\\}``;
    ``-2 \\le x \\le 7`` -> (``[-2,7]``, ``x``); a doubled backslash before a relation (``-2 \\\\le x``, an
    escaping slip: ``\\\\`` then "le" has no other reading here) counts as one; else None."""
    compact = _DOUBLED_RELATION.sub(r"\\\1", text.replace("\\left", "").replace("\\right", "")).strip()
    builder = _SET_BUILDER.match(compact)
    if builder:
        inner = interval_with_variable(builder.group(2))
        return inner if inner is not None and inner[1] == builder.group(1) else None
    membership = _MEMBERSHIP.match(compact)
    if membership:
        return membership.group(2).strip(), membership.group(1)
    for latex, symbol in _RELATIONS:
        compact = re.sub(re.escape(latex) + r"(?![a-zA-Z])", symbol, compact)
    parts = [part.strip() for part in _RELATION_SPLIT.split(compact)]
    if len(parts) == 5 and _VARIABLE.match(parts[2]) and parts[0] and parts[4]:
        low, low_op, variable, high_op, high = parts
        if low_op[0] == ">" and high_op[0] == ">":  # 7 >= x >= -2
            low, high, low_op, high_op = high, low, high_op, low_op
        elif not (low_op[0] == "<" and high_op[0] == "<"):
            return None
        return f"{'[' if low_op.endswith('=') else '('}{low},{high}{']' if high_op.endswith('=') else ')'}", variable
    if len(parts) == 3 and parts[0] and parts[2]:
        if _VARIABLE.match(parts[0]):
            variable_left, op, bound, variable = True, parts[1], parts[2], parts[0]
        elif _VARIABLE.match(parts[2]):
            variable_left, op, bound, variable = False, parts[1], parts[0], parts[2]
        else:
            return None
        upper = (op[0] == "<") == variable_left  # x < b or b > x: bounded above
        closed = op.endswith("=")
        if upper:
            return f"(-\\infty,{bound}{']' if closed else ')'}", variable
        return f"{'[' if closed else '('}{bound},\\infty)", variable
    return None


def as_interval(text: str) -> Optional[str]:
    """``-2 \\le x \\le 7`` -> ``[-2,7]``; ``x > 3`` -> ``(3,\\infty)``; ``x \\in [-2,7]`` -> ``[-2,7]``; else None."""
    found = interval_with_variable(text)
    return found[0] if found else None


def interval_variable(text: str) -> Optional[str]:
    """The variable an inequality or membership names (``x`` in ``x \\in [-2,7]``), or None."""
    found = interval_with_variable(_outer_dollars_removed(text))
    return found[1] if found else None


_RADICAL_PAREN = re.compile(r"\\sqrt(\[[^\[\]]{1,20}\])?\s*\(")


def braced_radicals(text: str) -> str:
    """``4\\sqrt(2)`` -> ``4\\sqrt{2}``, ``\\sqrt[3](x+1)`` -> ``\\sqrt[3]{x+1}``; balanced parentheses only."""
    out, index = [], 0
    for match in _RADICAL_PAREN.finditer(text):
        if match.start() < index:
            continue
        depth, close = 0, -1
        for position in range(match.end() - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[position], 0)
            if depth == 0:
                close = position
                break
        if close == -1:
            continue
        out.append(text[index : match.start()] + "\\sqrt" + (match.group(1) or "") + "{" + braced_radicals(text[match.end() : close]) + "}")
        index = close + 1
    return "".join(out) + text[index:] if out else text


_CJK = "\u3400-\u4dbf\u4e00-\u9fff\u3000-\u303f\uff00-\uffef"
_HAS_CJK = re.compile(f"[{_CJK}]")
_CJK_TEXT_COMMAND = re.compile(r"\\(?:text|textnormal|textrm|mbox|mathrm)\s*\{([^{}]*)\}")
_CJK_PREFIX = re.compile(f"^(?:[{_CJK}\\s:：,，]*(?:是|为|為|等于|等於|答案|:|：)\\s*)?")
_CJK_REFUSED = ("不", "非", "没", "無", "无", "否", "未", "至少", "至多", "最多", "最少", "超过", "以上", "以下", "大于", "小于", "约", "大概", "可能", "或")
_CJK_SUFFIX = re.compile("\\s*(?:元|个|米|厘米|千米|公里|度|秒|分钟|小时|天|年|人|种|次|平方米)?[\\s。．.，,！!；;）)]*$")


def strip_cjk_sentence(text: str) -> str:
    """``所以答案是\\frac{1}{2}。`` -> ``\\frac{1}{2}``; ``text`` itself unless the module docstring's rule holds."""
    if not _HAS_CJK.search(text):
        return text
    plain = _CJK_TEXT_COMMAND.sub(lambda match: match.group(1) if _HAS_CJK.search(match.group(1)) else match.group(0), text).strip()
    prefix = _CJK_PREFIX.match(plain)  # always matches (possibly empty)
    if prefix is None or any(word in prefix.group(0) for word in _CJK_REFUSED):
        return text
    suffix = _CJK_SUFFIX.search(plain, prefix.end())
    value = _outer_dollars_removed(plain[prefix.end() : suffix.start() if suffix else len(plain)])
    if not value or _HAS_CJK.search(value):
        return text
    return value


@dataclass(frozen=True)
class Candidates:
    """Raw-LaTeX candidates of one answer, most literal first; ``ratio``: a:b here means a/b."""

    texts: tuple[str, ...]
    ratio: bool = False


def has_named_lhs(answer: str) -> bool:
    return strip_named_lhs(_outer_dollars_removed(answer)) is not None


def expand(answer: str, strip_lhs: bool = True, ratio_context: bool = False) -> Candidates:
    """Every form of ``answer`` listed in the module docstring (deduplicated, at most MAX_CANDIDATES).

    ``strip_lhs=False`` keeps named left-hand sides: when both answers name their unknowns
    (``x_1=-3, x_2=1`` vs ``x_1=1, x_2=-3``) the names are part of the answer."""
    base = braced_radicals(_outer_dollars_removed(answer))
    texts = [base]
    sentence_value = strip_cjk_sentence(base)
    if sentence_value != base:
        texts.append(sentence_value)
    ratio = False
    named = strip_named_lhs(base)
    if named is not None:
        ratio = named[1]
    if named is not None and strip_lhs:
        texts.append(named[0])
    for text in list(texts):
        unlabelled = strip_choice_label(text)
        if unlabelled != text:
            texts.append(unlabelled)
    for text in list(texts):
        unitless = strip_trailing_unit(text)
        if unitless != text:
            texts.append(unitless)
        interval = as_interval(text)
        if interval is not None:
            texts.append(interval)
    if ratio or ratio_context:
        texts.extend(fraction for fraction in (ratio_as_fraction(text) for text in list(texts)) if fraction)
    return Candidates(tuple(dict.fromkeys(text for text in texts if text.strip()))[:MAX_CANDIDATES], ratio)
