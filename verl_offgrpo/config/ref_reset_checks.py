"""The checks of the reference reset (``ref_reset_period`` R > 0, π_ref ← π_θ every R steps): a reference
model to reset, FSDP engines with full fine-tuning, the reference sharded exactly like the actor (the
copy is shard-local), and a trainer with the plugin's step-end hook."""

from __future__ import annotations

import logging
from typing import Any

from verl_offgrpo import TRAINER_MODE

from .off_grpo import PREFIX, OffGRPOConfig, RefResetConfigError
from .readers import flag_at, knobs_of, uses_lora, uses_v1, v1_mode
from .sync_checks import FSDP_STRATEGIES, require_plugin_v0_manager
from .values import config_value as _get

logger = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return value


def check_ref_reset_config(config: Any, *, require_hooks: bool = True, knobs: OffGRPOConfig | None = None) -> int:
    """Raise :class:`RefResetConfigError` if ``ref_reset_period`` R > 0 cannot work with ``config``; return R.

    Supported: the FSDP engines with full fine-tuning, the reference fused into the actor worker and
    sharded exactly like the actor (the copy is shard-local), and a trainer with the plugin's step-end
    hook (V1 ``off_grpo_sync``, or v0 with the plugin's checkpoint manager).
    """
    period = knobs_of(config, knobs, RefResetConfigError).ref_reset_period
    if period == 0:
        return 0
    why = f"{PREFIX}.ref_reset_period={period} (π_ref ← π_θ every {period} steps)"
    use_kl_loss = flag_at(config, "actor_rollout_ref.actor.use_kl_loss", False)
    use_kl_in_reward = flag_at(config, "algorithm.use_kl_in_reward", False)
    if not (use_kl_loss or use_kl_in_reward):
        raise RefResetConfigError(
            f"{why} needs a reference model, which verl builds only with actor_rollout_ref.actor.use_kl_loss=true "
            "(β = kl_loss_coef) or algorithm.use_kl_in_reward=true (the latter not with the zero-variance mask or "
            "red_drop); set actor_rollout_ref.actor.use_kl_loss=true, or ref_reset_period=0."
        )
    if uses_lora(config):
        raise RefResetConfigError(
            f"{why} is not supported with LoRA (actor_rollout_ref.model.lora.rank / lora_rank / lora_adapter_path): "
            "verl's reference is then the actor's base model with adapters disabled, which cannot be reset "
            "without changing the actor. Use full fine-tuning or ref_reset_period=0."
        )
    actor_strategy = _get(config, "actor_rollout_ref.actor.strategy", "fsdp")
    ref_strategy = _get(config, "actor_rollout_ref.ref.strategy", actor_strategy)
    if actor_strategy not in FSDP_STRATEGIES:
        raise RefResetConfigError(
            f"{why} is implemented for the FSDP engines only (actor_rollout_ref.actor.strategy in {FSDP_STRATEGIES}); "
            f"got {actor_strategy!r} (Megatron, VeOmni, TorchTitan, AutoModel are not supported)."
        )
    if ref_strategy != actor_strategy:
        raise RefResetConfigError(
            f"{why} copies the actor's shards into the reference in place, so both must use the same engine: "
            f"actor_rollout_ref.ref.strategy={ref_strategy!r} differs from actor.strategy={actor_strategy!r}."
        )
    a_fsdp = _get(config, "actor_rollout_ref.actor.fsdp_config")
    r_fsdp = _get(config, "actor_rollout_ref.ref.fsdp_config")
    keys = ["fsdp_size", "wrap_policy"] + (["use_orig_params"] if actor_strategy == "fsdp" else [])
    defaults = {"fsdp_size": -1, "wrap_policy": {"min_num_params": 0}, "use_orig_params": False}
    for key in keys:
        a_val, r_val = _plain(_get(a_fsdp, key, defaults[key])), _plain(_get(r_fsdp, key, defaults[key]))
        if a_val != r_val:
            raise RefResetConfigError(
                f"{why} copies shard by shard and needs the reference sharded like the actor: "
                f"actor_rollout_ref.actor.fsdp_config.{key}={a_val!r} but actor_rollout_ref.ref.fsdp_config.{key}="
                f"{r_val!r} (mismatched sharding is not supported)."
            )
    if require_hooks:
        _require_step_end_hook(config, why)
    _warn_if_no_kl_weight(config, why, use_kl_loss, use_kl_in_reward)
    return period


def _require_step_end_hook(config: Any, why: str) -> None:
    """The reset runs from the plugin's step-end hook: V1 ``off_grpo_sync``, or v0 with its checkpoint manager."""
    if uses_v1(config):
        if v1_mode(config) != TRAINER_MODE:
            raise RefResetConfigError(
                f"{why} on the V1 trainer runs from the plugin's trainer mode: set trainer.v1.trainer_mode={TRAINER_MODE} "
                f"(got {v1_mode(config)!r})."
            )
    else:
        lead = f"{why} with trainer.use_v1=false runs from the plugin's checkpoint manager: set"
        require_plugin_v0_manager(config, RefResetConfigError, lead)


def _warn_if_no_kl_weight(config: Any, why: str, use_kl_loss: bool, use_kl_in_reward: bool) -> None:
    """π_ref enters training only through the KL terms in use; if each has weight 0 a reset changes nothing."""
    weights = {key: _get(config, key, None) for key, used in (("actor_rollout_ref.actor.kl_loss_coef", use_kl_loss),
                                                            ("algorithm.kl_ctrl.kl_coef", use_kl_in_reward)) if used}
    if weights and all(value == 0 for value in weights.values()):
        said = ", ".join(f"{key}={value}" for key, value in weights.items())
        logger.warning("off_grpo: %s with a KL weight of 0 (%s): the KL term is 0, so the resets change nothing; "
                       "set that coefficient, or ref_reset_period=0.", why, said)
