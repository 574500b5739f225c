"""The checks of the lagged sync (``sync_period`` v > 1): whether vLLM can keep serving α = π_{k−v} between
syncs with a config (vLLM colocated in the hybrid engine, an FSDP actor, no LoRA, no PD disaggregation, a way
to keep the weights while it sleeps, and the plugin's V1 trainer mode or v0 checkpoint manager)."""

from __future__ import annotations

import logging
from typing import Any

from verl_offgrpo import TRAINER_MODE

from .off_grpo import PREFIX, V0_MANAGER_FQN, V0_MANAGER_FQNS, OffGRPOConfig, SyncConfigError
from .readers import flag_at, knobs_of, uses_lora, uses_v1, v1_mode
from .values import OffGRPOConfigError
from .values import config_value as _get
from .values import is_dict_config, written_value
from .values import is_int as _is_int

logger = logging.getLogger(__name__)

#: verl's actor strategies whose shards the sync check reads (``actor_rollout_ref.actor.strategy``; verl 0.9.1's
#: ``fsdp_turbo``, an FSDP engine too, is untested)
FSDP_STRATEGIES = ("fsdp", "fsdp2")


def check_sync_config(config: Any, trainer: str | None = None, *, knobs: OffGRPOConfig | None = None) -> OffGRPOConfig:
    """Raise :class:`SyncConfigError` if the lagged sync cannot keep α in vLLM with ``config``; return the knobs.

    ``trainer``: "v1" or "v0"; default from ``trainer.use_v1``. With ``sync_period == 1`` verl's own sync
    runs untouched and only the knobs are checked. Also called when the V1 mode or the v0 checkpoint
    manager is built.
    """
    knobs = knobs_of(config, knobs, SyncConfigError)
    v = knobs.sync_period
    if v == 1:
        return knobs
    if trainer is None:
        trainer = "v1" if uses_v1(config) else "v0"
    if trainer not in ("v1", "v0"):
        raise ValueError(f"trainer must be 'v1' or 'v0', got {trainer!r}")
    why = f"{PREFIX}.sync_period={v} (vLLM serves the lagged weights α between syncs)"
    test_freq = _get(config, "trainer.test_freq")
    if test_freq is not None and not _is_int(test_freq):  # 5.0 too: the window's and lag's checks read integers
        raise SyncConfigError(
            f"trainer.test_freq must be an integer (got {test_freq!r}): {why} syncs vLLM before validating, "
            "at the steps verl validates (s % test_freq == 0); -1: no validation."
        )
    rollout = _get(config, "actor_rollout_ref.rollout")
    name = written_value(rollout, "name", "vllm")
    if name != "vllm":
        raise SyncConfigError(f"{why} is implemented for actor_rollout_ref.rollout.name=vllm only (got {name!r}): set "
                              f"actor_rollout_ref.rollout.name=vllm, or {PREFIX}.sync_period=1 (on-policy).")
    if not flag_at(config, "actor_rollout_ref.hybrid_engine", True):
        raise SyncConfigError(f"{why} needs the colocated hybrid engine: actor_rollout_ref.hybrid_engine=true.")
    if uses_lora(config):
        raise SyncConfigError(
            f"{why} is not supported with LoRA (actor_rollout_ref.model.lora.rank / lora_rank / lora_adapter_path): "
            "vLLM's LoRA adapter path is not known to keep α across sleep; use sync_period=1 or full fine-tuning."
        )
    strategy = _get(config, "actor_rollout_ref.actor.strategy", "fsdp")
    if strategy not in FSDP_STRATEGIES:
        raise SyncConfigError(
            f"{why} is implemented for actor_rollout_ref.actor.strategy in {FSDP_STRATEGIES} only (got {strategy!r}): "
            f"the check that each sync reached vLLM reads those actors' shards. Use {PREFIX}.sync_period=1 with this "
            "actor (untested with the plugin), or an FSDP actor."
        )
    if flag_at(config, "actor_rollout_ref.rollout.disaggregation.enabled", False):
        raise SyncConfigError(f"{why} is not supported with PD-disaggregated rollout: set "
                              f"actor_rollout_ref.rollout.disaggregation.enabled=false, or {PREFIX}.sync_period=1.")
    free_cache_engine = flag_at(config, "actor_rollout_ref.rollout.free_cache_engine", True)
    v1_mode_sets_it = trainer == "v1" and v1_mode(config) == TRAINER_MODE
    if knobs.keep_weights == "no_sleep" and free_cache_engine and not v1_mode_sets_it:
        raise SyncConfigError(
            f"{why} with {PREFIX}.keep_weights=no_sleep needs actor_rollout_ref.rollout.free_cache_engine=false "
            f"(on the V1 trainer, trainer_mode={TRAINER_MODE} sets it itself)."
        )
    if knobs.keep_weights == "no_sleep" and free_cache_engine and knobs.rollout_schedule != "window":
        logger.info("off_grpo: %s.keep_weights=no_sleep: the V1 trainer sets actor_rollout_ref.rollout.free_cache_engine="
                    "false, so vLLM keeps its weights and KV cache on the GPU through every update.", PREFIX)
    sleeps = flag_at(config, "actor_rollout_ref.rollout.enable_sleep_mode", True)
    if knobs.rollout_schedule == "window" and free_cache_engine and not sleeps:  # keep_weights changes nothing there
        raise SyncConfigError(
            f"{why} with {PREFIX}.rollout_schedule=window puts vLLM to sleep between windows, which "
            "actor_rollout_ref.rollout.enable_sleep_mode=false cannot: set it true, or set "
            "actor_rollout_ref.rollout.free_cache_engine=false (vLLM then keeps its memory through every update)."
        )
    if knobs.keep_weights == "sleep_level1" and free_cache_engine and not sleeps:
        raise SyncConfigError(
            f"{why}: actor_rollout_ref.rollout.enable_sleep_mode=false cannot sleep vLLM at level 1; set it true, "
            f"or use {PREFIX}.keep_weights=no_sleep."
        )
    backend = _get(rollout, "checkpoint_engine.backend", "naive")  # one manager runs the lag on both trainers
    if backend != "naive":
        raise SyncConfigError(
            f"{why} needs the colocated weight sync: actor_rollout_ref.rollout.checkpoint_engine.backend=naive "
            f"(got {backend!r})."
        )
    if trainer == "v1":
        if v1_mode(config) != TRAINER_MODE:
            raise SyncConfigError(
                f"{why} on the V1 trainer needs trainer.v1.trainer_mode={TRAINER_MODE} (got {v1_mode(config)!r}); "
                + ("verl's sync mode syncs after every step." if v1_mode(config) == "sync"
                   else f"only {TRAINER_MODE} holds α in vLLM for v steps; {v1_mode(config)!r} syncs on its own "
                   "schedule.")
            )
        local_updates = _get(config, "trainer.v1.sync.parameter_sync_step", 1)
        if local_updates not in (None, 1):  # sub-batch j trains j − 1 updates after its rollout: a lag nothing counts
            raise SyncConfigError(
                f"{why} does not combine with trainer.v1.sync.parameter_sync_step={local_updates!r} (verl's local "
                "updates on sub-batches of one generation, each but the first lagged by the updates before it, which "
                "the served-policy guard's lag does not count): drop that override."
            )
    else:
        require_plugin_v0_manager(config, SyncConfigError, f"{why} with trainer.use_v1=false needs")
    return knobs


#: the knobs that act only on a lag (v > 1): read behind ``sync_period > 1`` (:mod:`verl_offgrpo.sync.lagged_manager`)
LAG_ONLY_KNOBS = ("keep_weights", "empty_cache_on_skip", "verify_served_weights", "max_log_rprime_lagged")


def tell_lag_knobs_at_v1(knobs: OffGRPOConfig) -> None:
    """One line naming the lag-only knobs set away from their defaults at v = 1, where no batch is lagged and
    verl's own sync runs every step (``skip_old_log_prob`` says so itself, :mod:`.old_log_prob_checks`; under a
    window, :func:`.window_checks.advise_on_window` names keep_weights and empty_cache_on_skip)."""
    if knobs.sync_period != 1:
        return
    said_by_the_window = ("keep_weights", "empty_cache_on_skip") if knobs.rollout_schedule == "window" else ()
    if idle := knobs.away_from_defaults(tuple(name for name in LAG_ONLY_KNOBS if name not in said_by_the_window)):
        logger.info("off_grpo: %s does nothing at sync_period=1: no batch is lagged and every step syncs vLLM "
                    "(verl's own sync).", ", ".join(idle))


def tell_if_the_period_spans_the_run(config: Any, knobs: OffGRPOConfig) -> None:
    """A warning where v > 1 is not below an explicit ``trainer.total_training_steps`` T: the first step syncs and
    the next periodic sync would come at step v ≥ T, so vLLM serves the starting weights the whole run (lag up to
    T − 1; only a validation's sync, :mod:`.validation_lag`, renews them)."""
    total = _get(config, "trainer.total_training_steps")
    if knobs.sync_period > 1 and _is_int(total) and 1 <= total <= knobs.sync_period:
        logger.warning(
            "off_grpo: %s.sync_period=%d is not below trainer.total_training_steps=%d: vLLM serves the first step's "
            "weights the whole run (a lag of up to %d steps; only a validation's sync renews them). Lower sync_period.",
            PREFIX, knobs.sync_period, total, total - 1,
        )


def require_plugin_v0_manager(config: Any, error: type[OffGRPOConfigError], lead: str) -> None:
    """Raise ``error`` (message ``lead`` + the override to add) unless the v0 trainer's
    ``rollout.checkpoint_manager_class`` is one of the plugin's dotted paths (:data:`V0_MANAGER_FQNS`; a misspelt
    one would fail only when Ray's TaskRunner imports it): it runs the lagged sync and the reference reset's
    step-end hook."""
    fqn = _get(config, "actor_rollout_ref.rollout.checkpoint_manager_class")
    if fqn not in V0_MANAGER_FQNS:
        plus = "+" if fqn is None else ""  # verl's yaml has no such key: an override adds it
        raise error(f"{lead} {plus}actor_rollout_ref.rollout.checkpoint_manager_class={V0_MANAGER_FQN} (got {fqn!r}).")


def tell_v0_without_manager(config: Any) -> None:
    """One warning for a selecting job on the v0 trainer (``trainer.use_v1=false``) without the plugin's checkpoint
    manager, which only v > 1 and the reference reset require: on v0 the served-policy guard and the bound monitor's
    ``off_grpo/bound/*`` metrics run through that manager (it wraps verl's ``compute_advantage``,
    :mod:`verl_offgrpo.patches.v0_advantage_metrics`), so without it neither runs."""
    if uses_v1(config):
        return
    fqn = _get(config, "actor_rollout_ref.rollout.checkpoint_manager_class")
    if fqn in V0_MANAGER_FQNS:
        return
    plus = "+" if fqn is None else ""
    logger.warning(
        "off_grpo: trainer.use_v1=false without the plugin's checkpoint manager (got %r): on the v0 trainer the "
        "served-policy guard (%s.max_log_rprime_*) and the off_grpo/bound/* metrics run only through it; add "
        "%sactor_rollout_ref.rollout.checkpoint_manager_class=%s to run them.", fqn, PREFIX, plus, V0_MANAGER_FQN,
    )  # fmt: skip


def refuse_v0_manager_on_v1(config: Any) -> None:
    """The plugin's v0 checkpoint manager named on the V1 trainer in another mode than the plugin's: verl's V1 trainer
    never reads ``rollout.checkpoint_manager_class`` (verl 0.9.1: only the v0 ``RayPPOTrainer`` does), so the lag it
    was named for would not run while the name still selects the plugin's job-wide patches."""
    fqn = _get(config, "actor_rollout_ref.rollout.checkpoint_manager_class")
    plugins = isinstance(fqn, str) and fqn.startswith("verl_offgrpo.")  # a misspelt one selects the plugin too
    if plugins and uses_v1(config) and v1_mode(config) != TRAINER_MODE:
        raise OffGRPOConfigError(
            f"actor_rollout_ref.rollout.checkpoint_manager_class={fqn} is "
            + ("the v0 trainer's" if fqn in V0_MANAGER_FQNS else f"no manager of the plugin's ({V0_MANAGER_FQN} is v0's)")
            + ": verl's V1 trainer "
            f"(trainer.v1.trainer_mode={v1_mode(config)!r}) never reads it. Add trainer.use_v1=false, or drop it and "
            f"set trainer.v1.trainer_mode={TRAINER_MODE}."
        )


def check_mode_section(config: Any) -> None:
    """``trainer.v1.off_grpo_sync.*`` is not read by verl's trainer: the plugin's mode presents itself to verl as
    "sync", and the trainer reads a mode's settings (``parameter_sync_step``, the replay buffer's) from
    ``trainer.v1.<that name>`` (only verl's rollout-skip utility reads the mode's own name)."""
    if not uses_v1(config) or v1_mode(config) != TRAINER_MODE:
        return
    section = _get(config, f"trainer.v1.{TRAINER_MODE}")
    if section is None or ((isinstance(section, dict) or is_dict_config(section)) and not len(section)):
        return
    items = list(section.items()) if hasattr(section, "items") else []
    named = ", ".join(f"trainer.v1.{TRAINER_MODE}.{k}={v}" for k, v in items) or f"trainer.v1.{TRAINER_MODE}={section!r}"
    example = f" (e.g. +trainer.v1.sync.{items[0][0]}={items[0][1]})" if items else ""
    raise OffGRPOConfigError(
        f"{named} is not where verl's trainer reads this mode's settings: trainer_mode={TRAINER_MODE} runs as verl's "
        f"sync mode, configured from trainer.v1.sync: set them there{example}."
    )
