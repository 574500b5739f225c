"""Served-policy guard: stop a run whose rollout engine does not serve the trainer's weights.

Right after a real sync vLLM holds π_k's weights, so the batch sampled next has α = π_k up to the
engine's numerics and, per response token,

    |log r'| = |log π_k(y_t) − log α(y_t)|  ≈ 0         (up to the numerics: bf16 vLLM vs FSDP)

An engine that lost its weights (vLLM's level-2 sleep woken without a sync emits token 0 forever,
with α(token 0) ≈ 1) gives |log r'| ≈ −log π_k(token 0), about log(vocabulary) ≈ 11 for a
random-init model and more for a trained one (derived, clamped at 20 like verl's ratios). A lag
that served such garbage would still "train", so on every step whose batch has rollout lag 0 (:meth:`~verl_offgrpo.sync.schedule.SyncSchedule.rollout_lag_of`) the mean of
|log r'| over the batch's response tokens (``off_grpo/bound/mean_abs_log_rprime``, computed with the
advantage, before the update) must not exceed ``algorithm.off_grpo.max_log_rprime_after_sync``
(default 0.5; 0 turns the guard off), and neither may any one response's mean
(``off_grpo/bound/max_seq_abs_log_rprime``) exceed ``max_seq_log_rprime_after_sync`` (default 1.0; 0 = off): one
engine among E serving other weights moves the batch's mean by 1/E of its drift, its own responses by all of it.

Lagged batches (rollout lag ≥ 1) are sampled after a skipped slot, whose wake brings back α without
a transfer. Their |log r'| grows with the lag and the learning rate by design (each update moves π_k
further from α), so they get a looser limit, ``algorithm.off_grpo.max_log_rprime_lagged`` (default
1.5; 0 turns it off). It is meant to separate two scales: the drift of an honest lag, which small
policy steps keep small per token, and an engine sampling from weights other than α, whose tokens π_k
does not expect at all. No threshold on r' statistics fits every model and step size: loose enough for
honest drift, it can be too loose for a broken engine.
So the line of defence for lagged batches is the exact check of the served weights
(:mod:`.served_weights`, ``algorithm.off_grpo.verify_served_weights``, default on), and this module
is a monitor there: with the exact check on every vLLM worker, a lagged batch above the limit logs a
warning and ``off_grpo/guard/lagged_over_limit`` = 1 (0 on lagged batches within it); with it off, or
short of some workers (vLLM data parallelism inside a replica), the limit stays an error. In a window
(``rollout_schedule=window``) the lagged batches come from the same generation phase as its lag-0
batch, which the strict limit checked, with no wake or transfer since: there it is a warning too, where that batch's
B·n samples can reach every vLLM engine, the exact check saw the window's sync reach every worker, and the strict
limit is on (``max_log_rprime_after_sync`` > 0). The lag-0 limit and a NaN statistic (NaN log-probs from the engine) stop the run at any lag.
"""

from __future__ import annotations

import logging
import math
from typing import Optional

from verl_offgrpo.bound_monitor import SEQ_MAX

logger = logging.getLogger(__name__)

STATISTIC = "off_grpo/bound/mean_abs_log_rprime"
#: max over the batch's responses of each one's mean |log r'_t|
SEQ_STATISTIC = SEQ_MAX


class ServedPolicyError(RuntimeError):
    """The rollout engine does not serve the policy it should: its weights differ from α after a wake
    without a sync (:mod:`.served_weights`), or its log-probs disagree with the trainer's right after a
    sync, or (without the exact check) on a lagged batch by more than any lag gives."""


#: why a lagged batch over its limit was still sampled from α (the warning's reason), per_step with the exact check
EXACT_CHECK_PASSED = "The exact served-weights check passed on this batch's wake"
#: the same in a window: its lagged batches come from the generation phase whose lag-0 batch met the strict limit
SAME_PHASE_AS_LAG_0 = "This batch was generated in the phase whose lag-0 batch met max_log_rprime_after_sync"

#: metric: 1.0 on a lagged batch whose mean |log r'| is above ``max_log_rprime_lagged`` (only when that is a
#: warning, i.e. with the exact served-weights check on every worker), 0.0 on lagged batches within it
LAGGED_OVER_LIMIT = "off_grpo/guard/lagged_over_limit"


def check_served_policy(
    metrics: dict,
    rollout_lag: Optional[int],
    limit: float,
    step: Optional[int] = None,
    lagged_limit: float = 0.0,
    lagged_is_error: bool = True,
    served_alpha_because: str = EXACT_CHECK_PASSED,
    seq_limit: float = 0.0,
) -> dict:
    """Raise :class:`ServedPolicyError` if mean |log r'| > ``limit`` on a batch of rollout lag 0 (or one response's
    mean > ``seq_limit``, :data:`SEQ_STATISTIC`: an engine among E on other weights moves the batch's mean by 1/E), or
    > ``lagged_limit`` on a batch of lag ≥ 1 when ``lagged_is_error`` (else warn, saying ``served_alpha_because``),
    or if it is NaN (the
    engine returned NaN log-probs) at any lag. Returns the monitor's metrics for the step
    (:data:`LAGGED_OVER_LIMIT` on a checked lagged batch when it only warns; else empty).

    ``metrics``: the step's bound-monitor metrics (no statistic, no check: r' absent, α = π_k);
    a limit ≤ 0 disables its check; lag None (before the first sync) is never checked.
    """
    value = metrics.get(STATISTIC)
    if value is None or rollout_lag is None:
        return {}
    lagged = rollout_lag >= 1
    threshold = lagged_limit if lagged else limit
    over = threshold > 0 and not value <= threshold  # a NaN (NaN log-probs from the engine) fails `<=`
    if not lagged and not over:
        _check_one_response(metrics.get(SEQ_STATISTIC), seq_limit, value, step)
    if threshold <= 0:
        return {}
    if lagged and not lagged_is_error and not math.isnan(value):
        if over:
            logger.warning(
                "verl-offgrpo: step %s: lagged batch (rollout lag %s) with mean |log π_k/α| per token %.3g > "
                "algorithm.off_grpo.max_log_rprime_lagged=%s (meant to sit above a lag's drift). %s, so vLLM "
                "served α: the policy moved this far in %s steps (consider a lower learning rate or sync_period).",
                step, rollout_lag, value, lagged_limit, served_alpha_because, rollout_lag,
            )  # fmt: skip
        return {LAGGED_OVER_LIMIT: float(over)}
    if not over:
        return {}
    if lagged:
        raise ServedPolicyError(
            f"verl-offgrpo: step {step}: the batch was sampled by the lagged policy α (rollout lag "
            f"{rollout_lag}) and mean |log π_k/α| per token is {value:.3g} (> "
            f"algorithm.off_grpo.max_log_rprime_lagged={lagged_limit}, meant to sit above a lag's drift). "
            "vLLM is not serving α: check the weight sync and its sleep/wake on skipped syncs "
            "(algorithm.off_grpo.keep_weights), "
            "or raise the limit if the policy really moves that far in a few steps."
        )
    raise ServedPolicyError(
        f"verl-offgrpo: step {step}: the batch was sampled right after a weight sync, yet mean |log π_k/α| per "
        f"token is {value:.3g} (> algorithm.off_grpo.max_log_rprime_after_sync={limit}; a correct engine "
        "differs from the trainer by its numerics only). vLLM is not serving the trainer's weights: check the rollout engine's sleep/wake and "
        "weight-sync path (algorithm.off_grpo.keep_weights, sync_period), or raise the limit if your "
        "engine's numerics differ that much (e.g. quantized rollout)."
    )


def _check_one_response(seq_value: Optional[float], seq_limit: float, batch_mean: float, step: Optional[int]) -> None:
    """At rollout lag 0: raise where one response's mean |log r'| per token exceeds ``seq_limit`` (> 0)."""
    if seq_value is None or seq_limit <= 0 or seq_value <= seq_limit:
        return  # a NaN (NaN log-probs from the engine) fails `<=` and stops the run here too
    raise ServedPolicyError(
        f"verl-offgrpo: step {step}: the batch was sampled right after a weight sync, yet one response's mean "
        f"|log π_k/α| per token is {seq_value:.3g} (> algorithm.off_grpo.max_seq_log_rprime_after_sync={seq_limit}; "
        f"the batch's is {batch_mean:.3g}). Some rollout engine is not serving the trainer's weights (one among "
        "several moves the batch's mean by its share only): check the weight sync of every replica, or raise the "
        "limit if your engine's numerics differ that much on one response (e.g. quantized rollout)."
    )
