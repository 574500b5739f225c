"""Configurations under which vLLM cannot keep serving α between syncs: rejected loudly.

:func:`check_sync_config` reads only the composed config (no verl import), so it can run in the
driver before Ray starts. The V1 trainer mode calls it at construction (before any worker or GPU
work); the v0 checkpoint manager calls it at construction (after the workers and vLLM started, but
before the first weight sync).
"""

from __future__ import annotations

from typing import Any

from verl_offgrpo import TRAINER_MODE
from verl_offgrpo.knobs import OffGRPOKnobs, invalid_choice, knobs_from_algorithm

from .schedule import check_period

V0_MANAGER_FQN = "verl_offgrpo.sync.checkpoint_manager_v0.LaggedCheckpointManager"


class SyncConfigError(ValueError):
    """A configuration under which the lagged sync cannot keep α in vLLM."""


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    """``cfg.a.b.c`` for a DictConfig, dict or dataclass; ``default`` if absent, None or ``???``."""
    from omegaconf.errors import MissingMandatoryValue

    node = cfg
    for part in dotted.split("."):
        if node is None:
            return default
        try:
            node = node.get(part, None) if hasattr(node, "get") else getattr(node, part, None)
        except MissingMandatoryValue:
            return default
    return default if node is None else node


def uses_lora(config: Any) -> bool:
    model = _get(config, "actor_rollout_ref.model")
    rank = _get(model, "lora.rank", 0) or 0
    if rank <= 0:
        rank = _get(model, "lora_rank", 0) or 0
    return rank > 0 or _get(model, "lora_adapter_path") is not None


def check_sync_config(config: Any, trainer: str | None = None) -> OffGRPOKnobs:
    """Raise :class:`SyncConfigError` if the lagged sync cannot work with ``config``; return the knobs.

    ``trainer``: "v1" or "v0"; default from ``trainer.use_v1``. With ``sync_period == 1`` the plugin
    keeps verl's own sync untouched and only the knob values are checked.
    """
    try:
        knobs = knobs_from_algorithm(_get(config, "algorithm"))
        check_period(knobs.sync_period)
    except (TypeError, ValueError) as err:
        raise SyncConfigError(str(err)) from err
    if why := invalid_choice(knobs):
        raise SyncConfigError(why)
    v = knobs.sync_period
    if v == 1:
        return knobs
    if trainer is None:
        trainer = "v1" if bool(_get(config, "trainer.use_v1", True)) else "v0"
    why = f"algorithm.off_grpo.sync_period={v} (vLLM serves the lagged weights α between syncs)"
    rollout = _get(config, "actor_rollout_ref.rollout")
    name = _get(rollout, "name", "vllm")
    if name != "vllm":
        raise SyncConfigError(f"{why} is implemented for actor_rollout_ref.rollout.name=vllm only (got {name!r}).")
    if not bool(_get(config, "actor_rollout_ref.hybrid_engine", True)):
        raise SyncConfigError(f"{why} needs the colocated hybrid engine: actor_rollout_ref.hybrid_engine=true.")
    if uses_lora(config):
        raise SyncConfigError(
            f"{why} is not supported with LoRA (actor_rollout_ref.model.lora.rank / lora_rank / lora_adapter_path): "
            "vLLM's LoRA adapter path is not known to keep α across sleep; use sync_period=1 or full fine-tuning."
        )
    if bool(_get(rollout, "disaggregation.enabled", False)):
        raise SyncConfigError(f"{why} is not supported with PD-disaggregated rollout.")
    v1_mode_sets_it = trainer == "v1" and _get(config, "trainer.v1.trainer_mode", "sync") == TRAINER_MODE
    if knobs.keep_weights == "no_sleep" and bool(_get(rollout, "free_cache_engine", True)) and not v1_mode_sets_it:
        raise SyncConfigError(
            f"{why} with algorithm.off_grpo.keep_weights=no_sleep needs "
            "actor_rollout_ref.rollout.free_cache_engine=false (on the V1 trainer, trainer_mode=off_grpo_sync "
            "sets it itself)."
        )
    if (
        knobs.keep_weights == "sleep_level1"
        and bool(_get(rollout, "free_cache_engine", True))
        and not bool(_get(rollout, "enable_sleep_mode", True))
    ):
        raise SyncConfigError(
            f"{why}: actor_rollout_ref.rollout.enable_sleep_mode=false cannot sleep vLLM at level 1; set it true, "
            "or use algorithm.off_grpo.keep_weights=no_sleep."
        )
    if trainer == "v1":
        mode = _get(config, "trainer.v1.trainer_mode", "sync")
        if mode != TRAINER_MODE:
            raise SyncConfigError(
                f"{why} on the V1 trainer needs trainer.v1.trainer_mode={TRAINER_MODE} (got {mode!r}); the async "
                "modes sync on their own schedule."
            )
    elif trainer == "v0":
        fqn = _get(rollout, "checkpoint_manager_class")
        if not (isinstance(fqn, str) and fqn.startswith("verl_offgrpo.sync.")):
            raise SyncConfigError(
                f"{why} with trainer.use_v1=false needs "
                f"+actor_rollout_ref.rollout.checkpoint_manager_class={V0_MANAGER_FQN} (got {fqn!r})."
            )
        backend = _get(rollout, "checkpoint_engine.backend", "naive")
        if backend != "naive":
            raise SyncConfigError(
                f"{why} needs the colocated weight sync: actor_rollout_ref.rollout.checkpoint_engine.backend=naive "
                f"(got {backend!r})."
            )
    else:
        raise ValueError(f"trainer must be 'v1' or 'v0', got {trainer!r}")
    return knobs


def validation_follows(step: int, test_freq: int, total_training_steps: int | None) -> bool:
    """Whether verl validates right after the step-``step`` sync slot (same test as both trainers' fit)."""
    if test_freq is None or test_freq <= 0:
        return False
    is_last_step = total_training_steps is not None and step >= total_training_steps
    return is_last_step or step % test_freq == 0
