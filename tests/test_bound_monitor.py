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
