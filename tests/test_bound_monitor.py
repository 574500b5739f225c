"""Bound-monitor estimators on hand-computed examples."""

import math

import numpy as np
import pytest
import torch

from verl_offgrpo.bound_monitor import bound_metrics, group_std_terms, tv_estimates


def test_tv_token_and_seq_hand_values():
    # row 0: r' = [2, 0.5] (valid) ; row 1: r' = [1, <pad>]
    rprime = torch.tensor([[2.0, 0.5], [1.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    m = tv_estimates(rprime, mask)
    # token: ½·(|2−1| + |0.5−1| + |1−1|)/3 = ½·1.5/3 = 0.25
    assert m["off_grpo/bound/tv_token"] == pytest.approx(0.25)
    # seq: products 1.0 and 1.0 -> 0
    assert m["off_grpo/bound/tv_seq"] == pytest.approx(0.0)
    m = tv_estimates(torch.tensor([[2.0, 2.0]]), torch.tensor([[1, 1]]))
    assert m["off_grpo/bound/tv_seq"] == pytest.approx(0.5 * 3.0)
    # a row with no loss token (masked group) is no sequence: the mean is over row 0 alone
    m = tv_estimates(torch.tensor([[2.0, 2.0], [5.0, 5.0]]), torch.tensor([[1, 1], [0, 0]]))
    assert m["off_grpo/bound/tv_seq"] == pytest.approx(0.5 * 3.0)


def test_tv_is_zero_on_policy_and_finite_for_extremes():
    assert tv_estimates(torch.ones(3, 4), torch.ones(3, 4))["off_grpo/bound/tv_token"] == 0.0
    m = tv_estimates(torch.tensor([[1e30, 1e30, 1e30]]), torch.ones(1, 3))
    assert math.isfinite(m["off_grpo/bound/tv_seq"]) and m["off_grpo/bound/tv_seq"] == pytest.approx(
        0.5 * (math.exp(20) - 1))
    # each token's log r' too is clamped to ±20 (log 1e30 = 69.1): in |log r'|, its largest response's mean and tv_token
    from verl_offgrpo.bound_monitor import SEQ_MAX

    assert m["off_grpo/bound/mean_abs_log_rprime"] == pytest.approx(20.0)
    assert m[SEQ_MAX] == pytest.approx(20.0)
    assert m["off_grpo/bound/tv_token"] == pytest.approx(0.5 * (math.exp(20) - 1))


def test_what_padding_holds_never_enters_the_loss_terms():
    """rprime_terms (the losses call it on their own log r', padding unset): row 0 has one response token with
    log r' = ln 2, its padding 5 and NaN; row 1 is all padding. tv_token = ½|2 − 1| = ½, tv_seq = ½|2 − 1| = ½,
    mean |log r'| = ln 2."""
    from verl_offgrpo.bound_monitor import rprime_terms

    log_rprime = torch.tensor([[math.log(2.0), 5.0, float("nan")], [float("nan"), 3.0, -4.0]])
    mask = torch.tensor([[1, 0, 0], [0, 0, 0]])
    assert rprime_terms(log_rprime, mask, "p/") == pytest.approx(
        {"p/tv_token": 0.5, "p/tv_seq": 0.5, "p/mean_abs_log_rprime": math.log(2.0)})


def test_on_the_cpu_the_terms_are_taken_in_float64():
    """log r' = 1e-9 on every token, in float32 as the losses and verl's log-probs give it: tv_token = ½(e^1e-9 − 1)
    ≈ 5e-10, which float32 (e^1e-9 = 1) would round to 0 (a float64 input would pass without the cast)."""
    from verl_offgrpo.bound_monitor import rprime_terms

    terms = rprime_terms(torch.full((2, 3), 1e-9, dtype=torch.float32), torch.ones(2, 3), "p/")  # a loss's log r'
    assert terms["p/tv_token"] == pytest.approx(0.5e-9, rel=1e-6)
    assert terms["p/mean_abs_log_rprime"] == pytest.approx(1e-9, rel=1e-6)


def test_group_coefficients_hand_values():
    # group a {0, 1}: unbiased std = sqrt(0.5); σ = sqrt(0.5 + 0.5) = 1 -> coef 0
    # group b {0, 0, 2}: unbiased var = (4/9·2 + 16/9)/2 = 4/3; ε = 0.5 -> σ = sqrt(11/6)
    # group c {1, 1}: zero variance; group d {5}: singleton, ignored
    scores = torch.tensor([0.0, 1.0, 0.0, 0.0, 2.0, 1.0, 1.0, 5.0])
    index = np.array(list("aabbbccd"), dtype=object)
    m = group_std_terms(scores, index, std_eps=0.5)
    sigma_b = math.sqrt(4 / 3 + 0.5)
    coef_b = (1 - sigma_b) / sigma_b
    assert m["off_grpo/bound/coef_mean"] == pytest.approx((0.0 + coef_b) / 2)
    assert m["off_grpo/bound/coef_max"] == pytest.approx(0.0)
    assert m["off_grpo/bound/zero_var_group_frac"] == pytest.approx(1 / 3)


def test_binary_rewards_coefficient_at_least_one():
    # p = 1/4 correct in a group of 4: population std sqrt(3)/4 < 1/2 -> (1−σ)/σ > 1
    m = group_std_terms(torch.tensor([1.0, 0, 0, 0]), np.array(["g"] * 4, dtype=object), 1e-6, std_unbiased=False)
    sigma = math.sqrt(3 / 16 + 1e-6)
    assert m["off_grpo/bound/coef_max"] == pytest.approx((1 - sigma) / sigma)
    assert m["off_grpo/bound/coef_max"] > 1


def test_bound_metrics_without_rprime():
    m = bound_metrics(torch.tensor([0.0, 1.0]), np.array(["a", "a"], dtype=object), torch.ones(2, 3), None, 1e-6)
    assert m["off_grpo/bound/tv_token"] == 0.0 and m["off_grpo/bound/tv_seq"] == 0.0
    # α = π_k: the guard's statistics are 0 too, the largest response's included (logged, not absent)
    assert m["off_grpo/bound/mean_abs_log_rprime"] == 0.0 and m["off_grpo/bound/max_seq_abs_log_rprime"] == 0.0


def test_rprime_is_read_off_the_log_probs_only_where_verls_weights_may_be_truncated_and_never_without_them():
    """The rule both trainers and every estimator share: verl's weights, exact under the start-up checks; with
    ``allow_truncated_rprime`` π_k's and α's log-probs (verl's weights may be truncated or normalised). A batch without
    weights (its π_k pass skipped: verl's bypass mode puts α's log-probs in ``old_log_probs``, so the log-probs would
    read r' = 1 whatever vLLM served) has no r' before the update."""
    from verl_offgrpo.bound_monitor import IS_WEIGHTS, LOG_PROBS, rprime_fields, rprime_of

    both = {IS_WEIGHTS, *LOG_PROBS, "uid"}
    assert rprime_fields(both, allow_truncated_rprime=False) == (IS_WEIGHTS,)
    assert rprime_fields(both, allow_truncated_rprime=True) == LOG_PROBS
    assert rprime_fields({IS_WEIGHTS}, allow_truncated_rprime=True) == (IS_WEIGHTS,)
    assert rprime_fields(set(LOG_PROBS), allow_truncated_rprime=True) == ()
    assert rprime_fields(None, allow_truncated_rprime=True) == ()
    data = {IS_WEIGHTS: torch.ones(1, 2), "old_log_probs": torch.tensor([[-1.0, -2.0]]),
            "rollout_log_probs": torch.tensor([[-1.5, -1.0]])}
    assert rprime_of(data.__getitem__, LOG_PROBS)[0].tolist() == pytest.approx([math.exp(0.5), math.exp(-1.0)])
    assert rprime_of(data.__getitem__, (IS_WEIGHTS,)).tolist() == [[1.0, 1.0]]
    assert rprime_of(data.__getitem__, ()) is None


def test_the_largest_responses_drift_shows_one_engine_of_eight_that_the_batch_mean_hides():
    """Eight engines, 16 responses of 64 tokens each: one serves weights giving |log r'| = 3.77 a token (what a
    level-2-sleep engine gave on a GPU), seven the 0.02 of numerics. The batch's mean, which the guard checks at lag 0
    against 0.5, is 3.77/8 + 0.02·7/8 = 0.489; the largest response's mean |log r'| is 3.77. Padding never enters:
    a response of 2 tokens padded with r' = 1e-9 reads its own tokens' mean."""
    from verl_offgrpo.bound_monitor import SEQ_MAX

    log_rprime = torch.full((8 * 16, 64), 0.02, dtype=torch.float64)
    log_rprime[:16] = -3.77
    metrics = tv_estimates(torch.exp(log_rprime), torch.ones_like(log_rprime))
    assert metrics["off_grpo/bound/mean_abs_log_rprime"] == pytest.approx(3.77 / 8 + 0.02 * 7 / 8)
    assert metrics[SEQ_MAX] == pytest.approx(3.77)
    rprime = torch.tensor([[math.exp(0.5), math.exp(-0.1), 1e-9], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert tv_estimates(rprime, mask)[SEQ_MAX] == pytest.approx(0.3)
    assert tv_estimates(rprime, torch.zeros_like(mask))[SEQ_MAX] == 0.0
