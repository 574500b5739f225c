"""Lenient integer answers: reward 1.0 iff the last number in the response is the (integer) answer
and does not close an echo of the question.

For the synthetic tasks of ``data_prep/arithmetic.py`` (data_source ``arithmetic/<task>``), whose
prompts ask for "just the number" but whose small models answer in sentences ("7 + 5 equals 12.").
Numbers are maximal runs of digits with an optional leading minus sign (``-`` or the Unicode minus
``−``), thousands separators ("1,234") and decimals ("12.0"); the last one counts when it is a whole
number ("12.0" and "12.00" are 12, "12.5" is no integer answer). A sentence's full stop is not a
decimal point ("equals 12." is 12).

**An echo of the question earns nothing.** Given the question, the last number does not count when
it closes a verbatim copy of the question's operands (the text from its first number to its last,
whitespace runs read as one space), or of their beginning up to any later number (an echo cut off by
the length cap: "12, 87, 45" of "12, 87, 45, 60"). Without that, a response that only repeats "What
is 0 + 8?" ends in the answer 8, "59 or 63" would be right for every question whose second number is
the larger (half of ``larger2``'s), and a cut echo of ``largest4``'s list wherever the cut lands on
the largest. A restatement that then answers ("0 + 8 = 8", "8 + 0 = 8", "of 59 or 63, 63") still
scores 1: its last number closes no copy. A paraphrase ("the larger of 59 and 63") is not caught.
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


def echo_spans(question: str) -> list[str]:
    """The question's text from its first number to its second, third, …, last (whitespace collapsed):
    "12, 87, 45, 60" -> ["12, 87", "12, 87, 45", "12, 87, 45, 60"]; empty below two numbers."""
    text, found = _numbers_one_spaced(question)
    return [text[found[0].start() : end.end()] for end in found[1:]]


def ends_with_echo(response: str, question: str) -> bool:
    """Whether the response's last number closes a verbatim copy of one of the question's
    :func:`echo_spans` (its operands, or their beginning up to a later number)."""
    text, found = _numbers_one_spaced(response)
    if not found:
        return False
    starts = {m.start() for m in found}  # "11 + 8" holds no copy of "1 + 8"
    end = found[-1].end()
    return any(end - len(span) in starts and text[end - len(span) : end] == span for span in echo_spans(question))


def last_integer_score(solution_str: str, ground_truth: str, question: str | None = None) -> float:
    """1.0 if the last number of the response is whole and equals ``int(ground_truth)``, else 0.0;
    also 0.0 when that number closes an echo of ``question``'s operands (:func:`ends_with_echo`)."""
    response = str(solution_str)
    try:
        expected = int(str(ground_truth).strip())
    except ValueError:
        return 0.0
    if last_integer(response) != expected:
        return 0.0
    return 0.0 if question is not None and ends_with_echo(response, str(question)) else 1.0


def _numbers_one_spaced(text: str) -> tuple[str, list[re.Match]]:
    """``text`` with every whitespace run read as one space, and the matches of its numbers in it."""
    spaced = " ".join(text.split())
    return spaced, list(_NUMBER.finditer(spaced))
