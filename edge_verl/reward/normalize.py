"""String normalisation of answers (pure, linear time): what two answers must share to be equal as text.

Follows the public MATH grading conventions (Hendrycks et al.'s ``strip_string``): no spaces, no
``\\left``/``\\right``/``\\!``, dollar and percent signs and degree marks dropped, ``\\text{...}`` unwrapped,
``\\dfrac``/``\\tfrac`` -> ``\\frac``, a trailing period dropped, a leading "x =" dropped for a bare value.
"""

from __future__ import annotations

import re

from edge_verl.reward.forms import TEXT_COMMANDS, UNIT_WORDS

_REMOVE = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\ ", "\\displaystyle", "^\\circ", "^{\\circ}", "\\circ", "\\$", "\\%", "$", "%", "°")
_TEXT_COMMANDS = (*TEXT_COMMANDS, "\\mathbf")  # unwrapped for comparison; a \\mathbf{} word is not dropped as a unit
# A unit word directly after a number at the very end ("10cm" once \text{ cm} is unwrapped and spaces go).
_UNIT_WORDS = re.compile(r"(?<=\d)(" + "|".join(re.escape(word) for word in sorted(UNIT_WORDS, key=len, reverse=True)) + r")$")
_ASSIGNMENT = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?=(?=[^=]+$)")
_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")
_TIME = re.compile(r"^\d{1,2}:\d{2}(?::\d{2})?(?:am|pm|a\.m\.|p\.m\.)?$", re.IGNORECASE)
MAX_NORMALISED_CHARS = 2000


def unwrap_commands(text: str, commands: tuple[str, ...] = _TEXT_COMMANDS) -> str:
    """``\\text{abc}`` -> ``abc`` for each command in ``commands`` (balanced braces, linear scan)."""
    for command in commands:
        marker = command + "{"
        start = text.find(marker)
        while start != -1:
            depth, index = 0, start + len(command)
            while index < len(text):
                if text[index] == "{":
                    depth += 1
                elif text[index] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                index += 1
            if index >= len(text):
                break
            text = text[:start] + text[start + len(marker) : index] + text[index + 1 :]
            start = text.find(marker, start)
    return text


def normalise_answer(answer: object) -> str:
    """Canonical text of an answer for exact comparison; "" for None."""
    if answer is None:
        return ""
    text = str(answer)[:MAX_NORMALISED_CHARS].strip()
    text = unwrap_commands(text)
    for token in _REMOVE:
        text = text.replace(token, "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = "".join(text.split())
    text = _UNIT_WORDS.sub("", text)
    text = text.rstrip(".").strip()
    text = _ASSIGNMENT.sub("", text)
    if text.startswith("{") and text.endswith("}") and text.count("{") == 1:
        text = text[1:-1]
    return text


def choice_letter(normalised: str) -> str | None:
    """A ``normalise_answer`` result "(B)", "B", "b" -> "B"; None unless it is a lone multiple-choice letter."""
    match = _CHOICE.match(normalised)
    return match.group(1).upper() if match else None


# A choice letter that opens the answer, then an explanation: "B。不是 A", "D. it can't be A or B", "(C) since".
_LEADING_CHOICE = re.compile(r"^\s*(?:\(([A-E])\)|([A-E])\s*[.。:：)）])\s*(\S.*)$", re.DOTALL)
# ... unless the explanation starts with another option: "A. B. C.", "A) or B)" hedge between letters.
_ANOTHER_CHOICE = re.compile(r"^(?:or|and|或者|或|和|、|,|，|/)?\s*\(?[A-E]\)?(?:[\s.,。，:：)）/]|$)", re.IGNORECASE)


def leading_choice_letter(answer: str) -> str | None:
    """"B。不是 A" -> "B", "D. it can't be A or B" -> "D": an upper-case option letter closed by a period,
    colon or parenthesis, then an explanation that does not start with another option; None otherwise
    (a letter followed by bare words, "A or B", is a hedge, not an answer)."""
    match = _LEADING_CHOICE.match(unwrap_commands(answer))
    if match is None or _ANOTHER_CHOICE.match(match.group(3)):
        return None
    return match.group(1) or match.group(2)


def is_time_of_day(normalised: str) -> bool:
    """A ``normalise_answer`` result like "4:30" or "12:05pm": math-verify would read these as ratios
    (4/30), so they compare as text only."""
    return bool(_TIME.match(normalised))
