"""The off_grpo estimator through verl's real ``ray_trainer.compute_advantage`` on a real DataProto.

Expected values are derived by hand from A = (r − mean)/sqrt(std² + ε) with ε chosen so the numbers
come out exact (e.g. rewards {0, 2}: mean 1, unbiased std² 2, ε = 2 → A = ±1/2).
"""

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin through the verl.plugins entry point)
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

RESP_LEN = 3


def make_batch(rewards, uids, lengths=None):
    """DataProto with an outcome reward on the last valid token of each response."""
    bs = len(rewards)
    lengths = lengths or [RESP_LEN] * bs
    mask = torch.zeros(bs, RESP_LEN, dtype=torch.int64)
    token_rewards = torch.zeros(bs, RESP_LEN)
    for i, (r, n) in enumerate(zip(rewards, lengths)):
        mask[i, :n] = 1
        token_rewards[i, n - 1] = r
    return DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


def algo_config(**off_grpo):
    norm = off_grpo.pop("norm_adv_by_std_in_grpo", True)
    return OmegaConf.create(
        {"adv_estimator": "off_grpo", "norm_adv_by_std_in_grpo": norm, "off_grpo": off_grpo}
    )


def run(batch, cfg):
    return compute_advantage(
        batch,
        adv_estimator=cfg.adv_estimator,
        norm_adv_by_std_in_grpo=cfg.norm_adv_by_std_in_grpo,
        config=cfg,
    )


def seq_adv(out):
    """Per-sequence advantage (value on the first response token)."""
    return out.batch["advantages"][:, 0]


def test_unbiased_std_exact_values():
    # group a: {0, 2} mean 1, unbiased var 2; ε=2 -> ±1/sqrt(4) = ±0.5
    # group b: {1, 1, 4}: mean 2, unbiased var ((1+1+4)/2)=3; ε=2 -> (r-2)/sqrt(5)
    out = run(make_batch([0, 2, 1, 1, 4], ["a", "a", "b", "b", "b"]), algo_config(std_eps=2.0, zero_var_mask=False))
    expected = torch.tensor([-0.5, 0.5, -1 / math.sqrt(5), -1 / math.sqrt(5), 2 / math.sqrt(5)])
    torch.testing.assert_close(seq_adv(out), expected)
    # broadcast over the response tokens, zero on padding
    torch.testing.assert_close(out.batch["advantages"], expected[:, None].expand(-1, RESP_LEN))
    torch.testing.assert_close(out.batch["returns"], out.batch["advantages"])


def test_population_std_exact_values():
    # group {0, 2}: population var 1; ε=3 -> ±1/2.  group {1, 1, 4}: population var 2; ε=2 -> (r-2)/2
    cfg = algo_config(std_eps=3.0, std_unbiased=False, zero_var_mask=False)
    out = run(make_batch([0, 2], ["a", "a"]), cfg)
    torch.testing.assert_close(seq_adv(out), torch.tensor([-0.5, 0.5]))
    cfg = algo_config(std_eps=2.0, std_unbiased=False, zero_var_mask=False)
    out = run(make_batch([1, 1, 4], ["b", "b", "b"]), cfg)
    torch.testing.assert_close(seq_adv(out), torch.tensor([-0.5, -0.5, 1.0]))


def test_norm_adv_by_std_false_is_dr_grpo():
    cfg = algo_config(std_eps=2.0, norm_adv_by_std_in_grpo=False, zero_var_mask=False)
    out = run(make_batch([1, 1, 4, 0, 2], ["b", "b", "b", "a", "a"]), cfg)
    torch.testing.assert_close(seq_adv(out), torch.tensor([-1.0, -1.0, 2.0, -1.0, 1.0]))


def test_singleton_group_as_verl_grpo():
    # verl's grpo: mean 0, std 1 -> A = r / sqrt(1 + ε); never masked
    out = run(make_batch([3.0, 0.0, 1.0], ["s", "a", "a"]), algo_config(std_eps=3.0, zero_var_mask=True))
    torch.testing.assert_close(seq_adv(out)[0], torch.tensor(1.5))
    assert out.batch["response_mask"][0].sum() == RESP_LEN


def test_padding_stays_zero():
    out = run(make_batch([0, 2], ["a", "a"], lengths=[1, 3]), algo_config(std_eps=2.0))
    torch.testing.assert_close(out.batch["advantages"][0], torch.tensor([-0.5, 0.0, 0.0]))


@pytest.mark.parametrize("zero_var_mask", [True, False])
def test_zero_variance_group_leaves_response_mask(zero_var_mask):
    batch = make_batch([1, 1, 1, 0, 1], ["z", "z", "z", "a", "a"])
    out = run(batch, algo_config(zero_var_mask=zero_var_mask))
    adv = seq_adv(out)
    assert torch.equal(adv[:3], torch.zeros(3))
    assert (adv[3:] != 0).all()
    rows_left = out.batch["response_mask"].sum(-1).tolist()
    if zero_var_mask:
        assert rows_left == [0, 0, 0, RESP_LEN, RESP_LEN]
    else:
        assert rows_left == [RESP_LEN] * 5


def test_matches_verl_grpo_up_to_epsilon_placement():
    """verl's grpo divides by (std + ε), off_grpo by sqrt(std² + ε): equal to ~1e-6 for ε = 1e-6."""
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 2, size=32).astype(float).tolist()
    uids = [f"g{i // 8}" for i in range(32)]
    ours = run(make_batch(rewards, uids), algo_config(zero_var_mask=False))
    theirs = compute_advantage(make_batch(rewards, uids), adv_estimator="grpo", norm_adv_by_std_in_grpo=True)
    torch.testing.assert_close(ours.batch["advantages"], theirs.batch["advantages"], atol=1e-4, rtol=1e-4)


def test_unknown_knob_rejected_by_estimator():
    with pytest.raises(ValueError, match="std_epsilon"):
        run(make_batch([0, 1], ["a", "a"]), algo_config(std_epsilon=1e-6))


def test_without_the_group_index_it_refuses():
    from verl_offgrpo.advantage import compute_off_grpo_advantage

    with pytest.raises(ValueError, match="prompt-group index"):
        compute_off_grpo_advantage(torch.ones(2, 3), torch.ones(2, 3), index=None)


def test_a_config_without_norm_adv_by_std_divides_by_the_std_as_grpo():
    """Without ``norm_adv_by_std_in_grpo`` in the config the advantage is divided by sqrt(std² + ε), as verl's own
    default: rewards 1, 0 (mean 0.5, unbiased std² 0.5) with ε = 1.5 give ±0.5 / sqrt(2) (Dr.GRPO's would be ±0.5)."""
    from verl_offgrpo.advantage import compute_off_grpo_advantage

    adv, _ = compute_off_grpo_advantage(torch.tensor([[1.0], [0.0]]), torch.ones(2, 1), ["a", "a"],
                                        OmegaConf.create({"off_grpo": {"std_eps": 1.5}}))
    assert adv[:, 0].tolist() == pytest.approx([0.5 / math.sqrt(2), -0.5 / math.sqrt(2)])


def test_the_sequence_reward_is_the_sum_of_the_token_rewards_negatives_included():
    """r_j = Σ_t token_level_rewards[j, t] (a process reward spread over the response, negative rewards as they come):
    rows [1, 1, 0] and [−1, 0, −1] give r = 2, −2: mean 0, unbiased std² 8; ε = 8 → A = ±2/sqrt(16) = ±1/2."""
    batch = DataProto.from_dict(
        tensors={"token_level_rewards": torch.tensor([[1.0, 1.0, 0.0], [-1.0, 0.0, -1.0]]),
                 "response_mask": torch.ones(2, RESP_LEN, dtype=torch.int64)},
        non_tensors={"uid": np.array(["a", "a"], dtype=object)},
    )
    out = run(batch, algo_config(std_eps=8.0, zero_var_mask=False))
    torch.testing.assert_close(out.batch["advantages"], torch.tensor([[0.5] * RESP_LEN, [-0.5] * RESP_LEN]))


def test_a_group_of_equal_negative_rewards_is_a_zero_variance_group():
    """{−1, −1} has N > 1 and all rewards equal: A = 0 and, with the mask on, both rows leave the loss; {−1, 1}: A = ±1/2
    (mean 0, unbiased std² 2, ε = 2)."""
    out = run(make_batch([-1, -1, -1, 1], ["z", "z", "a", "a"]), algo_config(std_eps=2.0, zero_var_mask=True))
    torch.testing.assert_close(seq_adv(out), torch.tensor([0.0, 0.0, -0.5, 0.5]))
    assert out.batch["response_mask"].sum(-1).tolist() == [0, 0, RESP_LEN, RESP_LEN]
