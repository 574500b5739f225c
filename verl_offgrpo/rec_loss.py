"""The ``rec`` policy loss: group-relative REINFORCE with a clip mask (REC), with the NoIS, IS and
RED-Weight token weights (Yao et al., arXiv 2509.24203).

Per response token, with A the advantage, ρ the ratio of π_θ to π_old (DETACHED: a weight, never a
path of the gradient) and M ∈ {0, 1} the clip mask::

    loss = − agg_loss( Ã · M · log π_θ,  response_mask, loss_agg_mode )
    ∇loss = − agg_loss( Ã · M · ∇log π_θ )

    Ã = A                weight = none        (NoIS)
    Ã = A · ρ            weight = is          (IS, ρ detached)
    Ã = A · exp(A / τ)   weight = red_weight  (RED-Weight; A/τ clamped to ±20)

The mask, around a centre c, with ε = (ε_low, ε_high) from verl's ``actor.clip_ratio_low/high`` (each
falling back to ``clip_ratio``) and ε′ = (ε′_low, ε′_high) from ``policy_loss.rec``::

    two-side   M = [c − ε_low ≤ ρ ≤ c + ε_high]
    one-side   M = [A ≥ 0 ∧ ρ ≤ c + ε_high] ∨ [A ≤ 0 ∧ ρ ≥ c − ε_low]
    ring       M = two-side ∨ [A ≥ 0 ∧ ρ ≤ c − ε′_low] ∨ [A ≤ 0 ∧ ρ ≥ c + ε′_high]
    none       M = 1

π_old (``policy_loss.rec.anchor``), with π_k verl's recomputed ``old_log_prob`` (or this forward's, on a
batch whose π_k pass was skipped: :func:`~verl_offgrpo.policy_loss.pi_k_and_log_rprime`) and r' = π_k/α from
``rollout_is_weights`` (α the lagged policy vLLM sampled from; r' = 1 without rollout log-probs)::

    alpha    ρ = π_θ / α      c = 1      (default)
    pi_k     ρ = π_θ / π_k    c = 1
    rprime   ρ = π_θ / α      c = r'     (the off_grpo loss's window centre, additive band)

``alpha`` is what the paper's reference implementation (Trinity-RFT, as of the paper's runs) feeds its REC loss:
the rollout engine's log-probs as π_old, one optimizer step per batch, so the mask acts on how stale a sample is.
With ``pi_k`` and one optimizer step per batch, π_θ = π_k when the gradient is taken: ρ = 1, the mask
never binds and every clip mode is plain group-relative REINFORCE. Log-ratios are clamped to ±20 as verl does. verl's ``ppo_loss`` adds the
entropy and β·KL terms on the same mask; a mini-batch without a loss token gives exactly 0, as the
off_grpo loss (:func:`verl_offgrpo.policy_loss.aggregate`).

Metrics (means over the micro-batch's loss tokens; neutral values without one): ``actor/rec/clipped_frac``
(tokens with M = 0; also verl's ``actor/pg_clipfrac``), ``actor/rec/weight_mean`` (Ã/A), verl's
``actor/ppo_kl``, and the plugin's ``actor/off_grpo/{masked_seq_frac,skipped_optimizer_step_frac}``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from verl_offgrpo.bound_monitor import loss_rprime_terms
from verl_offgrpo.config.rec import RECConfig
from verl_offgrpo.policy_loss import (
    LOG_RATIO_BOUND,
    RPRIME_PREFIX,
    aggregate,
    clip_bounds,
    masked_mean,
    pi_k_and_log_rprime,
    row_metrics,
)


def clip_mask(
    rho: torch.Tensor,
    advantages: torch.Tensor,
    centre: torch.Tensor | float,
    eps_low: float,
    eps_high: float,
    knobs: RECConfig,
) -> torch.Tensor:
    """Bool M (bs, L): the tokens whose REINFORCE term stays in the loss, around the centre c.

    one-side  M = [A ≥ 0 ∧ ρ ≤ c + ε_high] ∨ [A ≤ 0 ∧ ρ ≥ c − ε_low]
    two-side  M = [c − ε_low ≤ ρ ≤ c + ε_high]
    ring      M = two-side ∨ [A ≥ 0 ∧ ρ ≤ c − ε′_low] ∨ [A ≤ 0 ∧ ρ ≥ c + ε′_high]
    none      M = 1
    """
    if knobs.clip_mode == "none":
        return torch.ones_like(rho, dtype=torch.bool)
    pos, neg = advantages >= 0, advantages <= 0
    if knobs.clip_mode == "one-side":
        return (pos & (rho <= centre + eps_high)) | (neg & (rho >= centre - eps_low))
    band = (rho >= centre - eps_low) & (rho <= centre + eps_high)
    if knobs.clip_mode == "two-side":
        return band
    return band | (pos & (rho <= centre - knobs.eps_low_prime)) | (neg & (rho >= centre + knobs.eps_high_prime))


def token_weight(rho: torch.Tensor, advantages: torch.Tensor, knobs: RECConfig) -> torch.Tensor:
    """Ã / A per token: 1 (NoIS), ρ (IS) or exp(A/τ) (RED-Weight); never carries a gradient."""
    if knobs.weight == "is":
        return rho
    if knobs.weight == "red_weight":
        # A/τ in float64: a τ that is 0.0 in float32 would make 0/0 = NaN where A = 0
        scaled = advantages.to(torch.float64) / knobs.tau
        return torch.exp(torch.clamp(scaled, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)).to(advantages.dtype)
    return torch.ones_like(rho)


def ratio_and_centre(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    log_rprime: Optional[torch.Tensor],
    anchor: str,
) -> tuple[torch.Tensor, torch.Tensor | float]:
    """Detached ρ and the band's centre c for ``anchor``, r' = π_k/α (α = π_k where ``log_rprime`` is None).

    alpha: ρ = π_θ/α, c = 1;  pi_k: ρ = π_θ/π_k, c = 1;  rprime: ρ = π_θ/α, c = r'.
    """
    log_ratio_to_k = torch.clamp(log_prob.detach() - old_log_prob, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    if anchor == "pi_k" or log_rprime is None:  # without rollout log-probs α = π_k
        return torch.exp(log_ratio_to_k), 1.0
    rho = torch.exp(torch.clamp(log_ratio_to_k + log_rprime, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    return rho, (torch.exp(log_rprime) if anchor == "rprime" else 1.0)


def compute_policy_loss_rec(
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

    loss = − agg_loss(Ã · M · log π_θ, response_mask, loss_agg_mode)     (Ã · M detached)
    with Ã = A · :func:`token_weight`, M = :func:`clip_mask` on ρ and c from :func:`ratio_and_centre`.
    """
    if config is None:
        raise ValueError("rec policy loss needs the actor config (clip_ratio, policy_loss.rec, global_batch_info).")
    knobs = RECConfig.from_policy_loss(getattr(config, "policy_loss", None))
    eps_low, eps_high = clip_bounds(config.clip_ratio, config.clip_ratio_low, config.clip_ratio_high)
    knobs.check_ring(eps_low, eps_high)
    mask = response_mask.bool()
    old_log_prob, log_rprime = pi_k_and_log_rprime(log_prob, old_log_prob, rollout_is_weights, response_mask, config)
    rho, centre = ratio_and_centre(log_prob, old_log_prob, log_rprime, knobs.anchor)
    keep = clip_mask(rho, advantages, centre, eps_low, eps_high, knobs)
    weight = token_weight(rho, advantages, knobs)
    coef = (advantages * weight * keep).detach()
    # padding may hold anything (verl zero-fills it), and a token with Ã·M = 0 may have log π = −inf: neither
    # may reach the sum through 0 · NaN or 0 · inf
    loss_mat = torch.where(mask & (coef != 0), -coef * log_prob, torch.zeros_like(log_prob))
    loss, no_loss_token = aggregate(loss_mat, response_mask, loss_agg_mode, config)

    clipped = masked_mean((~keep).float(), mask)
    metrics = {
        "actor/rec/clipped_frac": clipped.item(),
        "actor/pg_clipfrac": clipped.item(),  # verl's name
        "actor/rec/weight_mean": masked_mean(weight, mask).item() if bool(mask.any()) else 1.0,
        "actor/ppo_kl": masked_mean(old_log_prob - log_prob.detach(), mask).item(),
        **(loss_rprime_terms(log_rprime, mask, RPRIME_PREFIX) if log_rprime is not None else {}),
        **row_metrics(mask, no_loss_token),
    }
    return loss, metrics
