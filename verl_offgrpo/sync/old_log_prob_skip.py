"""Skipping verl's ``old_log_prob`` pass on lagged batches (``algorithm.off_grpo.skip_old_log_prob``).

At one optimizer step per batch the update's gradient is taken at θ = θ_k, so the update's own forward
gives π_k (detached) token for token, and the separate pass that verl runs before the advantage
computes the same log-probs again. On a batch of rollout lag ≥ 1 the V1 trainer mode runs verl's
**bypass mode** for that batch instead: verl's ``_compute_old_log_prob`` writes α's log-probs
(``rollout_log_probs``) as ``old_log_probs`` and its ``_compute_advantage`` computes no
``rollout_is_weights``; the plugin's losses then take π_k = π_θ.detach() and r' = π_θ.detach()/α
(:func:`verl_offgrpo.policy_loss.pi_k_and_log_rprime`). Batches of lag 0 keep the pass: the
served-policy guard reads their r' before the update (:mod:`.alpha_guard`); on a skipped batch the loss's
r' terms (``actor/off_grpo/{tv_token,tv_seq,mean_abs_log_rprime}``, means over micro-batches) stand in for the
bound monitor's after the update, and the guard reads them there (its lagged limit, and a NaN, stop the
run one update late). A batch is not skipped where its update would take more than one optimizer step
(:func:`one_optimizer_step`, after verl's padding), nor where lagged batches lack the exact
served-weights check (off, or short of some vLLM workers) and the lagged limit is their only one. ``off_grpo/old_log_prob_skipped`` is 1 on
skipped batches, 0 on the others. verl's ``actor/entropy``,
``rollout_corr/*`` and ``training/rollout_*`` come from the skipped pass and are absent on those steps.
The start-up checks: :mod:`verl_offgrpo.config.old_log_prob_checks`.

Written for verl 0.9.1, whose V1 ``PPOTrainer._compute_old_log_prob`` and ``_compute_advantage`` read
``config.algorithm.rollout_correction.bypass_mode`` on each call: :func:`bypass_mode_for_this_batch`
sets it for the two calls of one batch and restores it after each (:data:`VERL_INTERNALS`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional

from omegaconf import open_dict

from verl_offgrpo.bound_monitor import BOUND_RPRIME_TERMS, SEQ_MAX, terms_over_loss_micro_batches
from verl_offgrpo.policy_loss import RPRIME_PREFIX

_TRAINER = "verl.trainer.ppo.v1.trainer_base.PPOTrainer"
#: the verl 0.9.1 members that read ``algorithm.rollout_correction.bypass_mode`` per call
VERL_INTERNALS = (f"{_TRAINER}._compute_old_log_prob", f"{_TRAINER}._compute_advantage")
#: ... each reading that key by name (:func:`verl_offgrpo.patches.uses_problems`)
VERL_USES = tuple((member, ("bypass_mode",)) for member in VERL_INTERNALS)

#: metric: 1.0 on a step whose π_k came from the update's forward, 0.0 where verl's pass ran
SKIPPED = "off_grpo/old_log_prob_skipped"
#: the bound monitor's r' terms, which a skipped batch has no r' for before the update
RPRIME_TERMS = BOUND_RPRIME_TERMS


def skips_old_log_prob(enabled: bool, rollout_lag: Optional[int]) -> bool:
    """Whether a batch of ``rollout_lag`` skips the pass: only with the knob on and lag ≥ 1 (lag 0 is the
    guard's batch; None, before the first sync, is never skipped)."""
    return bool(enabled) and rollout_lag is not None and rollout_lag >= 1


def one_optimizer_step(num_rows: int, config: Any) -> bool:
    """Whether the update of a batch of ``num_rows`` samples (after verl's ``_balance_batch`` padding) is one
    mini-batch of ``actor.ppo_mini_batch_size`` × ``rollout.n`` samples at ``ppo_epochs`` = 1: the only
    case where π_θ = π_k when the gradient is taken. The start-up checks make it so in prompts; an agent loop
    with several outputs a session, or padding to a critic's mini-batch, can still add rows."""
    actor = config.actor_rollout_ref.actor
    return actor.get("ppo_epochs", 1) == 1 and num_rows <= actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n


def rprime_terms_after_update(metrics: dict) -> dict:
    """The bound monitor's r' terms of a skipped batch, read off the loss after its update (``actor/off_grpo/*`` as
    means over the micro-batches with a loss token, :func:`~verl_offgrpo.bound_monitor.terms_over_loss_micro_batches`,
    under :data:`RPRIME_TERMS`' names): the same estimates of r' = π_k/α, since the loss takes them at θ = θ_k,
    over the loss's tokens (rows the zero-variance mask or RED-Drop took out are not among them); the
    served-policy guard's statistic is among them. {} where no micro-batch had a loss token: no optimizer step
    was taken on it, and its engine is one the guard checked already (the window's lag-0 batch) or the exact
    served-weights check covers (per_step)."""
    return terms_over_loss_micro_batches(metrics, RPRIME_PREFIX)


@contextmanager
def bypass_mode_for_this_batch(config: Any) -> Iterator[None]:
    """``config.algorithm.rollout_correction.bypass_mode = True`` inside the block, its value before after it."""
    section = config.algorithm.rollout_correction
    before = section.get("bypass_mode", False)
    with open_dict(section):
        section.bypass_mode = True
    try:
        yield
    finally:
        with open_dict(section):
            section.bypass_mode = before


def skipped_batch_metrics(step_metrics: dict, skipped: bool) -> dict:
    """The step's metrics without the r' terms a skipped batch cannot have (not 0: no lag was measured; the largest
    response's :data:`~verl_offgrpo.bound_monitor.SEQ_MAX` neither, which the loss does not give after the update),
    plus :data:`SKIPPED`."""
    kept = {k: v for k, v in step_metrics.items() if not (skipped and (k in RPRIME_TERMS or k == SEQ_MAX))}
    kept[SKIPPED] = float(skipped)
    return kept
