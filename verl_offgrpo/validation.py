"""Startup checks: a config that would train silently wrong fails before any GPU work.

:func:`validate_off_grpo_config` is called by the plugin right after verl's own
``verl.utils.config.validate_config`` (which ``main_ppo`` runs in the driver before starting Ray),
and by the lagged-sync trainer mode when it is constructed. Each error says what to change.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from verl_offgrpo import ESTIMATOR_NAME, LOSS_NAME, TRAINER_MODE
from verl_offgrpo.knobs import OffGRPOKnobs, invalid_choice, knobs_from_algorithm
from verl_offgrpo.sync.checks import SyncConfigError, _get, check_sync_config

logger = logging.getLogger(__name__)


class OffGRPOConfigError(ValueError):
    """A configuration the off-policy GRPO plugin cannot train correctly."""


def _threshold_upper(spec: Any) -> float:
    """Upper bound of verl's ``rollout_is_threshold`` ("inf", 2.0, or an IcePop "lower_upper" string)."""
    if isinstance(spec, str) and "_" in spec:
        return -1.0  # IcePop: tokens outside [lower, upper] are zeroed; never the paper's r'
    return float(spec)


def check_knobs(knobs: OffGRPOKnobs) -> None:
    if not (isinstance(knobs.std_eps, (int, float)) and knobs.std_eps > 0):
        raise OffGRPOConfigError(f"algorithm.off_grpo.std_eps must be > 0 (got {knobs.std_eps!r}).")
    if not (isinstance(knobs.sync_period, int) and not isinstance(knobs.sync_period, bool) and knobs.sync_period >= 1):
        raise OffGRPOConfigError(
            f"algorithm.off_grpo.sync_period must be an integer >= 1 (got {knobs.sync_period!r}); 1 is on-policy GRPO."
        )
    if not (isinstance(knobs.ref_reset_period, int) and knobs.ref_reset_period >= 0):
        raise OffGRPOConfigError(
            f"algorithm.off_grpo.ref_reset_period must be an integer >= 0 (got {knobs.ref_reset_period!r}); 0 = never."
        )
    if why := invalid_choice(knobs):
        raise OffGRPOConfigError(why)
    for name in ("max_log_rprime_after_sync", "max_log_rprime_lagged"):
        limit = getattr(knobs, name)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit >= 0:
            raise OffGRPOConfigError(
                f"algorithm.off_grpo.{name} must be a number >= 0 (got {limit!r}); 0 turns the guard off."
            )


def check_loss(config: Any, knobs: OffGRPOKnobs) -> None:
    """Checks that apply when ``actor.policy_loss.loss_mode=off_grpo``."""
    actor = _get(config, "actor_rollout_ref.actor")
    for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
        value = _get(actor, name)
        if value is not None and not float(value) > 0:
            raise OffGRPOConfigError(
                f"actor_rollout_ref.actor.{name} (ε of the off_grpo clip window) must be > 0 (got {value!r})."
            )
    rc = _get(config, "algorithm.rollout_correction")
    calculate_log_probs = bool(_get(config, "actor_rollout_ref.rollout.calculate_log_probs", False))
    if rc is not None and bool(_get(rc, "bypass_mode", False)):
        raise OffGRPOConfigError(
            "loss off_grpo needs π_k (verl's recomputed old_log_prob), which bypass mode never computes: "
            "set algorithm.rollout_correction.bypass_mode=false."
        )
    rollout_is = _get(rc, "rollout_is") if rc is not None else None
    if knobs.sync_period > 1:
        if not calculate_log_probs:
            raise OffGRPOConfigError(
                f"algorithm.off_grpo.sync_period={knobs.sync_period} needs α's log-probs from vLLM: "
                "set actor_rollout_ref.rollout.calculate_log_probs=true."
            )
        if rollout_is != "token":
            raise OffGRPOConfigError(
                f"algorithm.off_grpo.sync_period={knobs.sync_period} needs r' = π_k/α per token: "
                f"set algorithm.rollout_correction.rollout_is=token (got {rollout_is!r})."
            )
    if rollout_is is not None and rollout_is != "token":
        raise OffGRPOConfigError(
            f"loss off_grpo uses r' = π_k/α per token: set algorithm.rollout_correction.rollout_is=token "
            f"(got {rollout_is!r})."
        )
    if rollout_is == "token" and not knobs.allow_truncated_rprime:
        upper = _threshold_upper(_get(rc, "rollout_is_threshold", 2.0))
        if not math.isinf(upper):
            raise OffGRPOConfigError(
                "loss off_grpo needs r' = π_k/α untruncated, but algorithm.rollout_correction.rollout_is_threshold="
                f"{_get(rc, 'rollout_is_threshold')!r} truncates it: set it to inf, or set "
                "algorithm.off_grpo.allow_truncated_rprime=true to accept a truncated r'."
            )
        if _get(rc, "rollout_rs") is not None:
            raise OffGRPOConfigError(
                f"algorithm.rollout_correction.rollout_rs={_get(rc, 'rollout_rs')!r} drops tokens by rejection "
                "sampling, which is not the off_grpo objective: set it to null, or set "
                "algorithm.off_grpo.allow_truncated_rprime=true."
            )
        if bool(_get(rc, "rollout_is_batch_normalize", False)):
            raise OffGRPOConfigError(
                "algorithm.rollout_correction.rollout_is_batch_normalize=true rescales r': set it to false, or set "
                "algorithm.off_grpo.allow_truncated_rprime=true."
            )
    top_p = float(_get(config, "actor_rollout_ref.rollout.top_p", 1.0))
    top_k = int(_get(config, "actor_rollout_ref.rollout.top_k", -1))
    if top_p < 1.0 or top_k > 0:
        logger.warning(
            "off_grpo: rollout top_p=%s top_k=%s: vLLM's log-probs of α are taken after top-p/top-k, so "
            "r' = π_k/α is biased. Use top_p=1.0, top_k=-1 for the paper's ratio.",
            top_p,
            top_k,
        )


def check_zero_var_denominator(config: Any, knobs: OffGRPOKnobs) -> None:
    """The zero-variance mask takes a group's tokens out of the loss, denominators included.

    verl's ``token-mean`` divides by the mini-batch's count of ``loss_mask`` tokens, which the engine
    counts after the mask (``batch_num_tokens``), and ``token-sum`` has no denominator, so masked rows
    leave both. The ``seq-mean-*`` modes divide by ``global_batch_size``, which verl 0.9.1 fixes at
    ``ppo_mini_batch_size × rollout.n`` whatever the mask: masked rows would stay in the denominator of
    the policy, entropy and KL terms and shrink them, so the mask would act as A = 0 plus a smaller
    step, not as the paper's removal of the group.
    """
    if not knobs.zero_var_mask:
        return
    mode = str(_get(config, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"))
    if mode.startswith("seq-mean"):
        raise OffGRPOConfigError(
            f"algorithm.off_grpo.zero_var_mask=true with actor_rollout_ref.actor.loss_agg_mode={mode}: verl "
            "divides the seq-mean modes by a fixed global_batch_size, so masked groups would stay in the "
            "denominator. Use loss_agg_mode=token-mean (or token-sum), or set algorithm.off_grpo.zero_var_mask=false."
        )


def warn_masked_mini_batch_with_other_loss(config: Any, knobs: OffGRPOKnobs) -> None:
    """The mask with a loss other than ``off_grpo``: a mini-batch can lose every token.

    When every group of a mini-batch is zero-variance, the engine counts 0 loss tokens and verl's
    ``agg_loss`` computes 0/0: the policy (and entropy, KL) terms are NaN, and the step's logged
    ``actor/pg_loss`` with them. The gradient is 0 (``masked_sum`` selects the masked tokens away), so the
    weights get what they should; only the log is NaN, which reads like a diverged run. The ``off_grpo``
    loss gives exactly 0 there (:func:`verl_offgrpo.policy_loss.compute_policy_loss_off_grpo`).
    """
    loss_mode = _get(config, "actor_rollout_ref.actor.policy_loss.loss_mode")
    if knobs.zero_var_mask and loss_mode != LOSS_NAME:
        logger.warning(
            "off_grpo: algorithm.off_grpo.zero_var_mask=true with policy_loss.loss_mode=%s: a mini-batch whose "
            "groups are all zero-variance has no loss token left, and verl's loss divides by 0 there: its gradient "
            "is 0, but the step logs actor/pg_loss NaN. loss_mode=%s gives exactly 0.",
            loss_mode,
            LOSS_NAME,
        )


def check_trainer_hooks(config: Any, knobs: OffGRPOKnobs, uses_estimator: bool) -> None:
    """The lagged sync (:func:`verl_offgrpo.sync.checks.check_sync_config`: backend, hybrid engine, LoRA,
    trainer mode / v0 manager class, ...) and the V1 zero-variance write-back need the plugin's hooks."""
    from verl_offgrpo.sync.window import WindowConfigError, check_window_config

    try:
        check_sync_config(config)
        check_window_config(config)
    except (SyncConfigError, WindowConfigError) as err:
        raise OffGRPOConfigError(str(err)) from err
    use_v1 = bool(_get(config, "trainer.use_v1", True))
    mode = _get(config, "trainer.v1.trainer_mode", "sync")
    if use_v1 and uses_estimator and knobs.zero_var_mask and mode != TRAINER_MODE:
        raise OffGRPOConfigError(
            f"algorithm.off_grpo.zero_var_mask=true on the V1 trainer needs trainer.v1.trainer_mode={TRAINER_MODE} "
            f"(got {mode!r}): it writes the mask back to the TransferQueue's loss_mask; the shipped yaml "
            "off_grpo_trainer sets it. Or set algorithm.off_grpo.zero_var_mask=false."
        )


def validate_off_grpo_config(config: Any) -> OffGRPOKnobs:
    """Raise :class:`OffGRPOConfigError` for a config the plugin cannot train correctly; return the knobs.

    ``config`` is the full composed verl config (DictConfig or dict).
    """
    algorithm = _get(config, "algorithm")
    try:
        knobs = knobs_from_algorithm(algorithm)
    except (TypeError, ValueError) as err:
        raise OffGRPOConfigError(str(err)) from err
    check_knobs(knobs)
    uses_estimator = _get(algorithm, "adv_estimator") == ESTIMATOR_NAME
    uses_loss = _get(config, "actor_rollout_ref.actor.policy_loss.loss_mode") == LOSS_NAME
    if uses_loss:
        check_loss(config, knobs)
    elif knobs.sync_period > 1:
        raise OffGRPOConfigError(
            f"algorithm.off_grpo.sync_period={knobs.sync_period} trains on samples of a lagged policy α: "
            f"set actor_rollout_ref.actor.policy_loss.loss_mode={LOSS_NAME} (the off-policy clipped objective)."
        )
    if uses_estimator:
        check_zero_var_denominator(config, knobs)
        warn_masked_mini_batch_with_other_loss(config, knobs)
    if uses_estimator or uses_loss or knobs.sync_period > 1 or knobs.rollout_schedule != "per_step":
        check_trainer_hooks(config, knobs, uses_estimator)
    if knobs.ref_reset_period > 0:
        from verl_offgrpo.ref_reset import RefResetConfigError, check_ref_reset_config

        try:
            check_ref_reset_config(config)
        except RefResetConfigError as err:
            raise OffGRPOConfigError(str(err)) from err
    return knobs
