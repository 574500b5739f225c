"""The start-up check of the whole composed config: :func:`validate_off_grpo_config`, which runs the checks
of what the config selects (:mod:`.engine_kwargs_checks`, :mod:`.loss_estimator_checks`, :mod:`.window_checks`,
:mod:`.refill_checks`, :mod:`.sync_checks`, :mod:`.ref_reset_checks`, :mod:`.old_log_prob_checks`,
:mod:`.final_outputs_checks`, :mod:`.sampler_checks`) in a fixed order, and :func:`advisories_silenced` for
re-checks of a config already advised on.

Pure Python over the composed config (a DictConfig, a dict or verl's dataclasses; no verl, torch or Ray
import), so it runs in ``main_ppo``'s driver before Ray starts: the plugin runs it at the start of
verl's ``validate_config``, before verl's own checks and their success banner.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any

from verl_offgrpo import ESTIMATOR_NAMES, LOSS_NAME, LOSS_NAMES, RED_DROP_ESTIMATOR_NAME, REC_LOSS_NAME, TRAINER_MODE

from . import (
    final_outputs_checks,
    guard_checks,
    loss_estimator_checks,
    names,
    old_log_prob_checks,
    rec_option,
    ref_reset_checks,
    sampler_checks,
    sync_checks,
    validation_lag,
    window_checks,
)
from .engine_kwargs_checks import refuse_engine_kwargs_overrides
from .final_outputs_checks import resolve_final_outputs
from .guard_checks import warn_if_unguarded, warn_where_narrowed
from .legacy_reward_keys import refuse_legacy_reward_keys
from .tilde_path_checks import check_paths_verl_reads
from .data_file_checks import check_data_files_verl_reads, check_train_rows_fill_a_batch
from .data_source_checks import check_data_sources_verl_can_score
from .loss_estimator_checks import (
    check_group_size,
    check_loss,
    check_norm_by_std,
    check_passes,
    check_rewards_the_groups_read,
    check_policy_loss_keys,
    check_policy_loss_section,
    check_rec_knobs_reach_the_loss,
    check_rows_leaving_denominator,
    tell_loss_over_other_estimator,
    tell_verls_algorithm_under_the_plugin,
    untruncated_is_under_verls_loss,
    warn_idle_red_drop_seed,
    warn_idle_std_knobs,
    warn_untested_actor,
    warn_masked_mini_batch_with_other_loss,
)
from .off_grpo import PREFIX, OffGRPOConfig
from .misplaced import refuse_misplaced_knobs
from .old_log_prob_checks import check_skip_old_log_prob
from .readers import uses_v1, v1_mode
from .verl_counts import check_rollout_fits_the_gpus, check_verl_counts
from .rec import RECConfig
from .ref_reset_checks import check_ref_reset_config
from .rollout_source_checks import check_rollouts_are_sampled_now
from .refill_checks import check_gen_batch_divides, refuse_refill_on_v0
from .reward_checks import check_custom_reward_function
from .sampler_checks import check_sampler
from .sync_checks import (
    check_mode_section,
    check_sync_config,
    refuse_v0_manager_on_v1,
    tell_if_the_period_spans_the_run,
    tell_v0_without_manager,
)
from .values import OffGRPOConfigError, closest_knob, reading, target_fields
from .values import config_value as _get
from .window_checks import (
    advise_on_window,
    check_max_num_seqs_fits_batched_tokens,
    refuse_impossible_window,
    resolve_rollout_schedule,
    tell_if_window_runs_in_waves,
    tell_rollout_schedule,
)

#: the loggers of the checks' warning and info lines (:func:`advisories_silenced` quiets them)
_ADVISING_LOGGERS = (loss_estimator_checks.logger, window_checks.logger, final_outputs_checks.logger,
                     validation_lag.logger, sampler_checks.logger, old_log_prob_checks.logger, rec_option.logger,
                     names.logger, sync_checks.logger, ref_reset_checks.logger, guard_checks.logger)


def validate_off_grpo_config(config: Any) -> OffGRPOConfig:
    """Raise :class:`OffGRPOConfigError` for a config the plugin cannot train correctly; return its knobs,
    ``final_outputs_only`` resolved to true or false and ``rollout_schedule`` to per_step or window.

    ``config`` is the full composed verl config. Checks only what the config selects: one of the plugin's
    estimators (off_grpo, red_drop), one of its losses (off_grpo, rec), a lag (sync_period > 1), a window,
    a reference reset. A number read as a string says whether an interpolation made it one (:func:`.values.reading`).
    """
    with reading(config), advice_after_the_checks():
        return _validate(config)


@contextmanager
def advice_after_the_checks():
    """Hold the checks' warning and info lines (:data:`_ADVISING_LOGGERS`, this thread's) until the block has run
    without an exception, then log them in order; a config that is refused gets its one error line and none of
    them (a warning on a job that does not run is noise above the error that matters). Nested blocks hold in the
    outermost one."""
    held = []
    thread = threading.get_ident()

    def hold(record) -> bool:
        if record.thread != thread:  # another thread's line is not this validation's
            return True
        held.append(record)
        return False

    for logger in _ADVISING_LOGGERS:
        logger.addFilter(hold)
    try:
        yield
    finally:
        for logger in _ADVISING_LOGGERS:
            logger.removeFilter(hold)
    for record in held:  # only when the block raised nothing
        logging.getLogger(record.name).handle(record)


def _validate(config: Any) -> OffGRPOConfig:
    refuse_misspelt_off_grpo_section(config)
    check_policy_loss_section(config)
    requested = OffGRPOConfig.from_algorithm(_get(config, "algorithm"))
    knobs = resolve_rollout_schedule(config, requested)
    estimator = _get(config, "algorithm.adv_estimator")
    loss_mode = _get(config, "actor_rollout_ref.actor.policy_loss.loss_mode")
    uses_estimator = estimator in ESTIMATOR_NAMES
    uses_loss = loss_mode in LOSS_NAMES
    if knobs.sync_period > 1:
        refuse_engine_kwargs_overrides(config)
    if uses_estimator or uses_loss or knobs.sync_period > 1:
        check_verl_counts(config)
        check_rollout_fits_the_gpus(config)
    rec = RECConfig.from_policy_loss(_get(config, "actor_rollout_ref.actor.policy_loss"))
    check_rec_knobs_reach_the_loss(config, loss_mode, rec)
    check_policy_loss_keys(config)
    refuse_misplaced_knobs(config)  # after the misspelt sections' checks, which name the misspelling
    warn_idle_red_drop_seed(knobs, estimator)
    if uses_estimator:
        check_group_size(config, estimator)
        check_norm_by_std(config, estimator)
        warn_idle_std_knobs(config, knobs, estimator)
        check_rewards_the_groups_read(config, knobs, estimator)
    if uses_loss:
        rec_eps = check_loss(config, knobs, loss_mode, rec)
        if not uses_estimator:
            tell_loss_over_other_estimator(config, loss_mode)
    elif knobs.sync_period > 1:
        raise OffGRPOConfigError(
            f"{PREFIX}.sync_period={knobs.sync_period} trains on samples of a lagged policy α: "
            f"set actor_rollout_ref.actor.policy_loss.loss_mode={LOSS_NAME} (the off-policy clipped objective) "
            f"or {REC_LOSS_NAME} (group-relative REINFORCE with a clip mask)."
        )
    if uses_estimator or uses_loss:
        check_passes(config)
        check_sampler(config)
        check_custom_reward_function(config)
    refuse_legacy_reward_keys(config)  # every selecting job: before the scorer check, which names reward.* keys
    check_paths_verl_reads(config)  # every selecting job: verl reads its data and model paths as written
    check_data_files_verl_reads(config)  # before the scorer check, which reads the data_source column
    check_data_sources_verl_can_score(config)  # every selecting job: verl's estimator too reaches the scorer
    if uses_estimator:
        check_rows_leaving_denominator(config, knobs, estimator)
        warn_masked_mini_batch_with_other_loss(config, knobs, estimator)
    check_mode_section(config)
    refuse_v0_manager_on_v1(config)
    refuse_impossible_window(config, knobs)  # an explicit window on a trainer without one: its error first
    check_rollouts_are_sampled_now(config)  # after the window's own line for its skip
    check_gen_batch_divides(config)
    refuse_refill_on_v0(config)
    check_max_num_seqs_fits_batched_tokens(config)
    if uses_estimator or uses_loss or knobs.sync_period > 1:
        check_sync_config(config, knobs=knobs)
        if uses_v1(config) and uses_estimator and v1_mode(config) != TRAINER_MODE:
            if estimator == RED_DROP_ESTIMATOR_NAME:
                raise OffGRPOConfigError(
                    f"algorithm.adv_estimator={RED_DROP_ESTIMATOR_NAME} on the V1 trainer needs "
                    f"trainer.v1.trainer_mode={TRAINER_MODE} (got {v1_mode(config)!r}): it writes the dropped rows "
                    "back to the TransferQueue's loss_mask; the shipped yaml off_grpo_trainer sets it."
                )
            if knobs.zero_var_mask:
                raise OffGRPOConfigError(
                    f"{PREFIX}.zero_var_mask=true on the V1 trainer needs trainer.v1.trainer_mode={TRAINER_MODE} "
                    f"(got {v1_mode(config)!r}): it writes the mask back to the TransferQueue's loss_mask; the "
                    f"shipped yaml off_grpo_trainer sets it. Or set {PREFIX}.zero_var_mask=false."
                )
    if knobs.ref_reset_period > 0:
        check_ref_reset_config(config, knobs=knobs)
    check_skip_old_log_prob(config, knobs)
    check_train_rows_fill_a_batch(config)  # after the checks of what the rows hold, which name the column at fault
    knobs = resolve_final_outputs(config, knobs)
    # warnings of a job that runs, after every check that can refuse it
    if not uses_loss and (untruncated := untruncated_is_under_verls_loss(config)) is not None:
        loss_estimator_checks.logger.warning(untruncated)
    if uses_estimator or uses_loss:  # at v > 1 (and with a reference reset) the v0 manager is required, not advised
        tell_v0_without_manager(config)
        warn_untested_actor(config)
        warn_if_unguarded(knobs)
    else:
        tell_verls_algorithm_under_the_plugin(config)
    if uses_loss and rec_eps is not None:  # which REC/RED option runs: never before an error that stops the job
        rec_option.tell_rec_option(config, rec, *rec_eps)
    # after every check that can refuse the job, so that no line says how vLLM will generate before an error
    # says the job cannot run; before the window's own advisories, which name the window
    tell_rollout_schedule(config, requested)
    advise_on_window(config, knobs)
    warn_where_narrowed(config, knobs)
    if knobs.rollout_schedule == "window" and knobs.sync_period > 1:
        tell_if_window_runs_in_waves(config, knobs.sync_period)
    validation_lag.tell_if_validation_restarts_the_lag(config, knobs)
    tell_if_the_period_spans_the_run(config, knobs)
    sync_checks.tell_lag_knobs_at_v1(knobs)
    return knobs


#: difflib ratio at or above which a key under ``algorithm`` misspells ``off_grpo`` (``offgrpo`` 0.93, ``off-grpo``
#: 0.88, ``offgrpo_x`` 0.82; not ``grpo`` 0.67 nor ``off_policy`` 0.67, which another package may add)
SECTION_CLOSE = 0.8


def refuse_misspelt_off_grpo_section(config: Any) -> None:
    """A key under ``algorithm`` that is no field of verl's algorithm config (its ``_target_``, verl's ``AlgoConfig``)
    and misspells ``off_grpo`` (``+algorithm.offgrpo.red_drop_seed=1``, which hydra's advice to append a misspelt
    key leads to): nothing reads it, so the knobs it was meant to set would be silently at their defaults."""
    import dataclasses
    import difflib

    from .values import is_dict_config

    algorithm = _get(config, "algorithm")
    if algorithm is None or not hasattr(algorithm, "keys"):
        return
    section = PREFIX.rpartition(".")[2]
    verls = {"_target_", section} | set(target_fields(_get(algorithm, "_target_")) or ())
    for key in map(str, algorithm.keys()):
        if key in verls or difflib.SequenceMatcher(None, key, section).ratio() < SECTION_CLOSE:
            continue
        node = _get(algorithm, key)
        if isinstance(node, dict) or is_dict_config(node):
            names = {f.name for f in dataclasses.fields(OffGRPOConfig)}
            meant = [f"{PREFIX}.{k if k in names else closest_knob(str(k), OffGRPOConfig) or k}={node[k]}" for k in node]
            what = f"{', '.join(f'algorithm.{key}.{k}={node[k]}' for k in node)} would do nothing"
            fix = f"replace {'them' if len(node) > 1 else 'it'} with {' '.join(meant)}"
        else:
            what, fix = f"algorithm.{key}={node} would do nothing", f"drop it and set the knobs as {PREFIX}.<knob>=..."
        plus = " (no +: the plugin's yaml sets every knob)" if _get(algorithm, section) is not None else ""
        raise OffGRPOConfigError(
            f"algorithm.{key} is no field of verl's algorithm section (did you mean {PREFIX}?): "
            f"{what}; {fix}{plus}."
        )


@contextmanager
def advisories_silenced():
    """Run checks without their warning lines: for the trainer's own re-checks (TaskRunner, checkpoint
    manager) of a config the driver's ``validate_config`` already checked and advised on once. Errors
    still raise."""
    previous = [(logger, logger.disabled) for logger in _ADVISING_LOGGERS]
    for logger, _ in previous:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in previous:
            logger.disabled = disabled

