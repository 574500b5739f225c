"""The rec loss stays finite where a term it multiplies by zero is not: a τ so small that float32 A/τ divides
by 0.0 (RED-Weight), and a token masked by the clip whose log π_θ is −inf. Through verl's registered policy
loss (``get_policy_loss_fn("rec")``), hand-derived numbers."""

import math

import pytest
import torch

import verl  # noqa: F401  (loads the plugin)
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig

from verl_offgrpo.policy_loss_config import OffGRPOPolicyLossConfig


def actor_config(**rec):
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4,
                       clip_ratio=0.2, policy_loss=OffGRPOPolicyLossConfig(loss_mode="rec", rec=rec))


def rec_loss(config, log_prob, old_log_prob, advantages):
    log_prob = log_prob.clone().requires_grad_(True)
    mask = torch.ones_like(log_prob, dtype=torch.bool)
    loss, _ = get_policy_loss_fn("rec")(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages,
                                        response_mask=mask, loss_agg_mode="token-mean", config=config)
    (grad,) = torch.autograd.grad(loss, log_prob)
    return loss, grad


def test_red_weight_with_a_tau_that_is_zero_in_float32_stays_finite():
    """τ = 1e-50 > 0 is accepted; A = [1, 0], log π = log ½, no clip: Ã = [e^20 (A/τ clamped at 20), 0·e^0 = 0],
    so loss = −e^20·log ½ / 2 and gradient [−e^20/2, 0] (float32 A/τ gave 0/0 = NaN on the A = 0 token)."""
    lp = torch.full((1, 2), math.log(0.5))
    loss, grad = rec_loss(actor_config(clip_mode="none", weight="red_weight", tau=1e-50, anchor="pi_k"), lp,
                          lp.clone(), torch.tensor([[1.0, 0.0]]))
    e20 = math.exp(20.0)
    assert loss.item() == pytest.approx(-e20 * math.log(0.5) / 2, rel=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[-e20 / 2, 0.0]]))


def test_a_masked_token_at_log_prob_minus_inf_leaves_the_loss():
    """One-side, anchor π_k, A = [+1, −1], π_k = ½; token 2 has π_θ = 0: ρ = 0 < 1 − ε with A < 0, so M = 0 and
    it leaves the loss: loss = −(1·log ½)/2 = ½·log 2, gradient [−½, 0] (−(Ã·M)·log π was 0·(−inf) = NaN)."""
    old = torch.full((1, 2), math.log(0.5))
    lp = torch.tensor([[math.log(0.5), -math.inf]])
    loss, grad = rec_loss(actor_config(anchor="pi_k"), lp, old, torch.tensor([[1.0, -1.0]]))
    assert loss.item() == pytest.approx(0.5 * math.log(2.0))
    torch.testing.assert_close(grad, torch.tensor([[-0.5, 0.0]]))
