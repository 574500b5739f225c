"""``algorithm.off_grpo.*``: the knobs (:class:`OffGRPOConfig`), their choices and defaults, the config
error kinds, and the names of the plugin's classes that verl's config points at.

Paper: Mroueh et al., "Revisiting Group Relative Policy Optimization: Insights into On-Policy and
Off-Policy Training", arXiv 2505.22257 (ICLR 2026). v is the sync period (vLLM serves the lagged
policy α = π_{k−v}), R the reference reset period, ε the clip width (verl's ``actor.clip_ratio_low``/``_high``), i
the SGD passes per batch (verl's ``actor.ppo_epochs``); β is verl's ``kl_loss_coef``.

:meth:`OffGRPOConfig.from_algorithm` reads the knobs from verl's ``algorithm`` section and checks each
on its own (type, choice, range); every module of the plugin gets its knobs this way. How the knobs fit
the rest of verl's config is checked by :func:`verl_offgrpo.config.validate.validate_off_grpo_config`.
Pure Python: no verl, torch or Ray import.

Every error is an :class:`OffGRPOConfigError` (``SyncConfigError`` and ``RefResetConfigError`` are
its kinds) whose one-line message names the setting, its value and what to change.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from .values import OffGRPOConfigError, check_numbers, config_value, knobs_from_mapping
from .values import is_int as _is_int
from .values import is_number as _is_number

#: the ``policy_loss._target_`` of the shipped yaml: verl's PolicyLossConfig plus ``rec``
POLICY_LOSS_CONFIG_FQN = "verl_offgrpo.policy_loss_config.OffGRPOPolicyLossConfig"

KEEP_WEIGHTS_MODES = ("sleep_level1", "no_sleep")
EMPTY_CACHE_ON_SKIP_MODES = ("always", "if_needed")
ROLLOUT_SCHEDULES = ("auto", "per_step", "window")
#: the default of ``final_outputs_only`` (on where it can hold, :mod:`.final_outputs_checks`) and of
#: ``rollout_schedule`` (the window where it can run, :func:`.window_checks.resolve_rollout_schedule`)
AUTO = "auto"

#: the v0 trainer's checkpoint manager class that runs the lagged sync (and the reference reset)
V0_MANAGER_FQN = "verl_offgrpo.sync.lagged_manager.LaggedCheckpointManager"
#: the dotted paths that load it (verl imports the class by its path only in Ray's TaskRunner): its own, and
#: the earlier one that :mod:`verl_offgrpo.sync.checkpoint_manager_v0` keeps
V0_MANAGER_FQNS = (V0_MANAGER_FQN, "verl_offgrpo.sync.checkpoint_manager_v0.LaggedCheckpointManager")

PREFIX = "algorithm.off_grpo"

#: the numeric knobs and their ranges (:func:`~.values.check_numbers`): the integers, then numbers (read as float)
INTEGER_KNOBS = ("red_drop_seed", "sync_period", "ref_reset_period")
NUMBER_RANGES = {"red_drop_seed": ">= 0", "sync_period": ">= 1", "ref_reset_period": ">= 0",
                 "std_eps": "> 0", "max_log_rprime_after_sync": ">= 0", "max_seq_log_rprime_after_sync": ">= 0",
                 "max_log_rprime_lagged": ">= 0"}


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
        std_eps (float, default 1e-6): ε_std, finite and > 0. Larger damps the advantage of nearly uniform
            groups.
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
        rollout_schedule (str, default "auto"): "window": the step after a sync generates its window's (≤ v)
            batches at once, one vLLM wake and generation per window; same samples, one update a step (paper
            Alg. 1; V1 trainer). "per_step": each step generates. "auto": window at v > 1 where it can run.
        skip_old_log_prob (bool, default false): on lagged batches (rollout lag ≥ 1; V1, one optimizer step a batch)
            take π_k from the update's own forward (π_θ = π_k there, detached) instead of verl's separate
            ``old_log_prob`` pass: one forward fewer on v − 1 of v steps; verl's ``actor/entropy`` then lag-0 steps only.

    > The rollout engine between syncs: generating, keeping and checking α (engineering; no paper section)

    Args:
        final_outputs_only (bool | str, default "auto"): vLLM sends each request's final output only, not one
            per token (same samples, less server CPU per decode step, most in windows). "auto": on with a vLLM
            rollout and a synchronous trainer, off elsewhere; true: refused where it cannot hold.
        sync_before_validate (bool, default true): sync π before a validation pass, so validation scores
            the current policy rather than α; each validation is then a sync: keep test_freq a multiple of v.
        keep_weights (str, default "sleep_level1"): how vLLM keeps α between syncs (per_step). "sleep_level1": weights
            offloaded to host memory while vLLM sleeps (a host copy per step); "no_sleep": vLLM stays on
            the GPU (no copy, but its weights and KV cache hold GPU memory during the update).
        empty_cache_on_skip (str, default "if_needed"): on a skipped sync (per_step), empty torch's cache before vLLM
            wakes only when free memory < ``rollout.gpu_memory_utilization`` × total memory ("if_needed"), or
            every time as verl's own sync does ("always": slower skipped steps, never short of memory).
        verify_served_weights (bool, default true): exact checks (v > 1) that a wake without a sync serves α bit
            for bit, and (rollout DP = 1) that each sync reached every TP rank and changed tensor as the trainer's
            changed; a failure stops the run before the rollout. A pass over the weights a slot.
        max_log_rprime_after_sync (float, default 0.5): served-policy guard: stop before the update when a
            batch sampled right after a sync (α = π_k) has mean |log π_k/α| per token above this: far above a
            correct engine's numerics, below another model's weights. 0 = off.
        max_seq_log_rprime_after_sync (float, default 1.0): the same per response: stop when one response of that
            batch has mean |log π_k/α| per token above this (an engine among E on other weights moves the batch's
            mean by 1/E of its drift only). 0 = off.
        max_log_rprime_lagged (float, default 1.5): the same, looser, for lagged batches (π_k drifts from α by
            design): above that drift, below an engine on other weights. A warning only where ``verify_served_weights``
            reaches every vLLM worker (DP = 1; a window: B·n ≥ engines, lag-0 limit on), else an error. 0 = off.

    > Reference policy (paper §3)

    Args:
        ref_reset_period (int, default 0): R: π_ref ← π_θ every R steps, so the KL term anchors to a
            recent policy. 0 = never (verl's behaviour). Needs a reference model: ``actor.use_kl_loss`` (or
            ``algorithm.use_kl_in_reward`` with ``zero_var_mask=false``, not with ``red_drop``).

    > Safety (engineering; no paper section)

    Args:
        allow_truncated_rprime (bool, default false): accept a finite ``rollout_is_threshold``, rejection
            sampling or a batch-normalised r' (not the paper's objective; the guard reads π_k/α off the log-probs);
            the rec loss with anchor alpha or rprime reads α off r' and refuses them regardless.
    """

    std_unbiased: bool = True
    std_eps: float = 1e-6
    zero_var_mask: bool = True
    red_drop_seed: int = 0
    sync_period: int = 1
    rollout_schedule: str = AUTO
    skip_old_log_prob: bool = False
    final_outputs_only: bool | str = "auto"
    sync_before_validate: bool = True
    keep_weights: str = "sleep_level1"
    empty_cache_on_skip: str = "if_needed"
    verify_served_weights: bool = True
    max_log_rprime_after_sync: float = 0.5
    max_seq_log_rprime_after_sync: float = 1.0
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
                     "allow_truncated_rprime", "skip_old_log_prob"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise OffGRPOConfigError(
                    f"{PREFIX}.{name} must be true or false (got {value!r}): set {PREFIX}.{name}=true or =false."
                )
        check_numbers(self, PREFIX, NUMBER_RANGES, INTEGER_KNOBS)  # a word or a bool: not its range's error
        if not (_is_number(self.std_eps) and math.isfinite(self.std_eps) and self.std_eps > 0):
            raise OffGRPOConfigError(
                f"{PREFIX}.std_eps must be finite and > 0 (got {self.std_eps!r}); the default is 1e-6."
            )
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
        for name in ("max_log_rprime_after_sync", "max_seq_log_rprime_after_sync", "max_log_rprime_lagged"):
            limit = getattr(self, name)
            if not (_is_number(limit) and math.isfinite(limit) and limit >= 0):  # inf: off, yet not said so
                raise OffGRPOConfigError(
                    f"{PREFIX}.{name} must be a finite number >= 0 (got {limit!r}); 0 turns the guard off."
                )
        for name in ("std_eps", "max_log_rprime_after_sync", "max_seq_log_rprime_after_sync", "max_log_rprime_lagged"):
            object.__setattr__(self, name, float(getattr(self, name)))  # an integer in the yaml reads as float

    @property
    def skips_lagged_old_log_prob(self) -> bool:
        """Whether a lagged batch may skip verl's old_log_prob pass: ``skip_old_log_prob`` at v > 1 (no batch
        is lagged at v = 1)."""
        return self.skip_old_log_prob and self.sync_period > 1

    def away_from_defaults(self, names: tuple[str, ...]) -> list[str]:
        """``algorithm.off_grpo.<knob>=<value>`` for each knob of ``names`` set away from its default, in that order
        (the lines that name knobs a config sets where nothing reads them)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return [f"{PREFIX}.{name}={getattr(self, name)}" for name in names if getattr(self, name) != defaults[name]]

    @classmethod
    def from_mapping(cls, off_grpo: Any) -> "OffGRPOConfig":
        """From the ``algorithm.off_grpo`` node (DictConfig, dict, or None for the defaults)."""
        from .rec import PREFIX as REC_PREFIX
        from .rec import RECConfig

        rec_knobs = ["rec", *(field.name for field in dataclasses.fields(RECConfig))]  # the rec loss's, written here
        return knobs_from_mapping(cls, off_grpo, PREFIX, "sync_period=10", dict.fromkeys(rec_knobs, REC_PREFIX))

    @classmethod
    def from_algorithm(cls, algorithm: Any) -> "OffGRPOConfig":
        """From verl's ``algorithm`` section (a DictConfig, a dict or verl's ``AlgoConfig``; None: defaults)."""
        return cls.from_mapping(config_value(algorithm, "off_grpo"))

