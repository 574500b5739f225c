"""The ``off_grpo`` policy loss (paper §3, the clipped off-policy surrogate).

Per response token, with π_θ the policy being optimised, π_k the policy at the start of this step
(verl's recomputed ``old_log_prob``) and α the policy that generated the samples (the lagged weights
vLLM serves)::

    r  = π_θ / α            r' = π_k / α            (r' arrives as verl's ``rollout_is_weights``)
    f_ε = min( r·A,  clip(r, max(r' − ε_low, 0), r' + ε_high) · A )
    loss = − agg_loss(f_ε, response_mask, loss_agg_mode)

ε_low/ε_high are ``actor.clip_ratio_low``/``clip_ratio_high`` (each falling back to
``actor.clip_ratio``). r' is never truncated and there is no dual clip. Without rollout log-probs
(``rollout_is_weights`` None) r' = 1, and f_ε is on-policy GRPO's clipped surrogate
min(ρA, clip(ρ, 1−ε, 1+ε)A) with ρ = π_θ/π_k (the paper's; verl's ``vanilla`` loss adds a dual clip, ρ ≤ 3, for
A < 0). Log-ratios are clamped to ±20 as verl does, so the loss
and its gradient stay finite for extreme ratios. verl's ``ppo_loss`` adds the entropy and the
β·KL(π_θ‖π_ref) terms on the same mask. A mini-batch with no token left (every group masked) gives, through
``ppo_loss`` (which sets ``global_batch_info``), a loss of exactly 0, not 0/0; verl's engine then takes no optimizer step (:mod:`verl_offgrpo.patches.empty_update`),
and ``actor/off_grpo/skipped_optimizer_step_frac`` is the fraction of the step's optimizer steps skipped so.

Metrics other than ``masked_seq_frac`` (a fraction of rows), ``tv_seq`` (a mean over rows) and
``skipped_optimizer_step_frac`` (a fraction of optimizer steps) are means over the micro-batch's loss tokens;
``tv_token``, ``tv_seq`` and ``mean_abs_log_rprime`` are the bound monitor's r' estimates over the loss's
tokens (:func:`~verl_offgrpo.bound_monitor.rprime_terms`), which stand in for it on a batch whose π_k pass was
skipped. A micro-batch without a loss token logs each metric's neutral value (clip fractions, ``ppo_kl`` and
the three r' terms 0; r' mean and max 1; ``masked_seq_frac`` 1): verl averages micro-batches with equal weight,
so masked micro-batches pull a step's value towards those; ``rprime_terms_frac`` (the fraction of micro-batches
with a loss token) undoes that for the r' terms (term / frac). Every key is logged on every micro-batch (verl's
data-parallel aggregation needs equal counts on all ranks). ``off_grpo/bound/*`` reads every response token.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from verl_offgrpo.bound_monitor import LOG_RATIO_BOUND, loss_rprime_terms
from verl_offgrpo.patches.empty_update import skips_empty_updates

#: verl 0.9.1's per-mini-batch token counts that the losses read (``losses.ppo_loss`` fills them) and, without a loss
#: token, set (:func:`aggregate`; checked at start-up: :data:`verl_offgrpo.patches.INTERNALS_MODULES`)
VERL_INTERNALS = ("verl.workers.config.actor.ActorConfig.global_batch_info",)

#: the loss's r' terms (:func:`~verl_offgrpo.bound_monitor.rprime_terms`: tv_token, tv_seq, mean_abs_log_rprime)
RPRIME_PREFIX = "actor/off_grpo/"


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the mask's tokens; what padding holds (even NaN or inf) never enters."""
    mask = mask.bool()
    return torch.where(mask, values, torch.zeros_like(values)).sum() / mask.sum().clamp(min=1)


def aggregate(
    loss_mat: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str, config: Any
) -> tuple[torch.Tensor, bool]:
    """verl's ``agg_loss`` of ``loss_mat`` with the mini-batch's ``global_batch_info``, and whether the
    mini-batch has no loss token at all.

    Then every row left the loss (zero-variance or dropped groups): all numerators are 0, and a denominator
    of 1 makes this term, and verl's entropy and KL terms that read the same dict after it, exactly 0
    instead of 0/0 = NaN. The one write into verl's state outside :mod:`verl_offgrpo.patches`: verl 0.9.1's
    ``ActorConfig.global_batch_info`` (set per mini-batch by its actor; ``losses.ppo_loss`` reads
    ``batch_num_tokens`` for every term), only in a job that runs the plugin's loss.
    """
    # imported here: importing core_algos runs the plugin's registration, which imports this module
    from verl.trainer.ppo.core_algos import agg_loss

    global_batch_info = getattr(config, "global_batch_info", None) or {}
    no_loss_token = global_batch_info.get("batch_num_tokens") == 0  # over the whole mini-batch, all DP ranks
    if no_loss_token:
        global_batch_info["batch_num_tokens"] = 1
    loss = agg_loss(loss_mat=loss_mat, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **global_batch_info)
    return loss, no_loss_token


def row_metrics(mask: torch.Tensor, no_loss_token: bool) -> dict[str, float]:
    """The plugin's metrics about rows that left the loss, shared by its losses (names under ``actor/off_grpo/``)."""
    return {
        # rows with no token left in the loss (zero-variance groups under the mask, RED-Drop's dropped rows, and
        # the V1 trainer's is_padding filler rows, which the loss cannot tell apart; the advantage's metrics can)
        "actor/off_grpo/masked_seq_frac": (~mask.bool().any(dim=-1)).float().mean().item(),
        # 1 on each micro-batch of a mini-batch without a loss token when the engine skips its optimizer
        # step (verl_offgrpo.patches.empty_update); verl averages it over micro-batches, mini-batches and epochs,
        # so the step's value is the fraction of its optimizer steps that were skipped
        "actor/off_grpo/skipped_optimizer_step_frac": float(no_loss_token and skips_empty_updates()),
    }


def clip_bounds(clip_ratio: float, clip_ratio_low: Optional[float], clip_ratio_high: Optional[float]):
    """(ε_low, ε_high) from verl's actor config fields."""
    eps_low = clip_ratio if clip_ratio_low is None else clip_ratio_low
    eps_high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    return float(eps_low), float(eps_high)


def off_grpo_objective(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    log_rprime: Optional[torch.Tensor],
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token f_ε (bs, L) and the tensors the metrics are made of.

    f_ε = min( r·A,  clip(r, max(r' − ε_low, 0), r' + ε_high) · A )      (r = π_θ/α, r' = π_k/α)
    log r = clamp(log π_θ − log π_k + log r', ±20); r' = exp(log r') (1 where ``log_rprime`` is None).
    """
    log_ratio_to_k = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    if log_rprime is None:
        log_rprime = torch.zeros_like(old_log_prob)
    log_rprime = log_rprime.detach()
    log_r = torch.clamp(log_ratio_to_k + log_rprime, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    r = torch.exp(log_r)
    rprime = torch.exp(log_rprime)
    lower = torch.clamp(rprime - eps_low, min=0.0)
    upper = rprime + eps_high
    unclipped = r * advantages
    clipped = torch.clamp(r, min=lower, max=upper) * advantages
    objective = torch.minimum(unclipped, clipped)
    parts = {
        "log_ratio_to_k": log_ratio_to_k.detach(),
        "rprime": rprime,
        "log_rprime": log_rprime,
        # the clipped term is selected and differs: the token's gradient is cut
        "clipped_high": (r > upper) & (advantages > 0),
        "clipped_low": (r < lower) & (advantages < 0),
    }
    return objective, parts


def log_rprime_from_weights(rollout_is_weights: Optional[torch.Tensor], response_mask: torch.Tensor):
    """log r' from verl's ``rollout_is_weights`` (exp of a ±20-clamped log-ratio, 0 on padding)."""
    if rollout_is_weights is None:
        return None
    mask = response_mask.bool()
    safe = torch.where(mask, rollout_is_weights, torch.ones_like(rollout_is_weights))
    return torch.log(safe.clamp(min=torch.finfo(safe.dtype).tiny)).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)


def pi_k_from_forward(config: Any) -> bool:
    """Whether the trainer may hand the loss batches whose π_k pass it skipped (the actor's
    ``policy_loss.pi_k_from_forward``, set from ``algorithm.off_grpo.skip_old_log_prob``)."""
    return bool(getattr(getattr(config, "policy_loss", None), "pi_k_from_forward", False))


def pi_k_and_log_rprime(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    rollout_is_weights: Optional[torch.Tensor],
    response_mask: torch.Tensor,
    config: Any,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(log π_k, log r') of a micro-batch, r' = π_k/α.

    verl's recomputed π_k (``old_log_prob``) and r' from ``rollout_is_weights``; or, on a batch whose π_k
    pass the trainer skipped (``algorithm.off_grpo.skip_old_log_prob``: no ``rollout_is_weights``, and
    ``old_log_prob`` holds α's log-probs as in verl's bypass mode), at one optimizer step per batch::

        log π_k = log π_θ (detached)        log r' = clamp(log π_θ − log α, ±20)  (0 on padding)

    exact there: the update takes its one gradient at θ = θ_k.
    """
    if rollout_is_weights is None and pi_k_from_forward(config):
        pi_k = log_prob.detach()
        log_rprime = torch.where(response_mask.bool(), pi_k - old_log_prob, torch.zeros_like(pi_k))
        return pi_k, log_rprime.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return old_log_prob, log_rprime_from_weights(rollout_is_weights, response_mask)


def compute_policy_loss_off_grpo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
    **unused: Any,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl policy-loss contract (``losses.ppo_loss``): returns (loss, metrics under ``actor/``).

    loss = − agg_loss(f_ε, response_mask, loss_agg_mode)
    f_ε  = min( r·A,  clip(r, max(r' − ε_low, 0), r' + ε_high) · A )     (:func:`off_grpo_objective`)
    with r = π_θ/α and r' = π_k/α from ``rollout_is_weights`` (r' = 1 without them), or π_k from this
    forward on a batch whose π_k pass was skipped (:func:`pi_k_and_log_rprime`).
    """
    if config is None:
        raise ValueError("off_grpo policy loss needs the actor config (clip_ratio, global_batch_info).")
    eps_low, eps_high = clip_bounds(config.clip_ratio, config.clip_ratio_low, config.clip_ratio_high)
    old_log_prob, log_rprime = pi_k_and_log_rprime(log_prob, old_log_prob, rollout_is_weights, response_mask, config)
    objective, parts = off_grpo_objective(
        log_prob, old_log_prob, advantages, response_mask, log_rprime, eps_low, eps_high
    )
    objective_sum, no_loss_token = aggregate(objective, response_mask, loss_agg_mode, config)
    loss = -objective_sum

    mask = response_mask.bool()
    has_loss_token = bool(mask.any())  # this micro-batch's; without one every metric below is its neutral value
    clipped_high = masked_mean(parts["clipped_high"].float(), mask)
    clipped_low = masked_mean(parts["clipped_low"].float(), mask)
    rprime_on_tokens = torch.where(mask, parts["rprime"], torch.zeros_like(parts["rprime"]))
    metrics = {
        # verl's names, so existing dashboards keep working
        "actor/pg_clipfrac": (clipped_high + clipped_low).item(),
        "actor/ppo_kl": masked_mean(-parts["log_ratio_to_k"], mask).item(),
        "actor/off_grpo/clipfrac_high": clipped_high.item(),
        "actor/off_grpo/clipfrac_low": clipped_low.item(),
        # r' = 1 is "no lag" (as without rollout log-probs), not 0
        "actor/off_grpo/rprime_mean": masked_mean(parts["rprime"], mask).item() if has_loss_token else 1.0,
        "actor/off_grpo/rprime_max": rprime_on_tokens.max().item() if has_loss_token else 1.0,
        **loss_rprime_terms(parts["log_rprime"], mask, RPRIME_PREFIX),
        **row_metrics(mask, no_loss_token),
    }
    return loss, metrics
