"""``final_outputs_only``: where vLLM can send each request's final output only (a vLLM rollout and a
synchronous trainer: v0, or a V1 mode that pauses vLLM only between rollouts), and its resolution
(``auto`` → on exactly there; ``true`` elsewhere is refused)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from verl_offgrpo import TRAINER_MODE

from .off_grpo import AUTO, PREFIX, OffGRPOConfig
from .readers import uses_v1, v1_mode
from .values import OffGRPOConfigError
from .values import config_value as _get

logger = logging.getLogger(__name__)

#: V1 trainer modes that pause vLLM only between rollouts (no request in flight at a weight sync)
SYNCHRONOUS_V1_MODES = ("sync", TRAINER_MODE)


def _final_outputs_hold(config: Any) -> bool:
    """Where ``final_outputs_only`` can hold (:func:`_final_outputs_problem` finds nothing); ``auto`` turns it
    on there and only there."""
    return _final_outputs_problem(config) is None


def _rollout_name(config: Any) -> Any:
    return _get(config, "actor_rollout_ref.rollout.name", "vllm")


def _final_outputs_problem(config: Any) -> str | None:
    """Why ``final_outputs_only`` cannot hold, or None: it asks vLLM's engine for final outputs, so vLLM rollouts
    and synchronous trainers only (v0, or a V1 mode of :data:`SYNCHRONOUS_V1_MODES`: verl counts a request as
    admitted at its first output, and pauses for a sync wait for admissions)."""
    name = _rollout_name(config)
    if name != "vllm":
        return (f"{PREFIX}.final_outputs_only=true sets vLLM's output kind, but actor_rollout_ref.rollout.name={name!r}: "
                f"use the vllm rollout or set {PREFIX}.final_outputs_only=false.")
    if uses_v1(config) and v1_mode(config) not in SYNCHRONOUS_V1_MODES:
        return (f"{PREFIX}.final_outputs_only=true with trainer.v1.trainer_mode={v1_mode(config)!r}: only "
                f"{' and '.join(SYNCHRONOUS_V1_MODES)} pause vLLM strictly between rollouts; any other mode may pause "
                "it with requests in flight, and verl's pause waits for each one's first output (which then comes "
                f"only at its end) up to its barrier timeout at every sync; use trainer_mode={TRAINER_MODE} or set "
                f"{PREFIX}.final_outputs_only=false.")
    return None



def resolve_final_outputs(config: Any, knobs: OffGRPOConfig) -> OffGRPOConfig:
    """``knobs`` with ``final_outputs_only`` resolved to true or false: ``auto`` is on exactly where it can
    hold (one info line says which); true where it cannot hold raises :class:`OffGRPOConfigError`."""
    if knobs.final_outputs_only is True and (problem := _final_outputs_problem(config)) is not None:
        raise OffGRPOConfigError(problem)
    elif knobs.final_outputs_only == AUTO:
        knobs = dataclasses.replace(knobs, final_outputs_only=_final_outputs_hold(config))
        logger.info("off_grpo: final_outputs_only=auto is %s (actor_rollout_ref.rollout.name=%r, %s).",
                    "on" if knobs.final_outputs_only else "off", _rollout_name(config),
                    f"trainer.v1.trainer_mode={v1_mode(config)!r}" if uses_v1(config) else "v0 trainer")
    elif knobs.final_outputs_only is False and knobs.rollout_schedule == "window" and knobs.sync_period > 1:
        logger.info("off_grpo: final_outputs_only=false with the window: vLLM builds and queues an output per "
                    "generated token for each sequence in flight, and a window puts up to %d batches in flight at "
                    "once; the default (auto) turns final outputs on here.", knobs.sync_period)
    return knobs
