"""``algorithm.off_grpo.skip_old_log_prob``: where π_k may come from the update's own forward pass.

At one optimizer step per batch (``actor.ppo_epochs`` = 1 and ``ppo_mini_batch_size`` =
``data.train_batch_size``) the update takes its gradient at θ = θ_k, so π_k = π_θ detached, token for
token: verl's separate ``old_log_prob`` pass computes the same log-probs once more. The V1 trainer
mode skips that pass on lagged batches (:mod:`verl_offgrpo.sync.old_log_prob_skip`): the batch then
carries α's log-probs as ``old_log_probs`` (verl's bypass mode) and no ``rollout_is_weights``, and the
plugin's losses take π_k = π_θ.detach() and log r' = log π_θ.detach() − log α
(:func:`verl_offgrpo.policy_loss.pi_k_and_log_rprime`). Everything that makes this exact, or keeps the
served-policy guard whole, is checked here. Pure Python: no verl, torch or Ray import.
"""

from __future__ import annotations

import logging
from typing import Any

from verl_offgrpo import TRAINER_MODE

from .off_grpo import POLICY_LOSS_CONFIG_FQN, PREFIX, OffGRPOConfig
from .readers import (
    flag_at,
    lag0_batch_reaches_every_engine,
    one_optimizer_step_per_batch,
    rollout_data_parallel_size,
    uses_v1,
    v1_mode,
)
from .values import OffGRPOConfigError
from .values import config_value as _get

KNOB = f"{PREFIX}.skip_old_log_prob=true"

logger = logging.getLogger(__name__)


def check_skip_old_log_prob(config: Any, knobs: OffGRPOConfig) -> None:
    """Raise :class:`OffGRPOConfigError` where ``skip_old_log_prob`` cannot hold (``knobs``: rollout_schedule
    resolved). Nothing to check when it is off; at sync_period = 1 (no lagged batch) it does nothing: one line.
    The lag's own checks come first: at v > 1 they already ask for one of the plugin's losses, α's log-probs
    (``rollout.calculate_log_probs``) and r' per token (``rollout_correction.rollout_is=token``)."""
    policy_loss = _get(config, "actor_rollout_ref.actor.policy_loss")
    if not knobs.skips_lagged_old_log_prob and bool(_get(policy_loss, "pi_k_from_forward", False)):
        raise OffGRPOConfigError(
            "actor_rollout_ref.actor.policy_loss.pi_k_from_forward is set by the plugin's trainer, not by hand: "
            f"set {PREFIX}.skip_old_log_prob=true instead (it acts at sync_period > 1 only)."
        )
    if not knobs.skip_old_log_prob:
        return
    if knobs.sync_period == 1:
        logger.info("off_grpo: %s does nothing at sync_period=1: no batch is lagged, so verl's old_log_prob pass "
                    "runs every step.", KNOB)
        return
    if not uses_v1(config) or v1_mode(config) != TRAINER_MODE:
        raise OffGRPOConfigError(
            f"{KNOB} runs in the V1 trainer mode {TRAINER_MODE} (trainer.use_v1=true, "
            f"trainer.v1.trainer_mode={TRAINER_MODE}, as the shipped yaml sets them); this job would compute "
            f"old_log_prob every step: drop {PREFIX}.skip_old_log_prob."
        )
    if _get(config, "actor_rollout_ref.actor.policy_loss._target_") != POLICY_LOSS_CONFIG_FQN:
        raise OffGRPOConfigError(
            f"{KNOB} tells the loss through actor_rollout_ref.actor.policy_loss, which must be the plugin's "
            f"(_target_={POLICY_LOSS_CONFIG_FQN}, as the shipped yaml sets it)."
        )
    if not one_optimizer_step_per_batch(config):
        passes = _get(config, "actor_rollout_ref.actor.ppo_epochs", 1)
        mini, batch = _get(config, "actor_rollout_ref.actor.ppo_mini_batch_size"), _get(config, "data.train_batch_size")
        raise OffGRPOConfigError(
            f"{KNOB} is exact only at one optimizer step per batch, where π_θ = π_k when the gradient is taken: "
            f"set actor_rollout_ref.actor.ppo_epochs=1 and actor_rollout_ref.actor.ppo_mini_batch_size={batch!r} "
            f"(= data.train_batch_size; got ppo_epochs={passes!r}, ppo_mini_batch_size={mini!r}), or drop the knob."
        )
    if flag_at(config, "algorithm.use_kl_in_reward", False):
        raise OffGRPOConfigError(
            f"{KNOB} leaves α's log-probs where verl's KL-in-reward reads π_k's (old_log_probs − ref_log_prob, before "
            "the update): use the KL loss instead (actor_rollout_ref.actor.use_kl_loss=true, "
            "algorithm.use_kl_in_reward=false)."
        )
    data_parallel = rollout_data_parallel_size(config)
    unchecked = (f"with {PREFIX}.verify_served_weights=false" if not knobs.verify_served_weights else
                 f"with actor_rollout_ref.rollout.data_parallel_size={data_parallel} (the exact check reaches the "
                 "leader's shard only)" if data_parallel > 1 else None)  # fmt: skip
    window = knobs.rollout_schedule == "window"
    if window and knobs.max_log_rprime_lagged > 0 and not lag0_batch_reaches_every_engine(config):
        raise OffGRPOConfigError(
            f"{KNOB} leaves lagged batches without the served-policy guard's statistic before the update, and in a "
            "window whose data.train_batch_size × rollout.n samples are fewer than the vLLM engines that check is the "
            "only one on them (the window's lag-0 batch cannot have reached every engine): raise the batch, or set "
            f"{PREFIX}.max_log_rprime_lagged=0."
        )
    if window and knobs.max_log_rprime_lagged > 0 and knobs.max_log_rprime_after_sync <= 0:
        raise OffGRPOConfigError(
            f"{KNOB} leaves lagged batches without the served-policy guard's statistic before the update, and in a "
            f"window with {PREFIX}.max_log_rprime_after_sync=0 (no lag-0 batch checked to vouch for them) that check "
            f"is the only one on them: set max_log_rprime_after_sync > 0 (default 0.5), or max_log_rprime_lagged=0."
        )
    if unchecked and knobs.max_log_rprime_lagged > 0:  # a window's too: its sync then unchecked on some engine
        raise OffGRPOConfigError(
            f"{KNOB} leaves lagged batches without the served-policy guard's statistic before the update, and "
            f"{unchecked} that check is the only one on them: set {PREFIX}.verify_served_weights=true with one "
            f"data-parallel shard a replica, or max_log_rprime_lagged=0."
        )
    if knobs.allow_truncated_rprime:
        raise OffGRPOConfigError(
            f"{KNOB} gives a skipped batch the untruncated r' = π_θ/α, whatever verl's rollout correction does "
            f"to the others: set {PREFIX}.allow_truncated_rprime=false (with an untruncated r' everywhere)."
        )
    sync_steps = _get(config, "trainer.v1.sync.parameter_sync_step", 1)
    if sync_steps not in (None, 1):
        raise OffGRPOConfigError(
            f"{KNOB} does not combine with trainer.v1.sync.parameter_sync_step={sync_steps!r} (verl's local updates "
            "on sub-batches, each padded to ppo_mini_batch_size): drop one of them."
        )
    for engine in ("megatron", "veomni"):
        mode = _get(config, f"actor_rollout_ref.actor.{engine}.router_replay.mode")
        if mode == "R2":
            raise OffGRPOConfigError(
                f"{KNOB} skips the old_log_prob pass that records the routes actor_rollout_ref.actor.{engine}."
                "router_replay.mode=R2 replays in the update: use mode R3 or drop the knob."
            )
