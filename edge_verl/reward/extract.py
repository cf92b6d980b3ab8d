"""Answer extraction from model text: pure string code, linear time, bounded output.

The grading convention of both papers is "the LAST \\boxed{...} of the response". This module finds it
without regular expressions that could backtrack, caps how far it reads and how deep braces may nest, and
never evaluates anything. Extraction is separate from grading so that the grader only ever sees a short,
balanced answer string.
"""

from __future__ import annotations

MAX_ANSWER_CHARS = 1000
MAX_NESTING = 64
BOX_COMMANDS = ("\\boxed", "\\fbox")


def _matching_brace(text: str, open_index: int, limit: int) -> int:
    """Index of the brace closing ``text[open_index] == "{"``, or -1 when unbalanced, deeper than
    MAX_NESTING, or longer than ``limit`` characters."""
    depth = 0
    end = min(len(text), open_index + limit + 2)
    index = open_index
    while index < end:
        char = text[index]
        if char == "\\" and index + 1 < end:
            index += 2  # an escaped brace (\{ or \}) is content, not structure
            continue
        if char == "{":
            depth += 1
            if depth > MAX_NESTING:
                return -1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return -1


def _box_at(text: str, start: int, command: str) -> tuple[str, int] | None:
    """(the argument of the box command starting at ``start``, the index just after the box), or None if
    it is malformed."""
    index = start + len(command)
    while index < len(text) and text[index] == " ":
        index += 1
    if index >= len(text):
        return None
    if text[index] == "{":
        close = _matching_brace(text, index, MAX_ANSWER_CHARS)
        return (text[index + 1 : close], close + 1) if close != -1 else None
    # "\boxed 42": TeX takes the next token; we take the run up to whitespace or "$".
    if text[index].isalnum() or text[index] in "-+.":
        end = index
        while end < len(text) and end - index < MAX_ANSWER_CHARS and not text[end].isspace() and text[end] not in "$\\":
            end += 1
        return text[index:end].rstrip(".,;"), end
    return None


MAX_MALFORMED_BOXES = 100


def last_boxed_spans(text: str, count: int = 1) -> list[tuple[int, int, str]]:
    """``(start, end, answer)`` of the last ``count`` well-formed ``\\boxed``/``\\fbox`` of ``text``, in
    reading order: ``text[start:end]`` is the whole box command, ``answer`` its argument (stripped).

    Scans backwards from the end with ``str.rfind`` (C speed), parsing each candidate over at most
    MAX_ANSWER_CHARS characters and giving up after MAX_MALFORMED_BOXES malformed ones, so a megabyte of
    boxes costs milliseconds."""
    if not isinstance(text, str) or not text:
        return []
    found: list[tuple[int, int, str]] = []
    end = len(text)
    malformed = 0
    while len(found) < count and malformed < MAX_MALFORMED_BOXES:
        candidates = [(text.rfind(command, 0, end), command) for command in BOX_COMMANDS]
        start, command = max(candidates)
        if start == -1:
            break
        following = text[start + len(command) : start + len(command) + 1]
        box = _box_at(text, start, command) if not following.isalpha() else None  # "\\boxedfoo" is another command
        if box is not None and box[0].strip():
            found.append((start, box[1], box[0].strip()))
        else:
            malformed += 1
        end = start
    return found[::-1]


def last_boxed_answers(text: str, count: int = 1) -> list[str]:
    """The arguments of the last ``count`` well-formed ``\\boxed``/``\\fbox`` of ``text`` (stripped), in
    reading order; fewer when there are fewer (``last_boxed_spans`` without the positions)."""
    return [answer for _, _, answer in last_boxed_spans(text, count)]


def last_boxed_answer(text: str) -> str | None:
    """The argument of the last well-formed ``\\boxed``/``\\fbox`` of ``text`` (stripped), or None.
    "\\boxed{4}, but actually \\boxed{5}" grades 5: the last answer wins."""
    answers = last_boxed_answers(text, 1)
    return answers[0] if answers else None


# Phrases that introduce a final answer in free text, searched case-insensitively from the end.
ANSWER_PHRASES = ("final answer is", "final answer:", "the answer is", "answer is", "answer:")


def phrased_final_answer(text: str, tail_chars: int = 4000) -> str | None:
    """The answer after the last "the answer is" / "Answer:" (and similar) of ``text``, up to the end of
    its line, without math delimiters or a final period; None when there is no such phrase. For the
    lenient format policy: prompts that do not ask for a box. Pure string search over the last
    ``tail_chars`` characters."""
    if not isinstance(text, str) or not text:
        return None
    tail = text[-tail_chars:]
    lowered = tail.lower()
    starts = [(lowered.rfind(phrase), phrase) for phrase in ANSWER_PHRASES]
    start, phrase = max(starts, key=lambda item: (item[0], len(item[1])))
    if start == -1:
        return None
    line = tail[start + len(phrase) :].lstrip(" :\t").split("\n", 1)[0][:MAX_ANSWER_CHARS].strip()
    line = _without_final_period(line)
    for opening, closing in (("$$", "$$"), ("\\(", "\\)"), ("\\[", "\\]"), ("$", "$")):
        if line.startswith(opening) and line.endswith(closing) and len(line) > len(opening) + len(closing):
            line = line[len(opening) : -len(closing)].strip()
            break
    return _without_final_period(line) or None


def _without_final_period(line: str) -> str:
    """``42.`` -> ``42``; ``1, 2, 4, \\ldots.`` -> ``1, 2, 4, \\ldots``; an ellipsis of periods (``1, 2, ...``,
    ``1, 2, . . .``) stays: it is part of the answer (``edge_verl.reward.sequences``)."""
    if line.replace(" ", "").endswith("..."):
        return line.strip()
    return line.rstrip(".").strip()
