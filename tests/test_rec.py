"""The ``rec`` policy loss through verl's registry (``core_algos.get_policy_loss_fn("rec")``) with a real
``ActorConfig``; every expected gradient below is written out by hand.

Reference batch (ε = 0.2 on both sides, ε′ = (0.6, 2.0), default anchor alpha without rollout weights, so
α = π_k: ρ = π_θ/π_k, band [0.8, 1.2],
ring regions ρ ≤ 0.4 for A > 0 and ρ ≥ 3.0 for A < 0), π_k = 0.25 on every token::

    token   A    ρ     one-side  two-side  ring
    0      +1   0.3      1         0        1      (far below: the ring keeps it)
    1      +1   0.6      1         0        0      (in the ring's gap)
    2      +1   1.0      1         1        1
    3      +1   1.5      0         0        0      (above the band, A > 0)
    4      −1   0.5      0         0        0      (below the band, A < 0)
    5      −1   2.0      1         0        0      (in the ring's gap)
    6      −1   3.5      1         0        1      (far above: the ring keeps it)
    7      −1   1.1      1         1        1

token-mean over 8 tokens: ∂loss/∂log π_θ = −Ã·M/8, with Ã = A (NoIS) or A·ρ (IS).
"""

import math

import pytest
import torch

import verl  # noqa: F401  (loads the plugin)
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig, PolicyLossConfig

from verl_offgrpo.config import OffGRPOConfigError, RECConfig
from verl_offgrpo.policy_loss_config import OffGRPOPolicyLossConfig

A = [1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0]
RHO = [0.3, 0.6, 1.0, 1.5, 0.5, 2.0, 3.5, 1.1]
PI_K = 0.25
MASKS = {
    "one-side": [1, 1, 1, 0, 0, 1, 1, 1],
    "two-side": [0, 0, 1, 0, 0, 0, 0, 1],
    "ring": [1, 0, 1, 0, 0, 0, 1, 1],
    "none": [1, 1, 1, 1, 1, 1, 1, 1],
}


def actor_config(policy_loss=None, **rec):
    if policy_loss is None:
        policy_loss = OffGRPOPolicyLossConfig(loss_mode="rec", rec=rec)
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4,
                       clip_ratio=0.2, policy_loss=policy_loss)  # fmt: skip


def call(config, rho, advantages, rprime=None, pi_k=PI_K):
    """verl's registered rec loss on one row: log π_θ = log(ρ·π_k) with a gradient, old = log π_k."""
    old = torch.full((1, len(rho)), math.log(pi_k))
    log_prob = (old + torch.log(torch.tensor([rho]))).requires_grad_(True)
    mask = torch.ones(1, len(rho), dtype=torch.bool)
    weights = None if rprime is None else torch.tensor([rprime])
    loss, metrics = get_policy_loss_fn("rec")(
        old_log_prob=old, log_prob=log_prob, advantages=torch.tensor([advantages]), response_mask=mask,
        loss_agg_mode="token-mean", config=config, rollout_is_weights=weights,
    )  # fmt: skip
    (grad,) = torch.autograd.grad(loss, log_prob)
    return loss, grad[0], log_prob.detach()[0], metrics


@pytest.mark.parametrize("clip_mode", list(MASKS))
@pytest.mark.parametrize("weight", ["none", "is"])
def test_gradient_is_minus_weighted_advantage_times_mask(clip_mode, weight):
    """Zero exactly where the clip mode masks, −Ã·∇log π elsewhere; ρ is detached (the IS gradient would
    add −A·ρ·log π·M/8 per token, not zero here since log π ≠ 0)."""
    loss, grad, log_pi, metrics = call(actor_config(clip_mode=clip_mode, weight=weight), RHO, A)
    m = MASKS[clip_mode]
    w = RHO if weight == "is" else [1.0] * 8
    expected = torch.tensor([-A[t] * w[t] * m[t] / 8 for t in range(8)])
    torch.testing.assert_close(grad, expected)
    assert loss.item() == pytest.approx(sum(-A[t] * w[t] * m[t] * log_pi[t].item() for t in range(8)) / 8, rel=1e-5)
    assert metrics["actor/rec/clipped_frac"] == pytest.approx(m.count(0) / 8)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(m.count(0) / 8)
    assert metrics["actor/rec/weight_mean"] == pytest.approx(sum(w) / 8)


def test_verls_own_policy_loss_config_runs_the_defaults():
    """Without the plugin's policy_loss dataclass (verl's ppo_trainer yaml), rec is one-side NoIS."""
    _, grad, _, _ = call(actor_config(PolicyLossConfig(loss_mode="rec")), RHO, A)
    torch.testing.assert_close(grad, torch.tensor([-A[t] * MASKS["one-side"][t] / 8 for t in range(8)]))


@pytest.mark.parametrize(
    "anchor, mask, rho_used",
    [
        # ρ_k = [1.15, 0.5, 1.0], r' = [2, 2, 1]: ρ_α = ρ_k·r' = [2.3, 1.0, 1.0]
        ("pi_k", [1, 0, 1], [1.15, 0.5, 1.0]),  # ρ_k in [0.8, 1.2]
        ("rprime", [0, 0, 1], [2.3, 1.0, 1.0]),  # ρ_α in [r' − 0.2, r' + 0.2] = [1.8, 2.2], [1.8, 2.2], [0.8, 1.2]
        ("alpha", [0, 1, 1], [2.3, 1.0, 1.0]),  # ρ_α in [0.8, 1.2]
    ],
)
def test_anchor_sets_what_rho_is_measured_against(anchor, mask, rho_used):
    """Two-side IS, A = +1: Ã·M = ρ·M with ρ the anchor's ratio."""
    config = actor_config(clip_mode="two-side", weight="is", anchor=anchor)
    _, grad, _, _ = call(config, [1.15, 0.5, 1.0], [1.0, 1.0, 1.0], rprime=[2.0, 2.0, 1.0])
    torch.testing.assert_close(grad, torch.tensor([-rho_used[t] * mask[t] / 3 for t in range(3)]))


def test_default_masks_stale_tokens_at_the_start_of_the_update():
    """At one optimizer step a batch π_θ = π_k (ρ_k = 1). The default (anchor alpha, one-side NoIS, as the
    paper's reference code) still masks by staleness: r' = π_k/α = [1.5, 0.5, 1.0, 1.0] with
    A = [+1, −1, +1, −1] gives ρ_α = r' → M = [0 (A>0, 1.5 > 1.2), 0 (A<0, 0.5 < 0.8), 1, 1];
    anchor pi_k keeps every token (ρ_k = 1): plain REINFORCE, whatever the clip mode."""
    assert RECConfig().anchor == "alpha"
    adv, rprime = [1.0, -1.0, 1.0, -1.0], [1.5, 0.5, 1.0, 1.0]
    _, grad, _, metrics = call(actor_config(), [1.0] * 4, adv, rprime=rprime)
    torch.testing.assert_close(grad, torch.tensor([0.0, 0.0, -0.25, 0.25]))
    assert metrics["actor/pg_clipfrac"] == pytest.approx(0.5)
    for clip_mode in ("one-side", "two-side", "ring"):
        _, grad, _, metrics = call(actor_config(clip_mode=clip_mode, anchor="pi_k"), [1.0] * 4, adv, rprime=rprime)
        torch.testing.assert_close(grad, torch.tensor([-0.25, 0.25, -0.25, 0.25]))
        assert metrics["actor/pg_clipfrac"] == 0.0


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_red_weight_by_hand(tau):
    """RED-Weight: Ã = A·exp(A/τ), no IS (ρ plays no part: ρ = 1.5 here, clip_mode none)."""
    adv = [2.0, -1.0, 0.5]
    _, grad, _, metrics = call(actor_config(clip_mode="none", weight="red_weight", tau=tau), [1.5] * 3, adv)
    weights = [math.exp(2.0 / tau), math.exp(-1.0 / tau), math.exp(0.5 / tau)]
    torch.testing.assert_close(grad, torch.tensor([-adv[t] * weights[t] / 3 for t in range(3)]))
    assert metrics["actor/rec/weight_mean"] == pytest.approx(sum(weights) / 3, rel=1e-5)


def test_a_mini_batch_without_a_loss_token_gives_zero_not_nan():
    """All rows left the loss (zero-variance or dropped): verl's engine counts 0 tokens; the loss is 0."""
    config = actor_config()
    config.global_batch_info.update({"dp_size": 1, "batch_num_tokens": 0, "global_batch_size": 1})
    log_prob = torch.zeros(1, 3, requires_grad=True)
    loss, metrics = get_policy_loss_fn("rec")(
        old_log_prob=torch.zeros(1, 3), log_prob=log_prob, advantages=torch.zeros(1, 3),
        response_mask=torch.zeros(1, 3, dtype=torch.bool), loss_agg_mode="token-mean", config=config,
    )  # fmt: skip
    assert loss.item() == 0.0 and metrics["actor/off_grpo/masked_seq_frac"] == 1.0
    assert metrics["actor/rec/clipped_frac"] == 0.0 and metrics["actor/rec/weight_mean"] == 1.0


def test_ring_inside_the_band_is_refused_by_the_loss_too():
    with pytest.raises(OffGRPOConfigError, match="eps_low_prime=0.1 must exceed ε_low=0.2"):
        call(actor_config(clip_mode="ring", eps_low_prime=0.1), RHO, A)


@pytest.mark.parametrize(
    "knobs, message",
    [
        ({"clip_mode": "sideways"}, r"rec.clip_mode must be one of \('one-side', 'two-side', 'ring', 'none'\)"),
        ({"weight": "importance_sampling"}, "rec.weight must be one of"),
        ({"anchor": "pi_old"}, "rec.anchor must be one of"),
        ({"tau": 0}, r"rec.tau \(τ of RED-Weight\) must be > 0"),
        ({"tau": -1.0}, "rec.tau"),
        ({"eps_low_prime": 1.5}, r"eps_low_prime .* must be in \(0, 1\]"),
        ({"eps_high_prime": 0}, "eps_high_prime .* must be > 0"),
        ({"temp": 1.0}, r"Unknown key\(s\) under actor_rollout_ref.actor.policy_loss.rec: \['temp'\]"),
    ],
)
def test_rec_knobs_rejected_in_one_line(knobs, message):
    """The knobs alone (the composed-config cases are in test_config's REJECTED list)."""
    with pytest.raises(OffGRPOConfigError, match=message) as err:
        RECConfig.from_mapping(knobs)
    assert "\n" not in str(err.value)
    with pytest.raises(OffGRPOConfigError, match=message):  # verl's dataclass checks the same, in every worker
        OffGRPOPolicyLossConfig(loss_mode="rec", rec=knobs)


def test_one_side_is_has_grpos_gradient():
    """REC-OneSide-IS is GRPO with the clip read as a mask: on a random batch its gradient equals verl's
    vanilla clipped surrogate's (dual clip off), though the loss values differ (−Aρ·log π vs −min(ρA, clip·A))."""
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=g) * 3
    log_prob = (old + 0.4 * torch.randn(4, 6, generator=g)).requires_grad_(True)
    adv = torch.randn(4, 1, generator=g).expand(4, 6).contiguous()
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1, 4:] = False
    grads = []
    for config in (actor_config(weight="is"), ActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=4,
                   ppo_micro_batch_size_per_gpu=4, clip_ratio=0.2, clip_ratio_c=1e9,
                   policy_loss=PolicyLossConfig(loss_mode="vanilla"))):  # fmt: skip
        loss, _ = get_policy_loss_fn(config.policy_loss.loss_mode)(
            old_log_prob=old, log_prob=log_prob, advantages=adv * mask, response_mask=mask,
            loss_agg_mode="token-mean", config=config,
        )  # fmt: skip
        grads.append(torch.autograd.grad(loss, log_prob)[0])
    assert (grads[1] == 0).any() and (grads[1] != 0).any()  # some tokens clipped, some not
    torch.testing.assert_close(grads[0], grads[1])


# ρ, bounds and centres exactly representable in binary: every comparison below is exact
BOUND_RHO = [0.5, 0.625, 0.75, 1.0, 1.5, 1.75, 2.0]
BOUND_MASKS = {  # by hand, ε = (0.25, 0.5), ε′ = (0.5, 1.0), centre 1: band [0.75, 1.5], ring's outer bounds 0.5 and 2.0
    "one-side": {1.0: [1, 1, 1, 1, 1, 0, 0], -1.0: [0, 0, 1, 1, 1, 1, 1], 0.0: [1] * 7},
    "two-side": {a: [0, 0, 1, 1, 1, 0, 0] for a in (1.0, -1.0, 0.0)},
    "ring": {1.0: [1, 0, 1, 1, 1, 0, 0], -1.0: [0, 0, 1, 1, 1, 0, 1], 0.0: [1, 0, 1, 1, 1, 0, 1]},
    "none": {a: [1] * 7 for a in (1.0, -1.0, 0.0)},
}


@pytest.mark.parametrize("clip_mode", sorted(BOUND_MASKS))
def test_clip_mask_bounds_are_inclusive_by_hand(clip_mode):
    """The mask at and just past every bound, for A > 0, A < 0 and A = 0 (both sides apply at A = 0)."""
    from verl_offgrpo.rec_loss import clip_mask

    knobs = RECConfig(clip_mode=clip_mode, eps_low_prime=0.5, eps_high_prime=1.0)
    rho = torch.tensor([BOUND_RHO] * 3)
    advantages = torch.tensor([[1.0] * 7, [-1.0] * 7, [0.0] * 7])
    mask = clip_mask(rho, advantages, 1.0, 0.25, 0.5, knobs)
    assert mask.int().tolist() == [BOUND_MASKS[clip_mode][a] for a in (1.0, -1.0, 0.0)]


def test_clip_mask_centre_per_token():
    """anchor=rprime centres each token's band at its own r' (additive ε): ρ = 1.75 is outside [.., 1 + 0.5]
    but inside [.., 2 + 0.5]."""
    from verl_offgrpo.rec_loss import clip_mask

    rho, centre = torch.tensor([[1.5, 1.5, 1.75, 1.75]]), torch.tensor([[1.0, 2.0, 1.0, 2.0]])
    one_side = clip_mask(rho, torch.ones_like(rho), centre, 0.25, 0.5, RECConfig(clip_mode="one-side"))
    assert one_side.int().tolist() == [[1, 1, 0, 1]]
    two_side = clip_mask(rho, -torch.ones_like(rho), centre, 0.25, 0.5, RECConfig(clip_mode="two-side"))
    assert two_side.int().tolist() == [[1, 0, 0, 1]]  # the band [c − 0.25, c + 0.5]: 1.5 < 2 − 0.25


# verl's loss_agg_mode, by hand: row 0 has 4 loss tokens with A = +1, row 1 has 2 (then padding) with A = −1;
# clip_mode none, weight none, so ∂loss/∂log π_θ = −A · (the mode's weight of the token)
AGG_GRADS = {  # (row 0's tokens, row 1's loss tokens); row 1's padding always 0
    "token-mean": (-1 / 6, 1 / 6),  # Σ over 6 tokens / 6
    "token-sum": (-1.0, 1.0),  # Σ over 6 tokens
    "seq-mean-token-sum": (-1 / 2, 1 / 2),  # (Σ row 0 + Σ row 1) / 2 rows
    "seq-mean-token-mean": (-1 / 8, 1 / 4),  # (Σ row 0 / 4 + Σ row 1 / 2) / 2 rows
    "seq-mean-token-sum-norm": (-1 / 8, 1 / 8),  # seq-mean-token-sum / 4 (the response length)
}


@pytest.mark.parametrize("mode", sorted(AGG_GRADS))
def test_the_loss_aggregates_with_verls_loss_agg_mode(mode):
    """The rec loss hands verl's loss_agg_mode to verl's agg_loss: each mode's gradient written out by hand."""
    log_prob = torch.log(torch.tensor([[0.5, 0.25, 0.5, 0.125], [0.25, 0.5, 1.0, 1.0]])).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([[1.0] * 4, [-1.0] * 4]) * mask
    loss, _ = get_policy_loss_fn("rec")(
        old_log_prob=log_prob.detach(), log_prob=log_prob, advantages=adv, response_mask=mask,
        loss_agg_mode=mode, config=actor_config(clip_mode="none", anchor="pi_k"),
    )  # fmt: skip
    (grad,) = torch.autograd.grad(loss, log_prob)
    row0, row1 = AGG_GRADS[mode]
    torch.testing.assert_close(grad, torch.tensor([[row0] * 4, [row1, row1, 0.0, 0.0]]))


def test_rec_logs_ppo_kl_as_log_pi_k_minus_log_pi_theta():
    """``actor/ppo_kl`` = mean(log π_k − log π_θ), as verl's PPO loss logs it: ρ = π_θ/π_k = 0.5 gives ln 2."""
    _, _, _, metrics = call(actor_config(clip_mode="none"), [0.5], [1.0])
    value = metrics["actor/ppo_kl"]
    value = value.aggregate() if hasattr(value, "aggregate") else value
    assert float(value) == pytest.approx(math.log(2.0), rel=1e-5)


RING_REC = ("actor_rollout_ref.actor.policy_loss.loss_mode=rec", "actor_rollout_ref.actor.policy_loss.rec.clip_mode=ring")


def test_ring_with_infinite_clip_ratio_high_names_a_fix_that_can_work():
    """clip_mode=ring with an infinite ε_high (actor.clip_ratio_high=inf): no finite ε′_high exceeds it, so the fix the
    message gives must not be "set eps_high_prime above inf" (eps_high_prime must be finite)."""
    from _overrides import shipped_config

    from verl_offgrpo.config.validate import validate_off_grpo_config

    with pytest.raises(OffGRPOConfigError) as err:
        validate_off_grpo_config(shipped_config(*RING_REC, "actor_rollout_ref.actor.clip_ratio_high=inf"))
    said = str(err.value)
    assert "above inf" not in said
    assert "actor_rollout_ref.actor.clip_ratio_high" in said and "\n" not in said
