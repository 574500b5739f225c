"""Lenient integer answers: reward 1.0 iff the last number in the response is the (integer) answer.

For the synthetic tasks of ``data_prep/arithmetic.py`` (data_source ``arithmetic/<task>``), whose
prompts ask for "just the number" but whose small models answer in sentences ("7 + 5 equals 12.").
Numbers are maximal runs of digits with an optional leading minus sign (``-`` or the Unicode minus
``−``), thousands separators ("1,234") and decimals ("12.0"); the last one counts when it is a whole
number ("12.0" and "12.00" are 12, "12.5" is no integer answer). A sentence's full stop is not a
decimal point ("equals 12." is 12).
"""

from __future__ import annotations

import re
from decimal import Decimal

_NUMBER = re.compile(r"[-\u2212]?\d+(?:,\d{3})*(?:\.\d+)?(?!\d)")


def last_integer(text: str) -> int | None:
    """The last number in ``text`` if it is a whole number, else ``None`` (also when there is none)."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    value = Decimal(found[-1].replace(",", "").replace("\u2212", "-"))
    return int(value) if value == value.to_integral_value() else None


def last_integer_score(solution_str: str, ground_truth: str) -> float:
    """1.0 if the last number of the response is whole and equals ``int(ground_truth)``, else 0.0."""
    answer = last_integer(str(solution_str))
    try:
        expected = int(str(ground_truth).strip())
    except ValueError:
        return 0.0
    return float(answer is not None and answer == expected)
