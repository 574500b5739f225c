"""What vLLM reports as α must be the distribution it sampled from, in the terms verl's π_k uses.

verl 0.9.1 computes π_k (``old_log_prob``) from the actor's logits divided by ``rollout.temperature``
and nothing else. vLLM 0.24 reports per ``rollout.logprobs_mode``:

    processed_logprobs (verl's default)   log-probs after temperature, penalties, top-k/top-p: the sampler's
    raw_logprobs                           log-probs of the raw logits (before the temperature)
    raw_logits, processed_logits           logits, not log-probs

so r' = π_k/α is the paper's ratio only with ``processed_logprobs``, or ``raw_logprobs`` at temperature 1.
Top-k/top-p and a repetition penalty make α the truncated or penalised sampler, which π_k is not: a
warning, since some users sample that way on purpose.
"""

from __future__ import annotations

import logging
from typing import Any

from .readers import integer_at, number_at
from .values import OffGRPOConfigError
from .values import config_value as _get

logger = logging.getLogger(__name__)

ROLLOUT = "actor_rollout_ref.rollout"
#: vLLM's logprobs modes that return logits, not log-probs
LOGIT_MODES = ("raw_logits", "processed_logits")


def check_sampler(config: Any) -> None:
    """Refuse a ``logprobs_mode`` under which α is not the sampler's log-probs; warn where r' is biased by design."""
    mode = _get(config, f"{ROLLOUT}.logprobs_mode", "processed_logprobs")
    temperature = number_at(config, f"{ROLLOUT}.temperature", 1.0)
    if mode in LOGIT_MODES:
        raise OffGRPOConfigError(
            f"{ROLLOUT}.logprobs_mode={mode} makes vLLM return logits, not log-probs, so α and r' = π_k/α "
            "would be wrong: use processed_logprobs (verl's default)."
        )
    if mode == "raw_logprobs" and temperature != 1.0:
        raise OffGRPOConfigError(
            f"{ROLLOUT}.logprobs_mode=raw_logprobs gives α before the temperature ({temperature}), while π_k "
            "is taken at it, so r' = π_k/α compares two distributions: use processed_logprobs (verl's default)."
        )
    top_p = number_at(config, f"{ROLLOUT}.top_p", 1.0)
    top_k = integer_at(config, f"{ROLLOUT}.top_k", -1)
    penalty = number_at(config, f"{ROLLOUT}.repetition_penalty", 1.0)
    if top_p < 1.0 or top_k > 0 or penalty != 1.0:
        logger.warning(
            "off_grpo: rollout top_p=%s top_k=%s repetition_penalty=%s: vLLM's log-probs of α are taken after "
            "top-p/top-k and the penalty, and π_k without them, so r' = π_k/α is biased. Use top_p=1.0, "
            "top_k=-1, repetition_penalty=1.0 for the paper's ratio.",
            top_p,
            top_k,
            penalty,
        )
