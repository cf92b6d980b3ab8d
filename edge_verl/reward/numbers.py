"""Number formats decided as text, with exact arithmetic (pure strings, ``decimal``/``fractions`` only).

Nothing here evaluates model text: a value is read only from a tiny grammar (sign, digits, one decimal
point or comma, ``\\frac{p}{q}`` / ``p/q`` of integers), anything else is "not a number here".
- A decimal comma (``1000,99`` for 1000.99, ``0,111`` for 0.111): ``decimal_comma_value`` reads it only
  when it cannot be a thousands separator (``1,222`` could be 1222: refused, it stays 0 against 1.222),
  and ``grade.grade_by_text`` uses it only against a gold that is itself one decimal number (with a point,
  or a decimal comma), where a list "1000, 99" cannot be meant.
- An interval written with decimals against exact endpoints (``(0.6, 2.6667]`` for ``(3/5, 8/3]``):
  ``intervals_agree``: same brackets, and each endpoint exact or the gold's endpoint correctly rounded to
  the places written with at least ``MIN_SIGNIFICANT_DIGITS`` significant digits (2.6667 and 2.667 pass;
  2.67, 2.7 and 2.66 do not). Scalars keep exact comparison (``0.33`` is not 1/3): only an interval's
  endpoints, which models routinely write as decimals, are read this way.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Optional

MIN_SIGNIFICANT_DIGITS = 4
_DECIMAL_COMMA = re.compile(r"^[+-]?\d{1,30},\d{1,30}$")
_THOUSANDS = re.compile(r"^[+-]?[1-9]\d{0,2}(?:,\d{3})+$")
_DECIMAL_POINT = re.compile(r"^[+-]?\d{0,30}\.\d{1,30}$")
_INTEGER_OR_DECIMAL = re.compile(r"^([+-]?)(\d{1,30})(?:\.(\d{1,30}))?$")
_FRACTIONS = (
    re.compile(r"^([+-]?)\\[dt]?frac\{(\d{1,30})\}\{(\d{1,30})\}$"),  # \frac{8}{3}
    re.compile(r"^([+-]?)\\[dt]?frac(\d)(\d)$"),  # \frac83
    re.compile(r"^([+-]?)(\d{1,30})/(\d{1,30})$"),  # 8/3
)
_INTERVAL = re.compile(r"^([(\[])([^,()\[\]]+),([^,()\[\]]+)([)\]])$")
_INFINITY = re.compile(r"^([+-]?)\\infty$")


def decimal_comma_value(text: str) -> Optional[Decimal]:
    """``1000,99`` -> 1000.99; None unless ``text`` (spaces removed) is digits, one comma, digits and not
    a possible thousands grouping."""
    if not _DECIMAL_COMMA.match(text) or _THOUSANDS.match(text):
        return None
    return Decimal(text.replace(",", "."))


def decimal_point_value(text: str) -> Optional[Decimal]:
    """``1000.99`` / ``.4`` -> the Decimal; None unless ``text`` is one decimal number with a point."""
    return matched_decimal(_DECIMAL_POINT, text)


def matched_decimal(pattern: re.Pattern, text: str) -> Optional[Decimal]:
    """``Decimal(text)`` when ``pattern`` (a plain-number regex) matches ``text``, else None."""
    if not pattern.match(text):
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def single_decimal_value(text: str) -> Optional[Decimal]:
    """The value of a gold or answer written as one decimal number, with a point or a decimal comma."""
    value = decimal_point_value(text)
    return value if value is not None else decimal_comma_value(text)


def exact_value(text: str) -> Optional[Fraction]:
    """The exact value of an integer, a decimal or a fraction of integers written as text; None otherwise."""
    match = _INTEGER_OR_DECIMAL.match(text)
    if match:
        sign, whole, places = match.groups()
        value = Fraction(int(whole + (places or "")), 10 ** len(places or ""))
        return -value if sign == "-" else value
    match = next((found for found in (pattern.match(text) for pattern in _FRACTIONS) if found), None)
    if match is None or int(match.group(3)) == 0:
        return None
    value = Fraction(int(match.group(2)), int(match.group(3)))
    return -value if match.group(1) == "-" else value


def _significant_digits(text: str) -> int:
    return len(text.lstrip("+-").replace(".", "").lstrip("0"))


def _endpoint_agrees(pred: str, gold: str) -> bool:
    if _INFINITY.match(pred) or _INFINITY.match(gold):
        return bool(_INFINITY.match(pred)) and bool(_INFINITY.match(gold)) and pred.startswith("-") == gold.startswith("-")
    pred_value, gold_value = exact_value(pred), exact_value(gold)
    if pred_value is None or gold_value is None:
        return False
    if pred_value == gold_value:
        return True
    if "." not in pred or _significant_digits(pred) < MIN_SIGNIFICANT_DIGITS:
        return False
    places = len(pred.split(".")[1])
    # the gold's value correctly rounded to the places written: |pred - gold| <= half a unit in the last place
    return abs(pred_value - gold_value) * 2 * 10**places <= 1


def intervals_agree(pred: str, gold: str) -> bool:
    """Whether the normalised interval ``pred`` (``(0.6,2.6667]``) is the normalised interval ``gold``
    (``(\\frac{3}{5},\\frac{8}{3}]``) as the module docstring reads decimals; False when either is not an
    interval of such endpoints."""
    pred_match, gold_match = _INTERVAL.match(pred), _INTERVAL.match(gold)
    if pred_match is None or gold_match is None:
        return False
    if (pred_match.group(1), pred_match.group(4)) != (gold_match.group(1), gold_match.group(4)):
        return False
    return all(_endpoint_agrees(pred_match.group(i), gold_match.group(i)) for i in (2, 3))
