"""Several boxed answers: when they are one answer together, on either side (pure strings, linear time).

The papers' rule is "the LAST box is the answer" (``\\boxed{4}, but actually \\boxed{5}`` grades 5). This
module is the one exception, and it is decided by what stands BETWEEN the boxes and by the gold:
- a *list of boxes* is a trailing run of boxes whose gaps hold only list separators (commas, semicolons,
  "and" / "和" / "、", ``\\text{ and }``, spacing, math delimiters, ``+``): ``\\boxed{1}, \\boxed{2}`` and
  ``\\[\\boxed{-2} \\quad \\text{and} \\quad \\boxed{1}.\\]`` are lists; ``\\boxed{4}, but actually
  \\boxed{5}`` and ``\\boxed{1} no no \\boxed{2}`` are not (words that are not separators end the run), and
  neither is "or" (a hedge, not a list);
- a response's list counts as the answer only when the gold has as many items (``gold_item_count``: the
  top-level items of a comma-separated gold, or the elements of a braced set ``\\{1,2,3\\}``) and the list
  is exactly that long -- never against a one-item gold (a wrong answer must not grade right: several boxes
  against a single value stay graded by the last box), and never the last k of a longer list
  (``\\boxed{1}, \\boxed{2}, \\boxed{3}`` is not the answer ``\\{2, 3\\}``). Against a set gold the list is
  compared as a set;
- a gold that contains boxes (a reference solution given as ground truth) is its list of boxes when they
  form one, else its last box (``gold_from_boxes``), the convention of a response with one allowance: a
  gold's words between boxes may label them when they say "and" without a hedge (``\\boxed{1} papers and
  \\boxed{2} bins`` is the list 1, 2; ``joins_gold_boxes``). So the gold ``\\boxed{1} no no \\boxed{2}`` is 2,
  and a boxed tuple ``(1, 2)`` does not equal it; a gold list of boxes is a set of answers, which a tuple
  (one point) is not either.
"""

from __future__ import annotations

import re
from typing import Sequence

from edge_verl.reward.extract import last_boxed_spans
from edge_verl.reward.forms import top_level_items

MAX_JOINED_BOXES = 8
# A gold given as a whole reference solution may be long; only its boxes are read (linear scan).
MAX_GOLD_SOLUTION_CHARS = 100_000
_GAP_NOISE = re.compile(r"\\(?:quad|qquad|text|mathrm|textnormal|textbf|mbox)\b|\\[,;:! ]|\\\(|\\\)|\\\[|\\\]|[$~{}\\]")
_SEPARATOR_GAP = re.compile(r"^[\s,;+&、，；]*(?:(?:and|和|以及|及)[\s,;+&、，；]*)?$", re.IGNORECASE)
_GOLD_AND = re.compile(r"\band\b|和", re.IGNORECASE)
_HEDGE = re.compile(r"\b(?:or|but|no|not|actually|wait|maybe)\b|或|不", re.IGNORECASE)
_ESCAPED_SET = re.compile(r"^\s*\\\{.*\\\}\s*$", re.DOTALL)
_SET = re.compile(r"^\s*(?:\\\{|\{)(.*)(?:\\\}|\})\s*$", re.DOTALL)


def is_list_separator(gap: str) -> bool:
    """Whether the text between two boxes joins them into one list (module docstring)."""
    return len(gap) <= 80 and bool(_SEPARATOR_GAP.match(_GAP_NOISE.sub(" ", gap)))


def joins_gold_boxes(gap: str) -> bool:
    """Whether the text between two boxes of a GOLD joins them: a list separator, or words with "and" and no
    hedge (``\\boxed{1} papers and \\boxed{2} bins``, ``\\boxed{(3, 3)} \\text{ for part (a) and } ...``); a
    reference's words label its answers, a model's words (``but actually``) may retract one."""
    return is_list_separator(gap) or (len(gap) <= 80 and bool(_GOLD_AND.search(gap)) and not _HEDGE.search(gap))


def trailing_box_list(text: str, spans: Sequence[tuple[int, int, str]], joins=is_list_separator) -> list[str]:
    """The answers of the longest run of last boxes in ``spans`` (``last_boxed_spans(text)``) whose gaps
    ``joins`` accepts; one answer when the last box stands alone, [] when there is no box."""
    if not spans:
        return []
    run = [spans[-1]]
    for previous in reversed(spans[:-1]):
        if not joins(text[previous[1] : run[0][0]]):
            break
        run.insert(0, previous)
    return [answer for _, _, answer in run]


def _outer_dollars_stripped(text: str) -> str:
    stripped = text.strip()
    while stripped.startswith("$") and stripped.endswith("$") and len(stripped) > 1:
        stripped = stripped[1:-1].strip()
    return stripped


def set_elements(gold: str) -> list[str] | None:
    """``\\{1,2,3\\}`` or ``{1, 2, 3}`` -> ["1", "2", "3"]; None when ``gold`` is not a braced set."""
    match = _SET.match(_outer_dollars_stripped(gold))
    if match is None:
        return None
    items = top_level_items(match.group(1))
    return items if len(items) >= 2 else None


def is_escaped_set(text: str) -> bool:
    """``\\{1, 2\\}``: a set in LaTeX; a bare ``{1, 2}`` is only a group (``set_elements`` counts both)."""
    return bool(_ESCAPED_SET.match(_outer_dollars_stripped(text))) and set_elements(text) is not None


def gold_item_count(gold: str) -> int:
    """How many answers ``gold`` lists: its top-level comma-separated items, or the elements of a set."""
    elements = set_elements(gold)
    return len(elements) if elements is not None else len(top_level_items(_outer_dollars_stripped(gold)))


def joined_boxes(box_list: Sequence[str], golds: Sequence[str]) -> list[str]:
    """The response's list of boxes (``trailing_box_list``) as one answer, for each gold that has exactly as
    many items (2 to MAX_JOINED_BOXES): joined with ", ", and as a set ``\\{...\\}`` against a set gold."""
    count = len(box_list)
    if not 2 <= count <= MAX_JOINED_BOXES:
        return []
    joined = ", ".join(box_list)
    forms = []
    for gold in golds:
        if gold_item_count(gold) == count:
            forms.append(f"\\{{{joined}\\}}" if set_elements(gold) is not None else joined)
    return list(dict.fromkeys(forms))


def boxes_to_read(golds: Sequence[str]) -> int:
    """How many last boxes of a response the caller reads: one more than the largest gold item count (to see
    whether a list of boxes is longer than the gold), within MAX_JOINED_BOXES + 1."""
    return min(max((gold_item_count(gold) for gold in golds), default=1), MAX_JOINED_BOXES) + 1


def gold_from_boxes(gold: str) -> str:
    """The answer of a gold that contains boxes: the set of its boxes when they form a list (``\\{1, 2\\}``:
    a list of answers, so a tuple ``(1, 2)`` is not it), else its last box; ``gold`` itself when it has no
    well-formed box."""
    if "\\boxed" not in gold and "\\fbox" not in gold:
        return gold
    text = gold[:MAX_GOLD_SOLUTION_CHARS]
    box_list = trailing_box_list(text, last_boxed_spans(text, MAX_JOINED_BOXES + 1), joins_gold_boxes)
    if not box_list:
        return gold
    return f"\\{{{', '.join(box_list)}\\}}" if 2 <= len(box_list) <= MAX_JOINED_BOXES else box_list[-1]
