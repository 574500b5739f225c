"""The checks of the plugin's losses (``policy_loss.loss_mode`` off_grpo, rec) and estimators
(``adv_estimator`` off_grpo, red_drop) against the rest of verl's config.

The losses read π_k (verl's recomputed ``old_log_prob``) and, under a lag, r' = π_k/α per token,
untruncated (``rollout_is=token``, ``rollout_is_threshold=inf``); the clip widths ε are > 0; the SGD
passes i (``ppo_epochs``) >= 1; the estimators need groups of ``rollout.n`` >= 2, and rows that leave
the loss (zero-variance groups, RED-Drop) must leave its denominator too (token-mean or token-sum).
"""

from __future__ import annotations

import difflib
import logging
import math
from typing import Any, Optional

from verl_offgrpo import ESTIMATOR_NAME, LOSS_NAME, LOSS_NAMES, RED_DROP_ESTIMATOR_NAME, REC_LOSS_NAME

from .misplaced import REC_KNOBS
from .off_grpo import POLICY_LOSS_CONFIG_FQN, PREFIX, OffGRPOConfig
from .rec import PREFIX as REC_PREFIX
from .readers import as_number, flag_at, one_optimizer_step_per_batch
from .rec import RECConfig
from .values import OffGRPOConfigError, quoted_number_error, target_fields, written_value
from .values import config_value as _get
from .values import is_int as _is_int

logger = logging.getLogger(__name__)


def check_passes(config: Any) -> None:
    """i, the SGD passes over each batch (verl's ``actor.ppo_epochs``), is >= 1: verl itself accepts 0 and
    then trains on nothing (and on a null fails at the first update)."""
    passes = written_value(config, "actor_rollout_ref.actor.ppo_epochs", 1)
    if not (_is_int(passes) and passes >= 1):
        raise OffGRPOConfigError(
            f"actor_rollout_ref.actor.ppo_epochs={passes!r} is i, the passes over each batch: it must be an integer "
            ">= 1 (1 is the paper's setting; 0 would never update the policy)."
        )


def check_norm_by_std(config: Any, estimator: str) -> None:
    """The plugin's estimators read ``algorithm.norm_adv_by_std_in_grpo`` (false: Dr.GRPO) as ``bool(value)``: a
    quoted ``'false'`` (a non-empty string, hence true) or a null (false) would pick an advantage unseen."""
    flag_at(config, "algorithm.norm_adv_by_std_in_grpo", True,
            f" with algorithm.adv_estimator={estimator}, which reads it (false: A = r − mean, Dr.GRPO)")


def check_rewards_the_groups_read(config: Any, knobs: OffGRPOConfig, estimator: str) -> None:
    """The zero-variance mask and RED-Drop judge a group by its samples' rewards. ``algorithm.use_kl_in_reward``
    hands the estimator r − β·KL instead, which differs between samples whose task rewards are equal: the
    mask would miss every such group and RED-Drop would count negatives on the penalised rewards."""
    if not flag_at(config, "algorithm.use_kl_in_reward", False):
        return
    kl_in_loss = "put the KL in the loss (actor_rollout_ref.actor.use_kl_loss=true, algorithm.use_kl_in_reward=false)"
    if estimator == RED_DROP_ESTIMATOR_NAME:
        raise OffGRPOConfigError(
            f"algorithm.adv_estimator={estimator} with algorithm.use_kl_in_reward=true would count each group's "
            f"negatives (r < mean) on rewards minus β·KL, not on the task rewards: {kl_in_loss}."
        )
    if knobs.zero_var_mask:
        raise OffGRPOConfigError(
            f"{PREFIX}.zero_var_mask=true with algorithm.use_kl_in_reward=true: β·KL makes the rewards of a group "
            f"whose task rewards are all equal differ, so the mask would miss it; {kl_in_loss}, or set "
            f"{PREFIX}.zero_var_mask=false."
        )


def check_group_size(config: Any, estimator: str) -> None:
    """The plugin's advantages are statistics of each prompt's group of ``rollout.n`` responses."""
    n = written_value(config, "actor_rollout_ref.rollout.n", 2)  # verl's yaml sets it: absent, nothing to check
    quoted = quoted_number_error("actor_rollout_ref.rollout.n", n, "an integer")
    if quoted is not None:
        raise quoted
    if not _is_int(n):  # a null too: verl's own checks would fail on it with a TypeError
        raise OffGRPOConfigError(
            f"actor_rollout_ref.rollout.n must be an integer >= 2 (got {n!r}) with algorithm.adv_estimator={estimator}: "
            "it is the group size (responses per prompt), e.g. 8."
        )
    if n < 2:
        raise OffGRPOConfigError(
            f"actor_rollout_ref.rollout.n={n} with algorithm.adv_estimator={estimator}: "
            + ("a group of one response has" if n == 1 else "no response per prompt leaves")
            + " no group mean or std to compare against"
            + (" (nor negatives to drop)" if estimator == RED_DROP_ESTIMATOR_NAME else "") + "; set "
            "actor_rollout_ref.rollout.n to the group size, >= 2 (e.g. 8)."
        )


def tell_loss_over_other_estimator(config: Any, loss_mode: str) -> None:
    estimator = _get(config, "algorithm.adv_estimator")
    if estimator != "grpo":
        what = f"verl's {estimator!r} advantage"
    elif written_value(config, "actor_rollout_ref.rollout.n", 2) == 1:  # verl: mean 0, std 1 for a group of one
        what = "verl's grpo advantage, which for groups of one (rollout.n=1) is the reward r itself"
    else:
        what = "verl's grpo advantage (r − mean)/(std + 1e-6), without the zero-variance mask"
    logger.warning(
        "off_grpo: policy_loss.loss_mode=%s with algorithm.adv_estimator=%s: the loss runs on "
        "%s; %s.std_eps, std_unbiased and zero_var_mask do not apply (adv_estimator=%s for the paper's advantage).",
        loss_mode,
        estimator,
        what,
        PREFIX,
        ESTIMATOR_NAME,
    )


def tell_verls_algorithm_under_the_plugin(config: Any) -> None:
    """One line for a job that selects the plugin (its trainer mode, final outputs, its v0 manager) but names neither
    of its estimators nor its losses: verl's algorithm runs, with only the plugin's trainer and vLLM settings; on the
    v0 trainer without the plugin's checkpoint manager only its vLLM settings (v0 reads no ``trainer.v1.trainer_mode``)."""
    from .off_grpo import V0_MANAGER_FQN, V0_MANAGER_FQNS
    from .readers import uses_v1

    applies = "its trainer and vLLM settings apply"
    if not uses_v1(config) and _get(config, "actor_rollout_ref.rollout.checkpoint_manager_class") not in V0_MANAGER_FQNS:
        applies = (f"its vLLM settings apply (the v0 trainer reads no trainer.v1.trainer_mode; its lagged sync "
                   f"runs through +actor_rollout_ref.rollout.checkpoint_manager_class={V0_MANAGER_FQN})")
    logger.info(
        "off_grpo: this job runs verl's %r estimator and %r loss, not the plugin's: only %s, not %s.std_eps, "
        "std_unbiased or zero_var_mask (set algorithm.adv_estimator=%s and "
        "actor_rollout_ref.actor.policy_loss.loss_mode=%s for off-policy GRPO).",
        *(getattr(v, "value", v) for v in (_get(config, "algorithm.adv_estimator"),  # verl's AdvantageEstimator enum
                                           _get(config, "actor_rollout_ref.actor.policy_loss.loss_mode"))),
        applies, PREFIX, ESTIMATOR_NAME, LOSS_NAME,
    )


def untruncated_is_under_verls_loss(config: Any) -> str | None:
    """The warning line for verl's own loss (``policy_loss.loss_mode`` not the plugin's) under a rollout correction
    that weighs it by untruncated IS weights, or None. The plugin's yaml sets ``rollout_is=token`` with
    ``rollout_is_threshold=inf`` for its own losses, which need r' untruncated; verl's losses multiply each token's
    loss by those weights (``core_algos``' policy losses: ``pg_losses * rollout_is_weights``), which verl computes
    where vLLM's log-probs are on and bypass mode is off. A deliberate choice is not refused: one line says that
    this is not verl's own GRPO and how to get it."""
    loss_mode = _get(config, "actor_rollout_ref.actor.policy_loss.loss_mode")
    rc = _get(config, "algorithm.rollout_correction")
    if loss_mode in LOSS_NAMES or rc is None or _get(rc, "rollout_is") is None:
        return None
    if flag_at(config, "algorithm.rollout_correction.bypass_mode", False):
        return None
    if not flag_at(config, "actor_rollout_ref.rollout.calculate_log_probs", False):
        return None
    spec = written_value(rc, "rollout_is_threshold", 2.0)
    if spec is None or _threshold_upper(spec) != math.inf:
        return None
    return (
        f"off_grpo: actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode} is verl's loss, which verl multiplies "
        f"per token by its rollout IS weights (algorithm.rollout_correction.rollout_is={_get(rc, 'rollout_is')}), "
        f"untruncated here (rollout_is_threshold={spec}, which the plugin's yaml sets for its own losses): for verl's "
        "behaviour set algorithm.rollout_correction.rollout_is_threshold=2.0 (verl's default) or rollout_is=null."
    )


def _threshold_upper(spec: Any) -> float:
    """Upper bound of verl's ``rollout_is_threshold`` ("inf", 2.0, or an IcePop "lower_upper" string); anything
    else is the plugin's one-line error."""
    if isinstance(spec, str) and "_" in spec:
        return -1.0  # IcePop: tokens outside [lower, upper] are zeroed; never the paper's r'
    return float(as_number(spec, "algorithm.rollout_correction.rollout_is_threshold",
                           "a number (inf: r' untruncated) or verl's IcePop 'lower_upper'", parses_strings=True))


def check_rec_knobs_reach_the_loss(config: Any, loss_mode: Any, rec: RECConfig) -> None:
    """``policy_loss.rec`` knobs act only in the ``rec`` loss, and reach the actor workers only through the
    plugin's ``OffGRPOPolicyLossConfig`` (verl's closed ``PolicyLossConfig`` rejects the key in every worker)."""
    policy_loss = _get(config, "actor_rollout_ref.actor.policy_loss")
    if _get(policy_loss, "rec") is None:
        return
    target = _get(policy_loss, "_target_")
    if target is not None and not is_plugin_policy_loss_config(target):
        raise OffGRPOConfigError(
            f"{REC_PREFIX} is set but actor_rollout_ref.actor.policy_loss._target_={target}, which has no rec field "
            f"(every actor worker would fail to build it): set it to {POLICY_LOSS_CONFIG_FQN}."
        )
    if loss_mode != REC_LOSS_NAME and rec != RECConfig():
        changed = ", ".join(f"{f}={getattr(rec, f)}" for f in rec.changed_fields())
        raise OffGRPOConfigError(
            f"{REC_PREFIX} sets {changed}, which only the {REC_LOSS_NAME} loss reads, but "
            f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}: set loss_mode={REC_LOSS_NAME}, or drop them."
        )
    idle = rec.idle_knobs() if loss_mode == REC_LOSS_NAME else []
    if idle:
        logger.warning("off_grpo: %s sets %s: no effect with clip_mode=%s, weight=%s.",
                       REC_PREFIX, ", ".join(idle), rec.clip_mode, rec.weight)


POLICY_LOSS = "actor_rollout_ref.actor.policy_loss"


def check_policy_loss_section(config: Any) -> None:
    """verl's ``actor.policy_loss`` is a section (``loss_mode`` and the loss's knobs): a null, or a value (a loss
    name meant for ``loss_mode``), would leave the plugin's loss unselected, which is not the cause to name."""
    section = written_value(config, POLICY_LOSS, {})
    if hasattr(section, "keys"):
        return
    if section is None:
        raise OffGRPOConfigError(
            f"{POLICY_LOSS} is null: it must be a section (not null) with its loss_mode ({LOSS_NAME} or "
            f"{REC_LOSS_NAME}, the plugin's losses) and the rec knobs, as the plugin's yaml sets it: drop the override "
            "that sets it to null, and change single keys instead (e.g. policy_loss.loss_mode=rec)."
        )
    # the short name: the full key would read as one the plugin's yaml sets (yaml_hint), which this config is from
    meant = f": did you mean policy_loss.loss_mode={section}?" if section in LOSS_NAMES else "."
    raise OffGRPOConfigError(f"{POLICY_LOSS} must be a section with its loss_mode (got {section!r}){meant}")


def check_policy_loss_keys(config: Any) -> None:
    """Every key under ``actor.policy_loss`` is a field of the dataclass its ``_target_`` names (the plugin's
    ``OffGRPOPolicyLossConfig``: verl's ``PolicyLossConfig`` plus ``rec``): verl builds it with each key as a
    keyword, and a misspelt one (``recc``) fails there with a bare TypeError; here it is named with the field
    it may misspell. Not checked where the target's fields are unknown (not importable here)."""
    section = _get(config, POLICY_LOSS)
    fields = target_fields(_get(section, "_target_")) if section is not None else None
    if fields is None:
        return
    for key in map(str, section.keys()):
        if key == "_target_" or key in fields or key in REC_KNOBS:  # a rec knob without rec.: misplaced.py names it
            continue
        close = difflib.get_close_matches(key, fields, n=1)
        cls = str(_get(section, "_target_")).rpartition(".")[2]
        raise OffGRPOConfigError(
            f"{POLICY_LOSS}.{key} is no knob" + (f" (did you mean {POLICY_LOSS}.{close[0]}?)" if close else "")
            + f": {cls} (policy_loss._target_) has no field {key!r}, so verl would refuse the job"
            + ("." if close else f" (its fields: {', '.join(f for f in fields if f != '_target_')}).")
        )


def warn_idle_red_drop_seed(knobs: OffGRPOConfig, estimator: Any) -> None:
    """``red_drop_seed`` is read by the ``red_drop`` estimator only."""
    if knobs.red_drop_seed != 0 and estimator != RED_DROP_ESTIMATOR_NAME:
        logger.warning("off_grpo: %s.red_drop_seed=%s: no effect with algorithm.adv_estimator=%s (only %s reads it).",
                       PREFIX, knobs.red_drop_seed, estimator, RED_DROP_ESTIMATOR_NAME)


def warn_idle_std_knobs(config: Any, knobs: OffGRPOConfig, estimator: Any) -> None:
    """``std_eps`` and ``std_unbiased`` are read only where the plugin's estimators divide by the group std:
    ``algorithm.norm_adv_by_std_in_grpo=false`` (A = r − mean) leaves them unread."""
    if flag_at(config, "algorithm.norm_adv_by_std_in_grpo", True):
        return
    if idle := knobs.away_from_defaults(("std_eps", "std_unbiased")):
        logger.warning("off_grpo: %s: no effect with algorithm.norm_adv_by_std_in_grpo=false (A = r − mean, no std) "
                       "and algorithm.adv_estimator=%s.", ", ".join(idle), estimator)


def is_plugin_policy_loss_config(target: Any) -> bool:
    """Whether ``target`` (a ``_target_`` string) names the plugin's policy-loss config or a subclass of it."""
    if str(target) == POLICY_LOSS_CONFIG_FQN:
        return True
    try:
        from hydra.utils import get_class

        mro = get_class(str(target)).__mro__
    except Exception:  # noqa: BLE001  (an unimportable target: not ours)
        return False
    return any(f"{cls.__module__}.{cls.__qualname__}" == POLICY_LOSS_CONFIG_FQN for cls in mro)


def check_loss(config: Any, knobs: OffGRPOConfig, loss_mode: str, rec: RECConfig) -> Optional[tuple[float, float]]:
    """Checks that apply when ``actor.policy_loss.loss_mode`` is one of the plugin's losses (off_grpo, rec).

    Both read π_k (verl's recomputed ``old_log_prob``); the served-policy guard and the bound monitor read
    r' = π_k/α per token, untruncated, under a lag; the rec loss reads r' itself with ``rec.anchor`` rprime
    or alpha. Returns the rec loss's (ε_low, ε_high) (None for off_grpo), for :func:`.rec_option.tell_rec_option`
    once every check has passed.
    """
    actor = _get(config, "actor_rollout_ref.actor")
    # absent: verl's ActorConfig default, 0.2 each; a null side falls back to clip_ratio
    eps = {name: as_number(written_value(actor, name, 0.2),
                           f"actor_rollout_ref.actor.{name} (ε of the {loss_mode} clip window)", "a number > 0")
           for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high")}
    for name, value in eps.items():
        if value is not None and not value > 0:
            raise OffGRPOConfigError(
                f"actor_rollout_ref.actor.{name} (ε of the {loss_mode} clip window) must be > 0 (got {value!r})."
            )
    clip_ratio, low, high = eps.values()
    for side, value in (("low", low), ("high", high)):
        if value is None and clip_ratio is None:
            raise OffGRPOConfigError(
                f"actor_rollout_ref.actor.clip_ratio_{side} and clip_ratio are both null: ε_{side} of the {loss_mode} "
                "clip window needs one of them, a number > 0 (verl's default is 0.2)."
            )
    # a clip_ratio moved off verl's default (actor.yaml: 0.2, as are clip_ratio_low/high) that no side follows
    moved = clip_ratio is not None and float(clip_ratio) != 0.2
    if moved and low is not None and high is not None and float(clip_ratio) not in (float(low), float(high)):
        logger.warning(
            "%s: actor_rollout_ref.actor.clip_ratio=%s is not used: clip_ratio_low=%s and clip_ratio_high=%s are set "
            "(the per-side ε); set those instead.", loss_mode, clip_ratio, low, high,
        )  # fmt: skip
    dual = as_number(written_value(actor, "clip_ratio_c", 3.0), "actor_rollout_ref.actor.clip_ratio_c", "a number")
    if dual is not None and float(dual) != 3.0:  # verl's default (actor.yaml), which its vanilla loss reads
        logger.warning(
            "%s: actor_rollout_ref.actor.clip_ratio_c=%s is not used: the %s loss has no dual clip (verl's vanilla "
            "loss bounds negative-advantage ratios with it).", loss_mode, dual, loss_mode,
        )  # fmt: skip
    # each side falls back to clip_ratio, as the losses' clip_bounds do (both null is refused above)
    eps_low, eps_high = float(clip_ratio if low is None else low), float(clip_ratio if high is None else high)
    if loss_mode == REC_LOSS_NAME:
        rec.check_ring(eps_low, eps_high)
    elif eps_low >= 1:  # f's lower edge for A < 0; r ≥ 0, so an edge of 0 never binds
        logger.warning(
            "%s: actor_rollout_ref.actor.%s=%g ≥ 1 (ε_low): the clip's lower edge max(r' − ε_low, 0) is 0 wherever "
            "r' ≤ ε_low (every batch right after a sync: r' ≈ 1), so its lower side never binds there (verl's "
            "default is 0.2).", loss_mode, "clip_ratio" if low is None else "clip_ratio_low", eps_low,
        )
    rc = _get(config, "algorithm.rollout_correction")
    calculate_log_probs = flag_at(config, "actor_rollout_ref.rollout.calculate_log_probs", False)
    if rc is not None and flag_at(config, "algorithm.rollout_correction.bypass_mode", False):
        raise OffGRPOConfigError(
            f"loss {loss_mode} needs π_k (verl's recomputed old_log_prob), which bypass mode never computes: "
            "set algorithm.rollout_correction.bypass_mode=false."
        )
    rollout_is = _get(rc, "rollout_is") if rc is not None else None
    if loss_mode == REC_LOSS_NAME and rec.anchor != "pi_k" and not (calculate_log_probs and rollout_is == "token"):
        # anchor=pi_k as the way out only where it passes the checks below: no lag, rollout_is token or unset
        if knobs.sync_period > 1:
            other = f"; at {PREFIX}.sync_period={knobs.sync_period} every anchor needs them"
        elif rollout_is not in (None, "token"):
            other = f"; {REC_PREFIX}.anchor=pi_k needs rollout_is=token (or null) too"
        else:
            other = f", or {REC_PREFIX}.anchor=pi_k"
        raise OffGRPOConfigError(
            f"{REC_PREFIX}.anchor={rec.anchor} measures ρ against α, so it needs α's log-probs as r' per token: set "
            "actor_rollout_ref.rollout.calculate_log_probs=true and algorithm.rollout_correction.rollout_is=token "
            f"(got {calculate_log_probs!r}, {rollout_is!r}){other}."
        )
    if knobs.sync_period > 1:
        if not calculate_log_probs:
            raise OffGRPOConfigError(
                f"{PREFIX}.sync_period={knobs.sync_period} needs α's log-probs from vLLM: "
                "set actor_rollout_ref.rollout.calculate_log_probs=true."
            )
        if rollout_is != "token":
            raise OffGRPOConfigError(
                f"{PREFIX}.sync_period={knobs.sync_period} needs r' = π_k/α per token: "
                f"set algorithm.rollout_correction.rollout_is=token (got {rollout_is!r})."
            )
    if rollout_is is not None and rollout_is != "token":
        raise OffGRPOConfigError(
            f"loss {loss_mode} uses r' = π_k/α per token: set algorithm.rollout_correction.rollout_is=token "
            f"(got {rollout_is!r})."
        )
    # rec with anchor rprime/alpha reads α itself off r' (ρ = π_θ/π_k·r'): a truncated r' is never α
    needs_exact_rprime = loss_mode == REC_LOSS_NAME and rec.anchor != "pi_k"
    if rollout_is == "token" and (needs_exact_rprime or not knobs.allow_truncated_rprime):
        escape = (f" ({REC_PREFIX}.anchor={rec.anchor} needs α exactly; {REC_PREFIX}.anchor=pi_k does not)"
                  if needs_exact_rprime else f", or set {PREFIX}.allow_truncated_rprime=true to accept a truncated r'")  # fmt: skip
        threshold = written_value(rc, "rollout_is_threshold", 2.0)  # absent: verl's default
        # rec with anchor=pi_k keeps r' out of its loss; the guard and the bound monitor still read it
        needs = (f"loss {loss_mode} needs" if loss_mode != REC_LOSS_NAME or needs_exact_rprime else
                 f"the served-policy guard and the bound monitor need (the loss with {REC_PREFIX}.anchor=pi_k does not)")  # fmt: skip
        if threshold is None:  # verl reads it with DictConfig.get, whose default a null does not take
            raise OffGRPOConfigError(
                f"{needs} r' = π_k/α untruncated, but algorithm.rollout_correction.rollout_is_threshold=null, which "
                f"verl's rollout correction refuses at its first batch (a TypeError): set it to inf{escape}."
            )
        upper = _threshold_upper(threshold)
        if upper != math.inf:  # -inf: verl refuses it at the first batch (its upper bound must be positive)
            raise OffGRPOConfigError(
                f"{needs} r' = π_k/α untruncated, but algorithm.rollout_correction.rollout_is_threshold="
                f"{_get(rc, 'rollout_is_threshold')!r} truncates it: set it to inf{escape}."
            )
        if _get(rc, "rollout_rs") is not None:
            raise OffGRPOConfigError(
                f"algorithm.rollout_correction.rollout_rs={_get(rc, 'rollout_rs')!r} drops tokens by rejection "
                f"sampling, which is not the {loss_mode} objective: set it to null{escape}."
            )
        if flag_at(config, "algorithm.rollout_correction.rollout_is_batch_normalize", False):
            raise OffGRPOConfigError(
                f"algorithm.rollout_correction.rollout_is_batch_normalize=true rescales r': set it to false{escape}."
            )
    if loss_mode == REC_LOSS_NAME and rec.anchor == "pi_k" and one_optimizer_step_per_batch(config):
        logger.warning(
            "rec: %s.anchor=pi_k with one optimizer step per batch (ppo_epochs=1, ppo_mini_batch_size = "
            "data.train_batch_size): ρ = π_θ/π_k = 1 whenever the gradient is taken, so the clip mask and "
            "weight=is do nothing (plain group-relative REINFORCE); anchor=alpha measures ρ against the sampler.",
            REC_PREFIX,
        )
    if not (calculate_log_probs and rollout_is == "token"):  # only at sync_period 1: refused above otherwise
        tell_guard_without_rprime(knobs, calculate_log_probs, rollout_is)
    return (eps_low, eps_high) if loss_mode == REC_LOSS_NAME else None


def tell_guard_without_rprime(knobs: OffGRPOConfig, calculate_log_probs: bool, rollout_is: Any) -> None:
    """One info line where no r' = π_k/α reaches the loss at sync_period 1 (a correct on-policy run, r' = 1): the
    served-policy guard's limit and the bound monitor then have nothing to read, so they are off."""
    if not knobs.max_log_rprime_after_sync > 0:  # the guard turned off by hand: nothing to tell
        return
    logger.info(
        "off_grpo: no r' = π_k/α reaches the loss (actor_rollout_ref.rollout.calculate_log_probs=%s, "
        "algorithm.rollout_correction.rollout_is=%r): on-policy at sync_period=1, but the served-policy guard "
        "(%s.max_log_rprime_after_sync=%s) and the bound monitor (off_grpo/bound/*) have nothing to read and are off; "
        "calculate_log_probs=true and rollout_is=token turn them on.",
        calculate_log_probs, rollout_is, PREFIX, knobs.max_log_rprime_after_sync,
    )


def check_rows_leaving_denominator(config: Any, knobs: OffGRPOConfig, estimator: str) -> None:
    """The zero-variance mask and RED-Drop take rows out of the loss, denominators included.

    verl's ``token-mean`` divides by the count of ``loss_mask`` tokens after the mask and ``token-sum``
    has no denominator; the ``seq-mean-*`` modes divide by ``global_batch_size``, which verl 0.9.1 fixes
    at ``ppo_mini_batch_size × rollout.n``: masked rows would stay in the denominator and only shrink
    the step, which is not the paper's removal of the group (or of the dropped samples).
    """
    mode = str(_get(config, "actor_rollout_ref.actor.loss_agg_mode", "token-mean"))
    if not mode.startswith("seq-mean"):
        return
    if estimator == RED_DROP_ESTIMATOR_NAME:
        raise OffGRPOConfigError(
            f"algorithm.adv_estimator={RED_DROP_ESTIMATOR_NAME} with actor_rollout_ref.actor.loss_agg_mode={mode}: "
            "verl divides the seq-mean modes by a fixed global_batch_size, so dropped rows would stay in the "
            "denominator. Use loss_agg_mode=token-mean (or token-sum)."
        )
    if knobs.zero_var_mask:
        raise OffGRPOConfigError(
            f"{PREFIX}.zero_var_mask=true with actor_rollout_ref.actor.loss_agg_mode={mode}: verl "
            "divides the seq-mean modes by a fixed global_batch_size, so masked groups would stay in the "
            f"denominator. Use loss_agg_mode=token-mean (or token-sum), or set {PREFIX}.zero_var_mask=false."
        )


#: the actor engines the plugin's losses and estimators were run with (CPU tests through verl's FSDP engine, GPU runs)
TESTED_ACTORS = ("fsdp", "fsdp2")


def warn_untested_actor(config: Any) -> None:
    """One warning where the actor is not one of :data:`TESTED_ACTORS` (``model_engine=megatron``: verl runs the
    plugin's registered loss there too, untested; at v > 1 :mod:`.sync_checks` refuses it)."""
    strategy = _get(config, "actor_rollout_ref.actor.strategy", "fsdp")
    if strategy not in TESTED_ACTORS:
        logger.warning("off_grpo: actor_rollout_ref.actor.strategy=%s is untested with the plugin's losses and "
                       "estimators (tested: %s); verl runs them as registered.", strategy, ", ".join(TESTED_ACTORS))


def warn_masked_mini_batch_with_other_loss(config: Any, knobs: OffGRPOConfig, estimator: str) -> None:
    """With a loss other than the plugin's, a mini-batch whose rows all left the loss logs ``pg_loss`` NaN
    (verl's 0/0; its gradient is 0). The plugin's losses give exactly 0 there."""
    loss_mode = _get(config, "actor_rollout_ref.actor.policy_loss.loss_mode")
    rows_leave = knobs.zero_var_mask or estimator == RED_DROP_ESTIMATOR_NAME
    if rows_leave and loss_mode not in LOSS_NAMES:
        what = f"{PREFIX}.zero_var_mask=true" if knobs.zero_var_mask else f"algorithm.adv_estimator={estimator}"
        logger.warning(
            "off_grpo: %s with policy_loss.loss_mode=%s: a mini-batch whose rows all left the loss (zero-variance "
            "groups, dropped rows) has no loss token left, and verl's loss divides by 0 there: its gradient "
            "is 0, but the step logs actor/pg_loss NaN. loss_mode=%s or %s gives exactly 0.",
            what,
            loss_mode,
            LOSS_NAME,
            REC_LOSS_NAME,
        )

