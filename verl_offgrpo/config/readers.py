"""Small readers the start-up checks share: a check's knobs (given, or read off the config), which trainer
and mode the config runs, whether the actor trains LoRA adapters. Read only; each check module decides."""

from __future__ import annotations

from typing import Any

from .off_grpo import OffGRPOConfig
from .values import OffGRPOConfigError
from .values import config_value as _get


def uses_lora(config: Any) -> bool:
    """Whether the actor trains LoRA adapters: ``model.lora.rank`` (or the older ``lora_rank``) > 0, or an
    adapter path."""
    model = _get(config, "actor_rollout_ref.model")
    rank = _get(model, "lora.rank", 0) or 0
    if rank <= 0:
        rank = _get(model, "lora_rank", 0) or 0
    return rank > 0 or _get(model, "lora_adapter_path") is not None


def knobs_of(config: Any, knobs: OffGRPOConfig | None, error: type[OffGRPOConfigError] = OffGRPOConfigError) -> OffGRPOConfig:
    """``knobs``, or the config's own, with a knob error raised as ``error`` (the caller's kind)."""
    if knobs is not None:
        return knobs
    try:
        return OffGRPOConfig.from_algorithm(_get(config, "algorithm"))
    except OffGRPOConfigError as err:
        if type(err) is error:
            raise
        raise error(str(err)) from None


def uses_v1(config: Any) -> bool:
    """The V1 trainer (``trainer.use_v1``, verl's default true) rather than v0."""
    return bool(_get(config, "trainer.use_v1", True))


def v1_mode(config: Any) -> Any:
    """The V1 trainer's mode (``trainer.v1.trainer_mode``, verl's default "sync")."""
    return _get(config, "trainer.v1.trainer_mode", "sync")

