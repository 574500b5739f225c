"""Start-up check for ``algorithm.off_grpo.ref_reset_period`` (R) > 0: reject what the reset cannot do.

:func:`check_ref_reset_config` reads only the composed config (no verl / torch import), so it can run
in the driver from ``validate_off_grpo_config`` before Ray starts. With R = 0 it only checks the value.

Supported: the FSDP engines (``actor.strategy`` fsdp or fsdp2) with full fine-tuning, the reference
fused into the actor worker (``ActorRolloutRefWorker`` role ``actor_rollout_ref``), and the reference
sharded exactly like the actor (same ``fsdp_size``, ``wrap_policy``, and for FSDP1 ``use_orig_params``).
Not supported (raises):

* no reference model (neither ``actor.use_kl_loss`` nor ``algorithm.use_kl_in_reward``): nothing to reset;
* LoRA (``model.lora.rank`` / ``lora_rank`` > 0 or ``lora_adapter_path``): verl's reference is then the
  actor's own base weights with adapters disabled; resetting it would mean merging the adapters into the
  base and restarting them, which changes the trained model;
* Megatron, VeOmni, TorchTitan, AutoModel, fsdp_turbo engines (no in-place shard copy written for them);
* mismatched sharding between ``actor_rollout_ref.actor.fsdp_config`` and ``actor_rollout_ref.ref.fsdp_config``
  (the copy is shard-local, no resharding);
* a trainer without the plugin's step-end hook (V1 mode other than ``off_grpo_sync``; v0 without the
  plugin's checkpoint manager), where the reset would silently never run.
"""

from __future__ import annotations

from typing import Any

from verl_offgrpo import TRAINER_MODE as V1_MODE
from verl_offgrpo.sync.checks import _get, uses_lora

from .schedule import check_period

FSDP_STRATEGIES = ("fsdp", "fsdp2")
V0_MANAGER_PREFIX = "verl_offgrpo.sync."


class RefResetConfigError(ValueError):
    """``algorithm.off_grpo.ref_reset_period`` > 0 with a configuration the reset does not support."""


def _plain(value: Any) -> Any:
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(value):
            return OmegaConf.to_container(value, resolve=True)
    except Exception:  # noqa: BLE001
        pass
    return value


def check_ref_reset_config(config: Any, *, require_hooks: bool = True) -> int:
    """Raise :class:`RefResetConfigError` if ``ref_reset_period`` > 0 cannot work with ``config``; return R."""
    from verl_offgrpo.knobs import knobs_from_algorithm

    try:
        period = check_period(knobs_from_algorithm(_get(config, "algorithm")).ref_reset_period)
    except (TypeError, ValueError) as err:
        raise RefResetConfigError(str(err)) from err
    if period == 0:
        return 0
    why = f"algorithm.off_grpo.ref_reset_period={period} (π_ref ← π_θ every {period} steps)"

    use_kl_loss = bool(_get(config, "actor_rollout_ref.actor.use_kl_loss", False))
    use_kl_in_reward = bool(_get(config, "algorithm.use_kl_in_reward", False))
    if not (use_kl_loss or use_kl_in_reward):
        raise RefResetConfigError(
            f"{why} needs a reference model, which verl builds only with actor_rollout_ref.actor.use_kl_loss=true "
            "(β = kl_loss_coef) or algorithm.use_kl_in_reward=true; set one, or ref_reset_period=0."
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
    if not require_hooks:
        return period
    if bool(_get(config, "trainer.use_v1", True)):
        mode = _get(config, "trainer.v1.trainer_mode", "sync")
        if mode != V1_MODE:
            raise RefResetConfigError(
                f"{why} on the V1 trainer runs from the plugin's trainer mode: set trainer.v1.trainer_mode={V1_MODE} "
                f"(got {mode!r})."
            )
    else:
        fqn = _get(config, "actor_rollout_ref.rollout.checkpoint_manager_class")
        if not (isinstance(fqn, str) and fqn.startswith(V0_MANAGER_PREFIX)):
            raise RefResetConfigError(
                f"{why} with trainer.use_v1=false runs from the plugin's checkpoint manager: set "
                "+actor_rollout_ref.rollout.checkpoint_manager_class="
                f"verl_offgrpo.sync.checkpoint_manager_v0.LaggedCheckpointManager (got {fqn!r})."
            )
    return period
