"""What vLLM reports as α must be the distribution it sampled from, in the terms verl's π_k uses.

verl 0.9.1 computes π_k (``old_log_prob``) from the actor's logits divided by ``rollout.temperature``
and nothing else. vLLM 0.24 reports per ``rollout.logprobs_mode``:

    processed_logprobs (verl's default)   log-probs after temperature, penalties, top-k/top-p: the sampler's
    raw_logprobs                           log-probs of the raw logits (before the temperature)
    raw_logits, processed_logits           logits, not log-probs

so r' = π_k/α is the paper's ratio only with ``processed_logprobs``, or ``raw_logprobs`` at temperature 1.
Top-k/top-p make α the truncated sampler, which π_k is not: a warning, since some users sample that way on
purpose. (A repetition penalty never reaches vLLM: verl's agent loops send ``repetition_penalty=1.0`` with every
request.) Values vLLM refuses (a mode it does not know, top_p outside (0, 1], ...) are said here, before Ray:
vLLM itself checks the mode only when it starts and the sampling parameters only at the first request; and a
temperature of 0 (greedy) would make π_k divide by 0. The mode is read where vLLM takes it from
(:func:`logprobs_mode_at`): verl 0.9.1 starts vLLM with ``engine_kwargs.vllm`` last, so a mode set there wins.
"""

from __future__ import annotations

import logging
from typing import Any

from .readers import as_integer, as_number, engine_kwarg
from .values import OffGRPOConfigError, written_value

logger = logging.getLogger(__name__)

ROLLOUT = "actor_rollout_ref.rollout"
#: vLLM's logprobs modes that return logits, not log-probs
LOGIT_MODES = ("raw_logits", "processed_logits")
#: vLLM's logprobs modes that return log-probs
LOGPROB_MODES = ("processed_logprobs", "raw_logprobs")
#: (knob of verl's rollout, its default, an integer?, whether a value is valid, the rule, why), as the error says them
SAMPLING = (
    ("temperature", 1.0, False, lambda t: t > 0, "a number > 0",
     "π_k divides the actor's logits by it, so 0 (greedy sampling) would divide by 0"),
    ("top_p", 1.0, False, lambda p: 0 < p <= 1, "a number in (0, 1]", "vLLM refuses others at the first request"),
    ("top_k", -1, True, lambda k: k >= -1, "an integer, -1 or 0 (off) or >= 1",
     "vLLM refuses others at the first request"),
)


def check_sampler(config: Any) -> None:
    """Refuse a ``logprobs_mode`` under which α is not the sampler's log-probs (or that vLLM does not know) and
    sampling parameters vLLM or π_k cannot take (:data:`SAMPLING`); warn where r' is biased by design."""
    key, mode = logprobs_mode_at(config)
    temperature, top_p, top_k = (_sampling_parameter(config, *parameter) for parameter in SAMPLING)
    if mode in LOGIT_MODES:
        raise OffGRPOConfigError(
            f"{key}={mode} makes vLLM return logits, not log-probs, so α and r' = π_k/α "
            "would be wrong: use processed_logprobs (verl's default)."
        )
    if mode not in LOGPROB_MODES:
        raise OffGRPOConfigError(
            f"{key}={mode!r} is not a log-prob mode of vLLM's {LOGPROB_MODES}, which vLLM would say "
            "only when it starts: use processed_logprobs (verl's default)."
        )
    if mode == "raw_logprobs" and temperature != 1.0:
        raise OffGRPOConfigError(
            f"{key}=raw_logprobs gives α before the temperature ({temperature}), while π_k "
            "is taken at it, so r' = π_k/α compares two distributions: use processed_logprobs (verl's default)."
        )
    if top_p < 1.0 or top_k > 0:
        logger.warning(
            "off_grpo: rollout top_p=%s top_k=%s: vLLM samples from the truncated distribution, which π_k (the "
            "trainer's log-probs) is not, so r' = π_k/α is biased. Use top_p=1.0, top_k=-1 for the paper's ratio.",
            top_p,
            top_k,
        )


def logprobs_mode_at(config: Any) -> tuple[str, Any]:
    """(the key, the mode) vLLM takes its ``logprobs_mode`` from: the engine's extra arguments where set there
    (:func:`.readers.engine_kwarg`, either spelling), else ``rollout.logprobs_mode`` (verl's default
    ``processed_logprobs``)."""
    written = engine_kwarg(config, "logprobs_mode")
    if written is not None:
        return written
    return f"{ROLLOUT}.logprobs_mode", written_value(config, f"{ROLLOUT}.logprobs_mode", "processed_logprobs")


def _sampling_parameter(config: Any, name: str, default: Any, integer: bool, valid, rule: str, why: str) -> Any:
    """The rollout's ``name`` (``default`` where absent), refused with ``rule`` and ``why`` unless ``valid``; a null
    is refused too (verl hands it to vLLM and its actor as it is)."""
    key = f"{ROLLOUT}.{name}"
    value = written_value(config, key, default)
    value = as_integer(value, key) if integer else as_number(value, key)
    if value is None or not valid(value):
        raise OffGRPOConfigError(f"{key} must be {rule} (got {value!r}): {why}.")
    return value
