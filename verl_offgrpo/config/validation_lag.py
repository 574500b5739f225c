"""What validation does to the lag: with ``sync_before_validate`` (the default) every validation syncs vLLM.

verl validates after step s when s is a multiple of ``trainer.test_freq``; the sync schedule
(:mod:`verl_offgrpo.sync.schedule`, rule ``force``) then sets s_w ← s, and the next periodic sync stays
at the next multiple of v. With ``rollout_schedule=per_step`` the lag therefore restarts at every
validation: syncs fall on the multiples of v and of f = test_freq, and a batch is at most

    max rollout lag = (longest gap between consecutive multiples of v or f) − 1  ≤ v − 1

steps stale; for v = 10, f = 5 the syncs come 5 steps apart, as with v = 5. The plugin warns where that
maximum is below v − 1, and says so in an info line where only some periods are cut short.
With ``rollout_schedule=window`` the window keeps its samples from α (the lag runs on), and each
validation inside a window costs one weight transfer and one vLLM wake more.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from .off_grpo import PREFIX, OffGRPOConfig
from .values import config_value as _get
from .values import is_int as _is_int

logger = logging.getLogger(__name__)


def longest_lag(sync_period: int, test_freq: int) -> int:
    """The largest rollout lag of a per_step run whose syncs fall on the multiples of ``sync_period`` and of
    ``test_freq``: the longest gap between two consecutive sync steps, less one (over one period, lcm(v, f))."""
    period = math.lcm(sync_period, test_freq)
    syncs = sorted({s for s in range(0, period + 1) if s % sync_period == 0 or s % test_freq == 0})
    return max(b - a for a, b in zip(syncs, syncs[1:])) - 1


def tell_if_validation_restarts_the_lag(config: Any, knobs: OffGRPOConfig) -> None:
    """When ``trainer.test_freq`` is not a multiple of ``sync_period`` and validation syncs vLLM: an info line
    (window), or for per_step a warning where that caps the lag below v − 1 (:func:`longest_lag`), else an info
    line."""
    v, test_freq = knobs.sync_period, _get(config, "trainer.test_freq", -1)
    if v <= 1 or not knobs.sync_before_validate or not _is_int(test_freq) or test_freq <= 0 or test_freq % v == 0:
        return
    if knobs.rollout_schedule == "window":
        logger.info(
            "off_grpo: trainer.test_freq=%d is not a multiple of sync_period=%d, so validations fall inside windows: "
            "each one costs a weight transfer and a vLLM wake more (the window's samples stay from α). A "
            "multiple of %d avoids that.", test_freq, v, v,
        )
        return
    lag = longest_lag(v, test_freq)
    if lag >= v - 1:  # some periods are cut short, but the longest lag is still v − 1
        logger.info(
            "off_grpo: trainer.test_freq=%d is not a multiple of sync_period=%d: every validation syncs vLLM, so "
            "the lag restarts there and some periods are shorter (the longest still gives a lag of %d). A multiple "
            "of %d avoids that.", test_freq, v, v - 1, v,
        )
        return
    logger.warning(
        "off_grpo: trainer.test_freq=%d is not a multiple of sync_period=%d: every validation syncs vLLM "
        "(%s.sync_before_validate=true), so the lag restarts there and samples are at most %d steps stale, not "
        "%d. Set trainer.test_freq to a multiple of %d for the lag you asked for.",
        test_freq, v, PREFIX, lag, v - 1, v,
    )
