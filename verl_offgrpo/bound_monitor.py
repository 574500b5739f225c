"""Theorem 1's measurable terms, estimated from the batch every step (no extra forward pass).

Theorem 1 (paper §3):  J(π) − J(π_k) ≥ L_α(π) − 2·((1−σ_{α,r,ε})/σ_{α,r,ε})·TV(π, α) − 2·TV(π_k, α),
with σ_{α,r,ε} = sqrt(σ²_{α,r} + ε) the (regularised) reward std of a prompt under α. What a user can
watch to choose v:

* ``off_grpo/bound/tv_token``  = ½·E_{t∼α}|r'_t − 1|, r'_t = π_k/α per sampled token. For one state,
  ½·Σ_a|π_k(a) − α(a)| = ½·E_{a∼α}|π_k(a)/α(a) − 1|, so this is an unbiased one-sample estimate of the
  per-token TV(π_k, α), averaged over the response tokens of the batch.
* ``off_grpo/bound/tv_seq``    = ½·E_{y∼α}|Π_t r'_t − 1| over responses: the same estimator for the
  sequence-level TV (log Π clamped to ±20 like verl's ratios; high variance for long responses).
* ``off_grpo/bound/mean_abs_log_rprime`` = E_{t∼α}|log r'_t| over response tokens: the statistic of
  the served-policy guard (:mod:`verl_offgrpo.sync.alpha_guard`), the same as the loss's
  ``actor/off_grpo/mean_abs_log_rprime`` but known before the update.
* ``off_grpo/bound/coef_mean|max`` = mean / max over groups with std_g > 0 of (1 − σ_g)/σ_g, σ_g =
  sqrt(std_g² + ε) (the estimator's own std and ε; σ_g itself is never 0).
* ``off_grpo/bound/zero_var_group_frac`` = fraction of groups (N > 1) whose rewards are all equal
  (std_g = 0: masked by the zero-variance mask, excluded from the coefficient).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from verl_offgrpo.groups import group_moments, zero_variance_groups

LOG_RATIO_BOUND = 20.0  # verl's clamp on log-ratios
#: the r' terms (:func:`rprime_terms`), and their names in the bound monitor
RPRIME_TERM_NAMES = ("tv_token", "tv_seq", "mean_abs_log_rprime")
BOUND_RPRIME_TERMS = tuple(f"off_grpo/bound/{name}" for name in RPRIME_TERM_NAMES)
#: the losses' weight of their r' terms: the fraction of a step's micro-batches with a loss token
RPRIME_FRAC = "rprime_terms_frac"


def rprime_terms(log_rprime: torch.Tensor, response_mask: torch.Tensor, prefix: str) -> dict[str, float]:
    """``{prefix}tv_token`` = ½·mean_t|r'_t − 1|, ``{prefix}tv_seq`` = ½·mean_y|Π_t r'_t − 1| (log Π clamped to
    ±20) and ``{prefix}mean_abs_log_rprime`` = mean_t|log r'_t|, over the response tokens (rows) of ``response_mask``,
    from per-token log r' (bs, L); what padding holds never enters; {} without a token. float32 on an accelerator
    (the losses call it per micro-batch), float64 on the CPU; one host sync."""
    mask = response_mask.bool()
    rows = mask.any(-1)
    if not bool(rows.any()):
        return {}
    dtype = torch.float64 if log_rprime.device.type == "cpu" else torch.float32
    log_rprime = torch.where(mask, log_rprime.detach().to(dtype), torch.zeros((), dtype=dtype, device=mask.device))
    log_rprime = log_rprime.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    n_tok = mask.sum()
    tv_token = 0.5 * ((torch.exp(log_rprime) - 1).abs() * mask).sum() / n_tok
    log_seq = log_rprime.sum(-1).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    tv_seq = 0.5 * (torch.exp(log_seq) - 1).abs()[rows].mean()
    abs_log = (log_rprime.abs() * mask).sum() / n_tok
    values = torch.stack([tv_token, tv_seq, abs_log]).tolist()
    return dict(zip((f"{prefix}{name}" for name in RPRIME_TERM_NAMES), values, strict=True))


def loss_rprime_terms(log_rprime: torch.Tensor, response_mask: torch.Tensor, prefix: str) -> dict[str, float]:
    """:func:`rprime_terms` of one micro-batch of a loss, plus ``{prefix}rprime_terms_frac`` (1; 0 with every term 0
    where the micro-batch has no loss token). Every key on every micro-batch: verl's data-parallel aggregation
    (``Metric.aggregate_dp``) refuses ranks that logged a key a different number of times. verl averages each
    key over the step's micro-batches, so term / frac is the mean over micro-batches with a loss token
    (:func:`terms_over_loss_micro_batches`)."""
    terms = rprime_terms(log_rprime, response_mask, prefix)
    weight = 1.0 if terms else 0.0
    return {**(terms or dict.fromkeys((f"{prefix}{name}" for name in RPRIME_TERM_NAMES), 0.0)), f"{prefix}{RPRIME_FRAC}": weight}


def terms_over_loss_micro_batches(metrics: dict, prefix: str) -> dict[str, float]:
    """The loss's r' terms (``{prefix}<name>``) as means over the micro-batches with a loss token (verl's mean of
    each divided by the mean of ``{prefix}rprime_terms_frac``), under the bound monitor's names
    (:data:`BOUND_RPRIME_TERMS`); {} where none had one."""
    frac = float(metrics.get(f"{prefix}{RPRIME_FRAC}", 0.0))
    if not frac > 0:
        return {}
    return {bound: float(metrics[f"{prefix}{name}"]) / frac
            for bound, name in zip(BOUND_RPRIME_TERMS, RPRIME_TERM_NAMES, strict=True)}


def rprime_from_log_probs(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor) -> torch.Tensor:
    """r' = π_k/α = exp(log π_k − log α) per token, the log-ratio clamped to ±:data:`LOG_RATIO_BOUND` as verl clamps
    it: exact where verl's ``rollout_is_weights`` are not (``allow_truncated_rprime``: truncated, rejection-sampled
    or batch-normalised), so the bound monitor and the served-policy guard read the engine, not verl's correction."""
    log_ratio = old_log_probs.to(torch.float64) - rollout_log_probs.to(torch.float64)
    return torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))


#: verl's r' = π_k/α per token (exact under the plugin's start-up checks unless ``allow_truncated_rprime``)
IS_WEIGHTS = "rollout_is_weights"
#: log π_k and log α per token, from which r' is exact whatever verl's correction did to its weights
LOG_PROBS = ("old_log_probs", "rollout_log_probs")


def rprime_fields(fields, allow_truncated_rprime: bool) -> tuple[str, ...]:
    """The batch fields the bound monitor and the served-policy guard read r' from, among ``fields``: () where verl
    computed no r' (no :data:`IS_WEIGHTS`: a batch whose π_k pass was skipped); :data:`LOG_PROBS` where
    ``allow_truncated_rprime`` lets verl truncate, reject or normalise its weights and the batch has both; else
    :data:`IS_WEIGHTS`. Any estimator, both trainers."""
    fields = set(fields or ())
    if IS_WEIGHTS not in fields:
        return ()
    if allow_truncated_rprime and set(LOG_PROBS) <= fields:
        return LOG_PROBS
    return (IS_WEIGHTS,)


def rprime_of(read, fields: tuple[str, ...]) -> Optional[torch.Tensor]:
    """r' per token (bs, L) from the :func:`rprime_fields` ``fields``, ``read(name)`` giving each as a padded tensor;
    None without fields."""
    if not fields:
        return None
    if fields == LOG_PROBS:
        return rprime_from_log_probs(read(LOG_PROBS[0]), read(LOG_PROBS[1]))
    return read(IS_WEIGHTS)


#: max over the batch's responses of each one's mean |log r'_t|: the batch's mean moves by 1/E of the drift of one
#: engine of E serving other weights, this does not (the guard's ``max_seq_log_rprime_after_sync`` at lag 0)
SEQ_MAX = "off_grpo/bound/max_seq_abs_log_rprime"
#: the r' terms of a batch without r' (α = π_k) or without a response token
NO_RPRIME_TERMS = {**dict.fromkeys(BOUND_RPRIME_TERMS, 0.0), SEQ_MAX: 0.0}


def tv_estimates(rprime: torch.Tensor, response_mask: torch.Tensor) -> dict[str, float]:
    """Token- and sequence-level ½·E_α|ratio − 1| and E_α|log r'| from per-token r' (bs, L):
    :func:`rprime_terms` under ``off_grpo/bound/``, and :data:`SEQ_MAX` = max_y mean_{t∈y}|log r'_t|; 0 without a
    response token."""
    mask = response_mask.bool()
    safe = torch.where(mask, rprime.to(torch.float64), torch.ones_like(rprime, dtype=torch.float64))
    log_rprime = torch.log(safe.clamp(min=1e-300))
    terms = rprime_terms(log_rprime, mask, "off_grpo/bound/")
    if not terms:
        return dict(NO_RPRIME_TERMS)
    rows = mask.any(-1)
    per_seq = (log_rprime.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND).abs() * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return {**terms, SEQ_MAX: float(per_seq[rows].max())}


def group_std_terms(scores: torch.Tensor, index: np.ndarray, std_eps: float, std_unbiased: bool = True):
    """(1−σ_g)/σ_g statistics over groups with σ > 0, and the zero-variance group fraction."""
    scores = scores.detach().to(torch.float64).cpu()
    gid_t, count, _, var = group_moments(scores, index, unbiased=std_unbiased)
    multi = count > 1
    zero = zero_variance_groups(scores, gid_t, count.numel())
    sigma = torch.sqrt(var[multi & ~zero] + std_eps)
    coefs = (1 - sigma) / sigma
    n_multi = int(multi.sum())
    return {
        "off_grpo/bound/coef_mean": float(coefs.mean()) if coefs.numel() else 0.0,
        "off_grpo/bound/coef_max": float(coefs.max()) if coefs.numel() else 0.0,
        "off_grpo/bound/zero_var_group_frac": int(zero.sum()) / n_multi if n_multi else 0.0,
    }


def bound_metrics(
    scores: torch.Tensor,
    index: np.ndarray,
    response_mask: torch.Tensor,
    rprime: Optional[torch.Tensor],
    std_eps: float,
    std_unbiased: bool = True,
) -> dict[str, float]:
    """All bound-monitor metrics; TV terms are 0 when there is no r' (α = π_k, on-policy)."""
    metrics = group_std_terms(scores, index, std_eps, std_unbiased)
    if rprime is None:
        metrics.update(NO_RPRIME_TERMS)
    else:
        metrics.update(tv_estimates(rprime, response_mask))
    return metrics
