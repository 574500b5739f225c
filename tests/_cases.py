"""Parametrize helpers shared by the test modules."""

from __future__ import annotations

import pytest


def slow_after(count: int, cases: list, ids: list | None = None, one_name: bool = False) -> list:
    """``cases`` for ``pytest.mark.parametrize``, the first ``count`` in the default run and the rest marked ``slow``
    (variants of one rule: the default run keeps representatives, ``-m slow`` checks them all). ``one_name``: the
    parametrize takes one name, so a tuple case is one value, not several."""
    def args(case):
        return (case,) if one_name or not isinstance(case, tuple) else case

    return [case if i < count else pytest.param(*args(case), marks=pytest.mark.slow, id=None if ids is None else ids[i])
            for i, case in enumerate(cases)]
