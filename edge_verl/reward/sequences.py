"""Sequences and ratios written with an ellipsis (pure strings, linear time): compared term by term.

math-verify 0.9.0 reads such an answer as whatever it parses before the ellipsis -- the set {1, 2, 3} from
``1,2,3,\\ldots``, the number 8 from ``1, 2, 4, 8, \\ldots``, 9 from ``1, 4, 9, \\ldots, n^3`` -- so two
sequences whose written terms differ could compare equal, and a listed sequence could equal a gold without an
ellipsis as a merged set. Here such an answer is decided by its shape and its written terms instead, never by
math-verify on the whole text.

What counts as an *ellipsis sequence* (``ellipsis_sequence``): an answer whose top-level items, separated by
commas, semicolons or colons (outside any bracket, so ``f(1, 2)`` is one item; ``\\,`` and ``\\:`` are spacing,
not separators), include an ellipsis. Spellings: ``\\ldots``, ``\\cdots``, ``\\dots`` (and ``\\dotsc``,
``\\dotsb``, ``\\dotsm``, ``\\dotso``, ``\\dotsi``, ``\\hdots``), ``\\mathellipsis``, ``\\textellipsis``,
three ``\\cdot``/``\\ldotp``/``\\cdotp`` in a row, three or more periods (spaces between allowed), ``…``,
``⋯``, each optionally inside ``\\text{}``/``\\mbox{}``. An ellipsis is an item of its own (``1, 2, \\ldots``)
or stands at the start or end of an item (``1, 2, 4\\ldots``, ``\\ldots n``) -- unless an operator touches
it: ``1 + 2 + \\cdots + n`` is one term, ``0.333\\ldots`` (no separator) is no sequence at all. One outer
bracket pair is the enclosure: a set ``\\{1, 2, \\ldots\\}``, or a tuple in parentheses / brackets / angle
brackets (alike). As for answers without an ellipsis (``grade._set_against_tuple``), a bare list fits either,
a tuple never fits a set.

Two ellipsis sequences have the same shape (``term_pairs``) when they have as many items, the ellipses at the
same positions, enclosures that fit, and in each gap the same separator: a colon is a ratio, a
comma or a semicolon a list; a side that mixes commas and semicolons is taken as written (its semicolons
group: ``1, 2; 3, 4; \\ldots`` is not ``1, 2, 3, 4, \\ldots``); an ellipsis attached to its term fits any
separator. Then each pair of written terms is graded through the whole existing machinery
(``grade.compare_by_text``, then math-verify in a grading worker, all under the one deadline), and the answer
is right when every pair is. Otherwise it scores 0 -- in particular:
- a different number of written terms (``1, 2, 4, \\ldots`` against ``1, 2, 4, 8, \\ldots``): which
  continuation the gold means is not the grader's to guess;
- an ellipsis elsewhere (``1, \\ldots, 10`` against ``1, 10, \\ldots``);
- an ellipsis on one side only (``1, 2, 3, \\ldots`` against ``1, 2, 3``, or against ``\\mathbb{N}``);
- terms in another order, also in a set: an enumeration with an ellipsis is read in its written order;
- a ratio up to scale (``2:4:\\ldots`` is not ``1:2:\\ldots``): its written terms are compared;
- more than MAX_SEQUENCE_ITEMS items, or a sequence inside terms deeper than ``grade.MAX_SEQUENCE_DEPTH``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Optional

MAX_SEQUENCE_ITEMS = 64
_DOTS = (
    r"(?:\\(?:ldots|cdots|dots[cbmoi]?|hdots|mathellipsis|textellipsis)(?![A-Za-z])(?:\s*\{\s*\})?"
    r"|(?:\\(?:cdot|ldotp|cdotp)(?![A-Za-z])\s*){3}|\.(?:\s*\.){2,}|…|⋯)"
)
_ELLIPSIS = rf"(?:{_DOTS}|\\(?:text|textrm|textnormal|mbox|mathrm)\s*\{{\s*{_DOTS}\s*\}})"
_ANY_ELLIPSIS = re.compile(_ELLIPSIS)
_WHOLE = re.compile(rf"{_ELLIPSIS}\.?")
_LEADING = re.compile(_ELLIPSIS)
_TRAILING = re.compile(rf"{_ELLIPSIS}\.?$")
_OPERATOR = r"(?:[+\-*/=<>^_]|\\(?:cdot|times|div|pm|mp|le|ge|leq|geq|lt|gt|ne|neq|approx|equiv|sim|to|rightarrow|cup|cap|circ|oplus|otimes|wedge|vee)(?![A-Za-z]))"
_STARTS_WITH_OPERATOR = re.compile(_OPERATOR)
_ENDS_WITH_OPERATOR = re.compile(rf"{_OPERATOR}$")
_SIZE_COMMANDS = re.compile(r"\\(?:left|right|[bB]igg?[lr]?)(?![A-Za-z])\s*\.?")
_EDGE_SPACE = ("~", "\\,", "\\;", "\\:", "\\!", "\\ ", "\\quad", "\\qquad")
_OPENERS = frozenset(("(", "[", "{", "\\{", "\\langle"))
_CLOSERS = frozenset((")", "]", "}", "\\}", "\\rangle"))
_SEPARATORS = frozenset(",;:")
ATTACHED = ""  # the gap between a term and an ellipsis written against it (``4\\ldots``)
SET, TUPLE, BARE = "set", "tuple", ""  # enclosures


@dataclass(frozen=True)
class EllipsisSequence:
    """An answer written as a sequence or ratio with an ellipsis. ``items``: the written terms as written,
    None where an ellipsis stands; ``gaps``: between consecutive items, the separator's class (``list`` for
    commas and semicolons alike, ``ratio`` for a colon; ``,`` and ``;`` as written on a side that mixes them;
    ATTACHED for an ellipsis without one); ``enclosure``: SET (``\\{ \\}``), TUPLE (another bracket pair) or BARE."""

    items: tuple[Optional[str], ...]
    gaps: tuple[str, ...]
    enclosure: str = BARE


def _tokens(text: str) -> Iterator[tuple[int, str, int]]:
    """(index, token, depth) for each character or command of ``text``, ``depth`` being the bracket depth
    before it; ``\\{``, ``\\}``, ``\\langle``, ``\\rangle`` are brackets, ``\\,`` and ``\\:`` are one token."""
    depth, index = 0, 0
    while index < len(text):
        end = index + 1
        if text[index] == "\\" and end < len(text):
            if text[end].isalpha():
                while end < len(text) and text[end].isalpha():
                    end += 1
            else:
                end += 1
        token = text[index:end]
        yield index, token, depth
        depth += (token in _OPENERS) - (token in _CLOSERS)
        index = end


def _enclosed(text: str) -> tuple[str, str]:
    """(the inside, SET / TUPLE / BARE) when one bracket pair encloses all of ``text`` (plain braces ``{...}``
    group: BARE); else (``text``, BARE)."""
    tokens = list(_tokens(text))
    if len(tokens) < 2 or tokens[0][1] not in _OPENERS or tokens[-1][1] not in _CLOSERS:
        return text, BARE
    for _, token, depth in tokens[1:-1]:
        if depth == 1 and token in _CLOSERS:
            return text, BARE  # "(1)+(2)": the first bracket closes before the end
    first, last = tokens[0][1], tokens[-1][1]
    enclosure = SET if (first, last) == ("\\{", "\\}") else BARE if (first, last) == ("{", "}") else TUPLE
    return text[len(first) : tokens[-1][0]], enclosure


def _split(text: str) -> tuple[list[str], list[str]]:
    """The items of ``text`` at bracket depth 0 and the separators (``,`` ``;`` ``:``) between them."""
    items, separators, start = [], [], 0
    for index, token, depth in _tokens(text):
        if depth == 0 and token in _SEPARATORS:
            items.append(text[start:index])
            separators.append(token)
            start = index + 1
    items.append(text[start:])
    return items, separators


def _without_spacing(text: str) -> str:
    """``text`` without spaces and spacing commands (``\\,``, ``~``, ``\\quad``) at either end."""
    changed = True
    while changed and text:
        changed, text = False, text.strip()
        for token in _EDGE_SPACE:
            if text.startswith(token):
                text, changed = text[len(token) :], True
            if text.endswith(token) and not text.endswith("\\" + token):
                text, changed = text[: -len(token)], True
    return text


def _parts(item: str) -> list[Optional[str]]:
    """``4\\ldots`` -> ["4", None]; ``\\ldots n`` -> [None, "n"]; ``\\ldots`` -> [None]; ``1+\\cdots+n`` -> itself.
    Peels at most MAX_SEQUENCE_ITEMS ellipses (a longer sequence is refused anyway)."""
    head: list[Optional[str]] = []
    tail: list[Optional[str]] = []
    text = _without_spacing(item)
    while len(head) + len(tail) <= MAX_SEQUENCE_ITEMS:
        if _WHOLE.fullmatch(text):
            return [*head, None, *tail]
        leading = _LEADING.match(text)
        rest = _without_spacing(text[leading.end() :]) if leading else ""
        if leading and rest and not _STARTS_WITH_OPERATOR.match(rest):
            head.append(None)
            text = rest
            continue
        trailing = _TRAILING.search(text)
        rest = _without_spacing(text[: trailing.start()]) if trailing else ""
        if trailing and rest and not _ENDS_WITH_OPERATOR.search(rest):
            tail.insert(0, None)
            text = rest
            continue
        break
    return [*head, text, *tail]


def ellipsis_sequence(text: str) -> Optional[EllipsisSequence]:
    """``text`` read as an ellipsis sequence (module docstring), or None when it is not one."""
    if not _ANY_ELLIPSIS.search(text):
        return None
    inside, enclosure = _enclosed(_SIZE_COMMANDS.sub("", text).strip())
    items, separators = _split(inside.strip())
    if not separators:
        return None
    mixed = {",", ";"} <= set(separators)
    classes = [("ratio" if separator == ":" else separator if mixed else "list") for separator in separators]
    parts: list[Optional[str]] = []
    gaps: list[str] = []
    for index, item in enumerate(items):
        pieces = _parts(item)
        if index > 0:
            gaps.append(classes[index - 1])
        gaps.extend([ATTACHED] * (len(pieces) - 1))
        parts.extend(pieces)
    if None not in parts:
        return None
    return EllipsisSequence(tuple(parts), tuple(gaps), enclosure)


def _fit(pred: str, gold: str, wildcard: str) -> bool:
    return pred == gold or wildcard in (pred, gold)


def term_pairs(pred: EllipsisSequence, gold: EllipsisSequence) -> Optional[tuple[tuple[str, str], ...]]:
    """The (pred term, gold term) pairs that must all be equal when ``pred`` and ``gold`` have the same shape
    (module docstring); None when the shapes differ or either is longer than MAX_SEQUENCE_ITEMS."""
    if len(pred.items) != len(gold.items) or len(pred.items) > MAX_SEQUENCE_ITEMS or not _fit(pred.enclosure, gold.enclosure, BARE):
        return None
    if any((left is None) != (right is None) for left, right in zip(pred.items, gold.items)):
        return None
    if not all(_fit(left, right, ATTACHED) for left, right in zip(pred.gaps, gold.gaps)):
        return None
    return tuple((left, right) for left, right in zip(pred.items, gold.items) if left is not None and right is not None)
