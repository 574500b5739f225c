"""``algorithm.off_grpo.*``: the knobs (:class:`OffGRPOConfig`) and the start-up checks of the whole config.

Paper: Mroueh et al., "Revisiting Group Relative Policy Optimization: Insights into On-Policy and
Off-Policy Training", arXiv 2505.22257 (ICLR 2026). v is the sync period (vLLM serves the lagged
policy α = π_{k−v}), R the reference reset period, ε the clip width (verl's ``actor.clip_ratio``), i
the SGD passes per batch (verl's ``actor.ppo_epochs``); β is verl's ``kl_loss_coef``.

Two entry points, both pure Python over the composed config (a DictConfig, a dict or verl's
dataclasses; no verl, torch or Ray import), so they run in ``main_ppo``'s driver before Ray starts:

* :meth:`OffGRPOConfig.from_algorithm` reads the knobs from verl's ``algorithm`` section and checks
  each on its own (type, choice, range). Every module of the plugin gets its knobs this way.
* :func:`validate_off_grpo_config` also checks how the knobs fit the rest of verl's config (the loss,
  the rollout correction, the trainer, the engine). The plugin runs it at the start of verl's
  ``validate_config``, before verl's own checks and their success banner.

Every error is an :class:`OffGRPOConfigError` (``SyncConfigError`` and ``RefResetConfigError`` are
its kinds) whose one-line message names the setting, its value and what to change.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from verl_offgrpo import (
    ESTIMATOR_NAME,
    ESTIMATOR_NAMES,
    LOSS_NAME,
    LOSS_NAMES,
    RED_DROP_ESTIMATOR_NAME,
    REC_LOSS_NAME,
    TRAINER_MODE,
)

from .rec import PREFIX as REC_PREFIX
from .rec import RECConfig
from .values import OffGRPOConfigError, config_value, knobs_from_mapping
from .values import is_int as _is_int
from .values import is_number as _is_number

#: the ``policy_loss._target_`` of the shipped yaml: verl's PolicyLossConfig plus ``rec``
POLICY_LOSS_CONFIG_FQN = "verl_offgrpo.policy_loss_config.OffGRPOPolicyLossConfig"

logger = logging.getLogger(__name__)


KEEP_WEIGHTS_MODES = ("sleep_level1", "no_sleep")
EMPTY_CACHE_ON_SKIP_MODES = ("always", "if_needed")
ROLLOUT_SCHEDULES = ("per_step", "window")
#: ``final_outputs_only``'s default: on where it can hold (:func:`_final_outputs_hold`)
AUTO = "auto"

#: the v0 trainer's checkpoint manager class that runs the lagged sync
V0_MANAGER_FQN = "verl_offgrpo.sync.lagged_manager.LaggedCheckpointManager"
_V0_MANAGER_PREFIX = "verl_offgrpo.sync."
FSDP_STRATEGIES = ("fsdp", "fsdp2")

PREFIX = "algorithm.off_grpo"


class SyncConfigError(OffGRPOConfigError):
    """A configuration under which the lagged sync cannot keep α in vLLM."""


class RefResetConfigError(OffGRPOConfigError):
    """``algorithm.off_grpo.ref_reset_period`` > 0 with a configuration the reset does not support."""


@dataclass(frozen=True)
class OffGRPOConfig:
    """Every knob under ``algorithm.off_grpo``, with its default (the shipped yaml sets the same).

    > Advantage (paper §2, eq. (1): A = (r − mean_G r) / sqrt(std_G(r)² + ε_std) per prompt group G)

    Args:
        std_unbiased (bool, default true): group std with N − 1, as verl's ``grpo``; false: population std (N).
        std_eps (float, default 1e-6): ε_std, > 0. Larger damps the advantage of nearly uniform groups.
        zero_var_mask (bool, default true): groups whose rewards are all equal leave the loss entirely
            (token-mean denominator, entropy and KL too), not only A = 0 (paper §4). Needs
            ``actor.loss_agg_mode`` token-mean or token-sum.
        red_drop_seed (int, default 0): seed of RED-Drop (``adv_estimator=red_drop``, Yao et al. 2509.24203): a
            group's surplus negatives are drawn from a generator seeded by (this seed, the group's uid), so every
            process drops the same rows; another seed, another draw.

    > Lagged sync (paper §3: vLLM serves α = π_{k−v} and is synced every v steps)

    Args:
        sync_period (int, default 1): v. 1 is on-policy GRPO; larger saves v − 1 weight syncs out of v but
            trains on staler samples. The first step and the step after a resume always sync.
        rollout_schedule (str, default "per_step"): "window": the step after a sync generates the batches
            of its whole window (≤ v steps) at once, one vLLM wake and generation phase per window instead
            of per step; same samples, one update per step (paper Alg. 1). V1 trainer only.

    > The rollout engine between syncs: generating, keeping and checking α (engineering; no paper section)

    Args:
        final_outputs_only (bool | str, default "auto"): vLLM sends each request's final output only, not one
            per token (same samples, less server CPU per decode step, most in windows). "auto": on with a vLLM
            rollout and a synchronous trainer, off elsewhere; true: refused where it cannot hold.
        sync_before_validate (bool, default true): sync π before a validation pass, so validation scores
            the current policy rather than α.
        keep_weights (str, default "sleep_level1"): how vLLM keeps α between syncs. "sleep_level1": weights
            offloaded to host memory while vLLM sleeps (a host copy per step); "no_sleep": vLLM stays on
            the GPU (no copy, but its weights and KV cache hold GPU memory during the update).
        empty_cache_on_skip (str, default "if_needed"): on a skipped sync, empty torch's cache before vLLM
            wakes only when free memory < ``rollout.gpu_memory_utilization`` × total memory ("if_needed"), or
            every time as verl's own sync does ("always": slower skipped steps, never short of memory).
        verify_served_weights (bool, default true): exact check, in every vLLM worker, that a wake without
            a sync serves α bit for bit (weights checksum recorded at each sync, compared on each wake); a
            difference stops the run before the rollout. Costs one pass over the weights per slot.
        max_log_rprime_after_sync (float, default 1.0): served-policy guard: stop before the update when a
            batch sampled right after a sync (α = π_k) has mean |log π_k/α| per token above this. 0 = off.
        max_log_rprime_lagged (float, default 1.5): the same, looser, for lagged batches, whose π_k drifts from α
            by design: meant to sit above that drift and below an engine on other weights. A warning with
            ``verify_served_weights``, else an error. 0 = off.

    > Reference policy (paper §3)

    Args:
        ref_reset_period (int, default 0): R: π_ref ← π_θ every R steps, so the KL term anchors to a
            recent policy. 0 = never (verl's behaviour). Needs a reference model: ``actor.use_kl_loss`` or
            ``algorithm.use_kl_in_reward``.

    > Safety (engineering; no paper section)

    Args:
        allow_truncated_rprime (bool, default false): accept a finite ``rollout_is_threshold``, rejection
            sampling or a batch-normalised r' (not the paper's objective); the rec loss with anchor alpha or
            rprime reads α off r' and refuses them regardless.
    """

    std_unbiased: bool = True
    std_eps: float = 1e-6
    zero_var_mask: bool = True
    red_drop_seed: int = 0
    sync_period: int = 1
    rollout_schedule: str = "per_step"
    final_outputs_only: bool | str = "auto"
    sync_before_validate: bool = True
    keep_weights: str = "sleep_level1"
    empty_cache_on_skip: str = "if_needed"
    verify_served_weights: bool = True
    max_log_rprime_after_sync: float = 1.0
    max_log_rprime_lagged: float = 1.5
    ref_reset_period: int = 0
    allow_truncated_rprime: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.final_outputs_only, bool) or self.final_outputs_only == AUTO):
            quoted = isinstance(self.final_outputs_only, str) and self.final_outputs_only.lower() in ("true", "false")
            raise OffGRPOConfigError(
                f"{PREFIX}.final_outputs_only must be true, false or {AUTO} (got {self.final_outputs_only!r}"
                + (", a quoted string: write it without quotes" if quoted else "") + f"); the default is {AUTO}."
            )
        for name in ("std_unbiased", "zero_var_mask", "sync_before_validate", "verify_served_weights",
                     "allow_truncated_rprime"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise OffGRPOConfigError(
                    f"{PREFIX}.{name} must be true or false (got {value!r}): set {PREFIX}.{name}=true or =false."
                )
        if not (_is_number(self.std_eps) and math.isfinite(self.std_eps) and self.std_eps > 0):
            raise OffGRPOConfigError(f"{PREFIX}.std_eps must be > 0 (got {self.std_eps!r}); the default is 1e-6.")
        if not (_is_int(self.sync_period) and self.sync_period >= 1):
            raise OffGRPOConfigError(
                f"{PREFIX}.sync_period must be an integer >= 1 (got {self.sync_period!r}); 1 is on-policy GRPO."
            )
        if not (_is_int(self.red_drop_seed) and self.red_drop_seed >= 0):
            raise OffGRPOConfigError(
                f"{PREFIX}.red_drop_seed must be an integer >= 0 (got {self.red_drop_seed!r}); the default is 0."
            )
        if not (_is_int(self.ref_reset_period) and self.ref_reset_period >= 0):
            raise OffGRPOConfigError(
                f"{PREFIX}.ref_reset_period must be an integer >= 0 (got {self.ref_reset_period!r}); 0 = never."
            )
        for name, choices in (
            ("keep_weights", KEEP_WEIGHTS_MODES),
            ("empty_cache_on_skip", EMPTY_CACHE_ON_SKIP_MODES),
            ("rollout_schedule", ROLLOUT_SCHEDULES),
        ):
            value = getattr(self, name)
            if value not in choices:
                raise OffGRPOConfigError(f"{PREFIX}.{name} must be one of {choices} (got {value!r}).")
        for name in ("max_log_rprime_after_sync", "max_log_rprime_lagged"):
            limit = getattr(self, name)
            if not (_is_number(limit) and limit >= 0):
                raise OffGRPOConfigError(
                    f"{PREFIX}.{name} must be a number >= 0 (got {limit!r}); 0 turns the guard off."
                )
        for name in ("std_eps", "max_log_rprime_after_sync", "max_log_rprime_lagged"):
            object.__setattr__(self, name, float(getattr(self, name)))  # an integer in the yaml reads as float

    @classmethod
    def from_mapping(cls, off_grpo: Any) -> "OffGRPOConfig":
        """From the ``algorithm.off_grpo`` node (DictConfig, dict, or None for the defaults)."""
        return knobs_from_mapping(cls, off_grpo, PREFIX, "sync_period=10")

    @classmethod
    def from_algorithm(cls, algorithm: Any) -> "OffGRPOConfig":
        """From verl's ``algorithm`` section (a DictConfig, a dict or verl's ``AlgoConfig``; None: defaults)."""
        return cls.from_mapping(config_value(algorithm, "off_grpo"))


_get = config_value


def uses_lora(config: Any) -> bool:
    model = _get(config, "actor_rollout_ref.model")
    rank = _get(model, "lora.rank", 0) or 0
    if rank <= 0:
        rank = _get(model, "lora_rank", 0) or 0
    return rank > 0 or _get(model, "lora_adapter_path") is not None


def _knobs(config: Any, knobs: OffGRPOConfig | None, error: type[OffGRPOConfigError] = OffGRPOConfigError) -> OffGRPOConfig:
    """``knobs``, or the config's own, with a knob error raised as ``error`` (the caller's kind)."""
    if knobs is not None:
        return knobs
    try:
        return OffGRPOConfig.from_algorithm(_get(config, "algorithm"))
    except OffGRPOConfigError as err:
        if type(err) is error:
            raise
        raise error(str(err)) from None


def _use_v1(config: Any) -> bool:
    return bool(_get(config, "trainer.use_v1", True))


def _v1_mode(config: Any) -> Any:
    return _get(config, "trainer.v1.trainer_mode", "sync")


# --------------------------------------------------------------------------------------------------
# the whole config
# --------------------------------------------------------------------------------------------------


def validate_off_grpo_config(config: Any) -> OffGRPOConfig:
    """Raise :class:`OffGRPOConfigError` for a config the plugin cannot train correctly; return its knobs,
    ``final_outputs_only`` resolved to true or false.

    ``config`` is the full composed verl config. Checks only what the config selects: one of the plugin's
    estimators (off_grpo, red_drop), one of its losses (off_grpo, rec), a lag (sync_period > 1), a window,
    a reference reset.
    """
    knobs = OffGRPOConfig.from_algorithm(_get(config, "algorithm"))
    estimator = _get(config, "algorithm.adv_estimator")
    loss_mode = _get(config, "actor_rollout_ref.actor.policy_loss.loss_mode")
    uses_estimator = estimator in ESTIMATOR_NAMES
    uses_loss = loss_mode in LOSS_NAMES
    rec = RECConfig.from_policy_loss(_get(config, "actor_rollout_ref.actor.policy_loss"))
    _check_rec_knobs_reach_the_loss(config, loss_mode, rec)
    if uses_estimator:
        _check_group_size(config, estimator)
    if uses_loss:
        _check_loss(config, knobs, loss_mode, rec)
        if not uses_estimator:
            _tell_loss_over_other_estimator(config, loss_mode)
    elif knobs.sync_period > 1:
        raise OffGRPOConfigError(
            f"{PREFIX}.sync_period={knobs.sync_period} trains on samples of a lagged policy α: "
            f"set actor_rollout_ref.actor.policy_loss.loss_mode={LOSS_NAME} (the off-policy clipped objective) "
            f"or {REC_LOSS_NAME} (group-relative REINFORCE with a clip mask)."
        )
    if uses_estimator or uses_loss:
        _check_passes(config)
    if uses_estimator:
        _check_rows_leaving_denominator(config, knobs, estimator)
        _warn_masked_mini_batch_with_other_loss(config, knobs, estimator)
    check_window_config(config, knobs)
    if uses_estimator or uses_loss or knobs.sync_period > 1:
        check_sync_config(config, knobs=knobs)
        if _use_v1(config) and uses_estimator and _v1_mode(config) != TRAINER_MODE:
            if estimator == RED_DROP_ESTIMATOR_NAME:
                raise OffGRPOConfigError(
                    f"algorithm.adv_estimator={RED_DROP_ESTIMATOR_NAME} on the V1 trainer needs "
                    f"trainer.v1.trainer_mode={TRAINER_MODE} (got {_v1_mode(config)!r}): it writes the dropped rows "
                    "back to the TransferQueue's loss_mask; the shipped yaml off_grpo_trainer sets it."
                )
            if knobs.zero_var_mask:
                raise OffGRPOConfigError(
                    f"{PREFIX}.zero_var_mask=true on the V1 trainer needs trainer.v1.trainer_mode={TRAINER_MODE} "
                    f"(got {_v1_mode(config)!r}): it writes the mask back to the TransferQueue's loss_mask; the "
                    f"shipped yaml off_grpo_trainer sets it. Or set {PREFIX}.zero_var_mask=false."
                )
    if knobs.ref_reset_period > 0:
        check_ref_reset_config(config, knobs=knobs)
    if knobs.final_outputs_only is True and (problem := _final_outputs_problem(config)) is not None:
        raise OffGRPOConfigError(problem)
    elif knobs.final_outputs_only == AUTO:
        knobs = dataclasses.replace(knobs, final_outputs_only=_final_outputs_hold(config))
        logger.info("off_grpo: final_outputs_only=auto is %s (actor_rollout_ref.rollout.name=%r, %s).",
                    "on" if knobs.final_outputs_only else "off", _rollout_name(config),
                    f"trainer.v1.trainer_mode={_v1_mode(config)!r}" if _use_v1(config) else "v0 trainer")
    if knobs.rollout_schedule == "window" and knobs.sync_period > 1:
        _tell_if_window_runs_in_waves(config, knobs.sync_period)
    return knobs


@contextmanager
def advisories_silenced():
    """Run checks without their warning lines: for the trainer's own re-checks (TaskRunner, checkpoint
    manager) of a config the driver's ``validate_config`` already checked and advised on once. Errors
    still raise."""
    previous, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = previous


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
    if _use_v1(config) and _v1_mode(config) not in SYNCHRONOUS_V1_MODES:
        return (f"{PREFIX}.final_outputs_only=true with trainer.v1.trainer_mode={_v1_mode(config)!r}: an asynchronous "
                "trainer pauses vLLM with requests in flight, and verl's pause waits for each one's first output "
                "(which then comes only at its end) up to its barrier timeout at every sync; use "
                f"trainer_mode={TRAINER_MODE} or set {PREFIX}.final_outputs_only=false.")
    return None


def _check_passes(config: Any) -> None:
    """i, the SGD passes over each batch (verl's ``actor.ppo_epochs``), is >= 1: verl itself accepts 0 and
    then trains on nothing."""
    passes = _get(config, "actor_rollout_ref.actor.ppo_epochs")
    if passes is not None and not (_is_int(passes) and passes >= 1):
        raise OffGRPOConfigError(
            f"actor_rollout_ref.actor.ppo_epochs={passes!r} is i, the passes over each batch: it must be an integer "
            ">= 1 (1 is the paper's setting; 0 would never update the policy)."
        )


def _check_group_size(config: Any, estimator: str) -> None:
    """The plugin's advantages are statistics of each prompt's group of ``rollout.n`` responses."""
    n = _get(config, "actor_rollout_ref.rollout.n")
    if _is_int(n) and n < 2:
        raise OffGRPOConfigError(
            f"actor_rollout_ref.rollout.n={n} with algorithm.adv_estimator={estimator}: a group of one "
            "response has no group mean or std to compare against (nor negatives to drop); set "
            "actor_rollout_ref.rollout.n to the group size, >= 2 (e.g. 8)."
        )


def _tell_loss_over_other_estimator(config: Any, loss_mode: str) -> None:
    estimator = _get(config, "algorithm.adv_estimator")
    what = (
        "verl's grpo advantage (r − mean)/(std + 1e-6), without the zero-variance mask"
        if estimator == "grpo"
        else f"verl's {estimator!r} advantage"
    )
    logger.warning(
        "off_grpo: policy_loss.loss_mode=%s with algorithm.adv_estimator=%s: the loss runs on "
        "%s; %s.std_eps, std_unbiased and zero_var_mask do not apply (adv_estimator=%s for the paper's advantage).",
        loss_mode,
        estimator,
        what,
        PREFIX,
        ESTIMATOR_NAME,
    )


def _threshold_upper(spec: Any) -> float:
    """Upper bound of verl's ``rollout_is_threshold`` ("inf", 2.0, or an IcePop "lower_upper" string)."""
    if isinstance(spec, str) and "_" in spec:
        return -1.0  # IcePop: tokens outside [lower, upper] are zeroed; never the paper's r'
    return float(spec)


def _check_rec_knobs_reach_the_loss(config: Any, loss_mode: Any, rec: RECConfig) -> None:
    """``policy_loss.rec`` knobs act only in the ``rec`` loss, and reach the actor workers only through the
    plugin's ``OffGRPOPolicyLossConfig`` (verl's closed ``PolicyLossConfig`` rejects the key in every worker)."""
    policy_loss = _get(config, "actor_rollout_ref.actor.policy_loss")
    if _get(policy_loss, "rec") is None:
        return
    target = _get(policy_loss, "_target_")
    if target is not None and not _is_plugin_policy_loss_config(target):
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


def _is_plugin_policy_loss_config(target: Any) -> bool:
    """Whether ``target`` (a ``_target_`` string) names the plugin's policy-loss config or a subclass of it."""
    if str(target) == POLICY_LOSS_CONFIG_FQN:
        return True
    try:
        from hydra.utils import get_class

        mro = get_class(str(target)).__mro__
    except Exception:  # noqa: BLE001  (an unimportable target: not ours)
        return False
    return any(f"{cls.__module__}.{cls.__qualname__}" == POLICY_LOSS_CONFIG_FQN for cls in mro)


def _check_loss(config: Any, knobs: OffGRPOConfig, loss_mode: str, rec: RECConfig) -> None:
    """Checks that apply when ``actor.policy_loss.loss_mode`` is one of the plugin's losses (off_grpo, rec).

    Both read π_k (verl's recomputed ``old_log_prob``); the served-policy guard and the bound monitor read
    r' = π_k/α per token, untruncated, under a lag; the rec loss reads r' itself with ``rec.anchor`` rprime
    or alpha.
    """
    actor = _get(config, "actor_rollout_ref.actor")
    eps = {name: _get(actor, name) for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high")}
    for name, value in eps.items():
        if value is not None and not float(value) > 0:
            raise OffGRPOConfigError(
                f"actor_rollout_ref.actor.{name} (ε of the {loss_mode} clip window) must be > 0 (got {value!r})."
            )
    clip_ratio, low, high = eps.values()
    # a clip_ratio moved off verl's default (actor.yaml: 0.2, as are clip_ratio_low/high) that no side follows
    moved = clip_ratio is not None and float(clip_ratio) != 0.2
    if moved and low is not None and high is not None and float(clip_ratio) not in (float(low), float(high)):
        logger.warning(
            "%s: actor_rollout_ref.actor.clip_ratio=%s is not used: clip_ratio_low=%s and clip_ratio_high=%s are set "
            "(the per-side ε); set those instead.", loss_mode, clip_ratio, low, high,
        )  # fmt: skip
    if loss_mode == REC_LOSS_NAME:  # each side falls back to clip_ratio, as the losses' clip_bounds do
        fallback = 0.2 if clip_ratio is None else float(clip_ratio)
        rec.check_ring(float(fallback if low is None else low), float(fallback if high is None else high))
    rc = _get(config, "algorithm.rollout_correction")
    calculate_log_probs = bool(_get(config, "actor_rollout_ref.rollout.calculate_log_probs", False))
    if rc is not None and bool(_get(rc, "bypass_mode", False)):
        raise OffGRPOConfigError(
            f"loss {loss_mode} needs π_k (verl's recomputed old_log_prob), which bypass mode never computes: "
            "set algorithm.rollout_correction.bypass_mode=false."
        )
    rollout_is = _get(rc, "rollout_is") if rc is not None else None
    if loss_mode == REC_LOSS_NAME and rec.anchor != "pi_k" and not (calculate_log_probs and rollout_is == "token"):
        raise OffGRPOConfigError(
            f"{REC_PREFIX}.anchor={rec.anchor} measures ρ against α, so it needs α's log-probs as r' per token: set "
            "actor_rollout_ref.rollout.calculate_log_probs=true and algorithm.rollout_correction.rollout_is=token "
            f"(got {calculate_log_probs!r}, {rollout_is!r}), or {REC_PREFIX}.anchor=pi_k."
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
        upper = _threshold_upper(_get(rc, "rollout_is_threshold", 2.0))
        if not math.isinf(upper):
            raise OffGRPOConfigError(
                f"loss {loss_mode} needs r' = π_k/α untruncated, but algorithm.rollout_correction.rollout_is_threshold="
                f"{_get(rc, 'rollout_is_threshold')!r} truncates it: set it to inf{escape}."
            )
        if _get(rc, "rollout_rs") is not None:
            raise OffGRPOConfigError(
                f"algorithm.rollout_correction.rollout_rs={_get(rc, 'rollout_rs')!r} drops tokens by rejection "
                f"sampling, which is not the {loss_mode} objective: set it to null{escape}."
            )
        if bool(_get(rc, "rollout_is_batch_normalize", False)):
            raise OffGRPOConfigError(
                f"algorithm.rollout_correction.rollout_is_batch_normalize=true rescales r': set it to false{escape}."
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


def _check_rows_leaving_denominator(config: Any, knobs: OffGRPOConfig, estimator: str) -> None:
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


def _warn_masked_mini_batch_with_other_loss(config: Any, knobs: OffGRPOConfig, estimator: str) -> None:
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


# --------------------------------------------------------------------------------------------------
# the rollout window
# --------------------------------------------------------------------------------------------------


def check_window_config(config: Any, knobs: OffGRPOConfig | None = None) -> OffGRPOConfig:
    """Raise :class:`OffGRPOConfigError` if ``rollout_schedule=window`` cannot run with ``config``; return the knobs.

    The window is the V1 trainer mode's: one generation phase samples the prompts of v steps
    (v × ``data.train_batch_size``), so the dataloader must hand out whole training batches.
    """
    knobs = _knobs(config, knobs)
    if knobs.rollout_schedule != "window":
        return knobs
    why = f"{PREFIX}.rollout_schedule=window"
    if not _use_v1(config):
        raise OffGRPOConfigError(
            f"{why} runs in the V1 trainer mode {TRAINER_MODE} only, not with trainer.use_v1=false: set "
            f"trainer.use_v1=true, or {PREFIX}.rollout_schedule=per_step."
        )
    if _v1_mode(config) != TRAINER_MODE:
        raise OffGRPOConfigError(
            f"{why} needs trainer.v1.trainer_mode={TRAINER_MODE} (got {_v1_mode(config)!r}), or set "
            f"{PREFIX}.rollout_schedule=per_step."
        )
    gen, train = _get(config, "data.gen_batch_size"), _get(config, "data.train_batch_size")
    if gen is not None and gen != train:
        raise OffGRPOConfigError(
            f"{why} samples v × data.train_batch_size prompts per window, so data.gen_batch_size={gen!r} must be "
            f"unset (null) or equal to data.train_batch_size={train!r}."
        )
    k = _get(config, "trainer.v1.sync.parameter_sync_step", 1)
    if k not in (None, 1):
        raise OffGRPOConfigError(
            f"{why} already generates a whole sync window at once: drop trainer.v1.sync.parameter_sync_step={k!r}."
        )
    for dotted, what in (
        ("algorithm.filter_groups.enable", "refill filtered groups"),
        ("trainer.v1.sampler.sync_refill_failed_groups", "refill failed groups"),
        ("skip.rollout_tq.enable", "skip rollouts"),
    ):
        if _get(config, dotted, False) is True:
            raise OffGRPOConfigError(
                f"{why} cannot {what} after the window's one generation phase: set {dotted}=false, or "
                f"{PREFIX}.rollout_schedule=per_step."
            )
    test_freq = _get(config, "trainer.test_freq", -1)
    if _is_int(test_freq) and test_freq > 0 and not knobs.sync_before_validate:
        raise OffGRPOConfigError(
            f"{why} lets vLLM drop α after each window's generation, so validation needs a sync: set "
            f"{PREFIX}.sync_before_validate=true (or trainer.test_freq=-1)."
        )
    if knobs.sync_period == 1:
        logger.warning("off_grpo: %s with sync_period=1 is on-policy GRPO (a window of one step).", why)
    save_freq = _get(config, "trainer.save_freq", -1)
    if knobs.sync_period > 1 and _is_int(save_freq) and save_freq > 0 and save_freq % knobs.sync_period:
        logger.info(
            "off_grpo: trainer.save_freq=%d is not a multiple of sync_period=%d, so checkpoints fall inside windows; "
            "a resume from one starts a new window, and the prompts buffered for the rest of the old one (up to "
            "%d steps' worth) are not trained on. A multiple of %d avoids that.",
            save_freq, knobs.sync_period, knobs.sync_period - 1, knobs.sync_period,
        )
    return knobs


def window_samples_per_engine(config: Any, sync_period: int) -> int | None:
    """Samples each vLLM engine holds when a window of ``sync_period`` steps is generated at once, or None.

    ⌈v · ``data.train_batch_size`` · ``rollout.n`` / engines⌉, engines = ⌊GPUs / (TP·DP·PP)⌋ · DP: verl
    builds ⌊GPUs / (TP·DP·PP)⌋ replicas, spreads the requests over them, and each engine (one per
    data-parallel rank of a replica) has its own ``max_num_seqs``.
    """
    rollout = "actor_rollout_ref.rollout"
    batch, n = _get(config, "data.train_batch_size"), _get(config, f"{rollout}.n", 1)
    gpus = (_get(config, "trainer.n_gpus_per_node", 1) or 1) * (_get(config, "trainer.nnodes", 1) or 1)
    tp = _get(config, f"{rollout}.tensor_model_parallel_size", 1) or 1
    pp = _get(config, f"{rollout}.pipeline_model_parallel_size", 1) or 1
    dp = _get(config, f"{rollout}.data_parallel_size", 1) or 1
    if not all(_is_int(x) and x > 0 for x in (batch, n, gpus, tp, pp, dp)):
        return None
    return math.ceil(sync_period * batch * n / max(gpus // (tp * dp * pp) * dp, 1))


def _tell_if_window_runs_in_waves(config: Any, sync_period: int) -> None:
    """One info line when vLLM's ``max_num_seqs`` cannot hold a window's samples: the window's generation
    then runs at most ``max_num_seqs`` at a time, ≈ ⌈samples / max_num_seqs⌉ rounds (vLLM refills a
    finished sequence's slot at once, so the rounds overlap). Information, not a warning: where the
    engine is already busy at ``max_num_seqs``, one batch per window is not much faster."""
    per_engine = window_samples_per_engine(config, sync_period)
    seqs = _get(config, "actor_rollout_ref.rollout.max_num_seqs")
    if per_engine is None or not _is_int(seqs) or seqs <= 0 or seqs >= per_engine:
        return
    rollout = "actor_rollout_ref.rollout"
    fix = f"{rollout}.max_num_seqs={per_engine}"
    tokens = _get(config, f"{rollout}.max_num_batched_tokens")
    if _is_int(tokens) and tokens < per_engine:  # vLLM refuses max_num_batched_tokens < max_num_seqs
        fix += f" {rollout}.max_num_batched_tokens={per_engine}"
    logger.info(
        "off_grpo: a window of %d steps puts %d samples on each vLLM engine, and %s.max_num_seqs=%d runs at most "
        "%d at a time (≈ %d overlapping rounds). That is fine where the engine is already busy at %d sequences; "
        "only if it is not, more at once (up to %s, as far as the KV cache allows: vLLM logs its maximum "
        "concurrency at startup) shortens the window's generation.",
        sync_period, per_engine, rollout, seqs, seqs, math.ceil(per_engine / seqs), seqs, fix,
    )


# --------------------------------------------------------------------------------------------------
# the lagged sync
# --------------------------------------------------------------------------------------------------


def check_sync_config(config: Any, trainer: str | None = None, *, knobs: OffGRPOConfig | None = None) -> OffGRPOConfig:
    """Raise :class:`SyncConfigError` if the lagged sync cannot keep α in vLLM with ``config``; return the knobs.

    ``trainer``: "v1" or "v0"; default from ``trainer.use_v1``. With ``sync_period == 1`` verl's own sync
    runs untouched and only the knobs are checked. Also called when the V1 mode or the v0 checkpoint
    manager is built.
    """
    knobs = _knobs(config, knobs, SyncConfigError)
    v = knobs.sync_period
    if v == 1:
        return knobs
    if trainer is None:
        trainer = "v1" if _use_v1(config) else "v0"
    if trainer not in ("v1", "v0"):
        raise ValueError(f"trainer must be 'v1' or 'v0', got {trainer!r}")
    why = f"{PREFIX}.sync_period={v} (vLLM serves the lagged weights α between syncs)"
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
    free_cache_engine = bool(_get(rollout, "free_cache_engine", True))
    v1_mode_sets_it = trainer == "v1" and _v1_mode(config) == TRAINER_MODE
    if knobs.keep_weights == "no_sleep" and free_cache_engine and not v1_mode_sets_it:
        raise SyncConfigError(
            f"{why} with {PREFIX}.keep_weights=no_sleep needs actor_rollout_ref.rollout.free_cache_engine=false "
            f"(on the V1 trainer, trainer_mode={TRAINER_MODE} sets it itself)."
        )
    if knobs.keep_weights == "sleep_level1" and free_cache_engine and not bool(_get(rollout, "enable_sleep_mode", True)):
        raise SyncConfigError(
            f"{why}: actor_rollout_ref.rollout.enable_sleep_mode=false cannot sleep vLLM at level 1; set it true, "
            f"or use {PREFIX}.keep_weights=no_sleep."
        )
    if trainer == "v1":
        if _v1_mode(config) != TRAINER_MODE:
            raise SyncConfigError(
                f"{why} on the V1 trainer needs trainer.v1.trainer_mode={TRAINER_MODE} (got {_v1_mode(config)!r}); "
                + ("verl's sync mode syncs after every step." if _v1_mode(config) == "sync"
                   else "the async modes sync on their own schedule.")
            )
    else:
        fqn = _get(rollout, "checkpoint_manager_class")
        if not (isinstance(fqn, str) and fqn.startswith(_V0_MANAGER_PREFIX)):
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
    return knobs


# --------------------------------------------------------------------------------------------------
# the reference reset
# --------------------------------------------------------------------------------------------------


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
    period = _knobs(config, knobs, RefResetConfigError).ref_reset_period
    if period == 0:
        return 0
    why = f"{PREFIX}.ref_reset_period={period} (π_ref ← π_θ every {period} steps)"
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
    if _use_v1(config):
        if _v1_mode(config) != TRAINER_MODE:
            raise RefResetConfigError(
                f"{why} on the V1 trainer runs from the plugin's trainer mode: set trainer.v1.trainer_mode={TRAINER_MODE} "
                f"(got {_v1_mode(config)!r})."
            )
    else:
        fqn = _get(config, "actor_rollout_ref.rollout.checkpoint_manager_class")
        if not (isinstance(fqn, str) and fqn.startswith(_V0_MANAGER_PREFIX)):
            raise RefResetConfigError(
                f"{why} with trainer.use_v1=false runs from the plugin's checkpoint manager: set "
                f"+actor_rollout_ref.rollout.checkpoint_manager_class={V0_MANAGER_FQN} (got {fqn!r})."
            )
    return period
