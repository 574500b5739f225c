"""Lenient integer answers: reward 1.0 iff the last integer in the response equals the answer.

For the synthetic tasks of ``data_prep/arithmetic.py`` (data_source ``arithmetic/<task>``), whose
prompts ask for "just the number" but whose small models answer in sentences ("7 + 5 equals 12.").
Integers are maximal runs of digits with an optional leading minus sign; thousands separators
("1,234") are read as one number.
"""

from __future__ import annotations

import re

_INTEGER = re.compile(r"-?\d+(?:,\d{3})*(?!\d)")


def last_integer(text: str) -> int | None:
    """The last integer in ``text`` (``None`` if there is none)."""
    found = _INTEGER.findall(text)
    if not found:
        return None
    return int(found[-1].replace(",", ""))


def last_integer_score(solution_str: str, ground_truth: str) -> float:
    """1.0 if the last integer of the response equals ``int(ground_truth)``, else 0.0."""
    answer = last_integer(str(solution_str))
    try:
        expected = int(str(ground_truth).strip())
    except ValueError:
        return 0.0
    return float(answer is not None and answer == expected)
