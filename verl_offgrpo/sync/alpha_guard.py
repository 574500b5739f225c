"""Served-policy guard: stop a run whose rollout engine does not serve the trainer's weights.

Right after a real sync vLLM holds π_k's weights, so the batch sampled next has α = π_k up to the
engine's numerics and, per response token,

    |log r'| = |log π_k(y_t) − log α(y_t)|  ≈ 0         (measured 0.001–0.06 with bf16 vLLM vs FSDP)

An engine that lost its weights (vLLM's level-2 sleep woken without a sync emits token 0 forever,
with α(token 0) ≈ 1) gives |log r'| ≈ −log π_k(token 0), about log(vocabulary) ≈ 11 for a
random-init model and more for a trained one (derived, clamped at 20 like verl's ratios). A lag
that served such garbage would still "train", so on every step whose batch has rollout lag 0 (:meth:`~verl_offgrpo.sync.schedule.SyncSchedule.rollout_lag_of`) the mean of
|log r'| over the batch's response tokens (``off_grpo/bound/mean_abs_log_rprime``, computed with the
advantage, before the update) must not exceed ``algorithm.off_grpo.max_log_rprime_after_sync``
(default 1.0; 0 turns the guard off).

Lagged batches (rollout lag ≥ 1) are where a broken sleep/wake shows: they are sampled after a
skipped slot, whose wake brings back α without a transfer. Their |log r'| grows with the lag and the
learning rate by design (0.1–0.5 measured at lag 1–9), so they get a looser limit,
``algorithm.off_grpo.max_log_rprime_lagged`` (default 5.0, far above that and far below the ~11 of
lost weights; 0 turns it off).
"""

from __future__ import annotations

from typing import Optional

STATISTIC = "off_grpo/bound/mean_abs_log_rprime"


class ServedPolicyError(RuntimeError):
    """The rollout engine's log-probs disagree with the trainer's: right after a weight sync, or, on a
    lagged batch, by more than any lag gives."""


def check_served_policy(
    metrics: dict,
    rollout_lag: Optional[int],
    limit: float,
    step: Optional[int] = None,
    lagged_limit: float = 0.0,
) -> None:
    """Raise :class:`ServedPolicyError` if mean |log r'| > ``limit`` on a batch of rollout lag 0, or
    > ``lagged_limit`` on a batch of lag ≥ 1, or if it is NaN (the engine returned NaN log-probs).

    ``metrics``: the step's bound-monitor metrics (no statistic, no check: r' absent, α = π_k);
    a limit ≤ 0 disables its check; lag None (before the first sync) is never checked.
    """
    value = metrics.get(STATISTIC)
    if value is None or rollout_lag is None:
        return
    threshold = lagged_limit if rollout_lag >= 1 else limit
    if threshold <= 0 or value <= threshold:  # a NaN (NaN log-probs from the engine) fails `<=` and stops the run
        return
    if rollout_lag >= 1:
        raise ServedPolicyError(
            f"verl-offgrpo: step {step}: the batch was sampled by the lagged policy α (rollout lag "
            f"{rollout_lag}) and mean |log π_k/α| per token is {value:.3g} (> "
            f"algorithm.off_grpo.max_log_rprime_lagged={lagged_limit}; lags of 1-9 steps measured 0.1-0.5). "
            "vLLM is not serving α: check its sleep/wake on skipped syncs (algorithm.off_grpo.keep_weights), "
            "or raise the limit if the policy really moves that far in a few steps."
        )
    raise ServedPolicyError(
        f"verl-offgrpo: step {step}: the batch was sampled right after a weight sync, yet mean |log π_k/α| per "
        f"token is {value:.3g} (> algorithm.off_grpo.max_log_rprime_after_sync={limit}; correct engines measured "
        "0.001-0.06). vLLM is not serving the trainer's weights: check the rollout engine's sleep/wake and "
        "weight-sync path (algorithm.off_grpo.keep_weights, sync_period), or raise the limit if your "
        "engine's numerics differ that much (e.g. quantized rollout)."
    )
