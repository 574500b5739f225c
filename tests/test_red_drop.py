"""The ``red_drop`` estimator (RED-Drop) through verl's real ``ray_trainer.compute_advantage``.

Hand-derived groups (A = r − mean over the kept rows; ``norm_adv_by_std_in_grpo=false``, the paper's form)::

    group  rewards            mean   neg  pos  dropped  kept mean  A of the kept rows
    a      1 0 0 0 0 0        1/6     5    1     4        1/2       +1/2, −1/2
    b      1 1 1 0            3/4     1    3     0        3/4       +1/4 ×3, −3/4
    c      3 1 0 0            1       2    2     0        1         +2, 0, −1, −1   (r = mean counts positive)
    d      1 .5 0 0 0         .3      3    2     1        3/8       +5/8, +1/8, −3/8 ×2
    z      0 0 0              0       0    3     0        0         0 (zero-variance: masked when the mask is on)
"""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin)
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from verl_offgrpo.groups import red_drop_rows

RESP_LEN = 2
GROUPS = {
    "a": [1, 0, 0, 0, 0, 0],
    "b": [1, 1, 1, 0],
    "c": [3, 1, 0, 0],
    "d": [1, 0.5, 0, 0, 0],
    "z": [0, 0, 0],
}
DROPPED = {"a": 4, "b": 0, "c": 0, "d": 1, "z": 0}
KEPT_ADV = {"a": {1: 0.5, 0: -0.5}, "b": {1: 0.25, 0: -0.75}, "c": {3: 2.0, 1: 0.0, 0: -1.0},
            "d": {1: 0.625, 0.5: 0.125, 0: -0.375}, "z": {0: 0.0}}  # fmt: skip


def make_batch(groups=GROUPS, interleave=False):
    rewards, uids = [], []
    for uid, rs in groups.items():
        rewards += rs
        uids += [uid] * len(rs)
    if interleave:  # groups' rows mixed through the batch, as verl's balancing may leave them
        order = np.random.default_rng(0).permutation(len(rewards))
        rewards, uids = [rewards[i] for i in order], [uids[i] for i in order]
    token_rewards = torch.zeros(len(rewards), RESP_LEN)
    token_rewards[:, -1] = torch.tensor(rewards, dtype=torch.float32)
    mask = torch.ones(len(rewards), RESP_LEN, dtype=torch.int64)
    return DataProto.from_dict(tensors={"token_level_rewards": token_rewards, "response_mask": mask},
                               non_tensors={"uid": np.array(uids, dtype=object)})


def algo(norm=False, **off_grpo):
    return OmegaConf.create({"adv_estimator": "red_drop", "norm_adv_by_std_in_grpo": norm, "off_grpo": off_grpo})


def run(batch, cfg):
    return compute_advantage(batch, adv_estimator=cfg.adv_estimator,
                             norm_adv_by_std_in_grpo=cfg.norm_adv_by_std_in_grpo, config=cfg)


@pytest.mark.parametrize("interleave", [False, True])
def test_drop_counts_and_kept_advantages_by_hand(interleave):
    out = run(make_batch(interleave=interleave), algo(zero_var_mask=False))
    rewards = out.batch["token_level_rewards"][:, -1].tolist()
    uids = out.non_tensor_batch["uid"]
    adv, mask = out.batch["advantages"], out.batch["response_mask"]
    dropped = mask.sum(-1) == 0
    for uid in GROUPS:
        rows = np.flatnonzero(uids == uid)
        assert int(dropped[rows].sum()) == DROPPED[uid], uid
        for row in rows:
            if dropped[row]:
                assert rewards[row] == 0 and torch.equal(adv[row], torch.zeros(RESP_LEN))  # only negatives drop
            else:
                torch.testing.assert_close(adv[row], torch.full((RESP_LEN,), KEPT_ADV[uid][rewards[row]]))
    torch.testing.assert_close(out.batch["returns"], adv)


@pytest.mark.parametrize("value, n", [(0.1, 3), (0.7, 6), (0.7, 7)])
def test_a_constant_group_loses_no_row(value, n):
    """In float64 the mean of n equal rewards can round above them (0.1 × 3, 0.7 × 6): a group without
    variance still has no negatives to drop."""
    assert (np.full(n, value) < np.full(n, value).mean()).all()  # the trap is real
    scores = torch.full((n,), value, dtype=torch.float64)
    assert not red_drop_rows(scores, np.array(["g"] * n, dtype=object), seed=0).any()


@pytest.mark.parametrize("dtype, group, middle", [(torch.float32, [0.1, 0.2, 0.3, 0.0, 0.4], 0.2),
                                                   (torch.float64, [0.1, 0.2, 0.3, 0.6], 0.3)])
def test_a_reward_equal_to_the_mean_up_to_rounding_is_a_positive(dtype, group, middle):
    """The mean of the stored rewards rounds above the stored middle one (float32: 0.2000000045 vs 0.2000000030;
    float64: 0.30000000000000004 vs 0.3), yet it is the group's mean: it counts as a positive, and where that makes
    the positives as many as the negatives nothing is dropped; A = r − mean (norm off)."""
    rewards = torch.tensor(group, dtype=dtype)
    values = rewards.double().numpy()
    assert values[group.index(middle)] < values.mean()  # the trap is real (the mean as red_drop_rows takes it)
    assert not red_drop_rows(rewards, np.array(["g"] * len(group), dtype=object), seed=0).any()
    if dtype == torch.float32:  # verl's rewards: float32 through compute_advantage
        out = run(make_batch({"g": group}), algo(zero_var_mask=False))
        assert out.batch["response_mask"].sum().item() == len(group) * RESP_LEN
        torch.testing.assert_close(out.batch["advantages"][:, 0], torch.tensor(group) - middle)
    # below the mean by more than rounding stays a negative: {1, 0.5, 0, 0, 0} drops one 0 (group d)
    assert int(red_drop_rows(torch.tensor([1, 0.5, 0, 0, 0], dtype=dtype), np.array(["d"] * 5, dtype=object),
                             seed=0).sum()) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_rounding_allowance_does_not_grow_with_the_group(dtype):
    """{1 ×7, 0.5 ×4, 0 ×5}: mean 0.5625, so the 0.5s (0.0625 below) and the 0s are 9 negatives against 7 positives:
    2 dropped in every dtype (an allowance of N·ε·max|r| = 0.125 in bfloat16 took the 0.5s for positives)."""
    rewards = torch.tensor([1.0] * 7 + [0.5] * 4 + [0.0] * 5, dtype=dtype)
    assert int(red_drop_rows(rewards, np.array(["g"] * 16, dtype=object), seed=0).sum()) == 2


def test_std_normalised_over_the_kept_rows():
    """norm_adv_by_std_in_grpo=true: group a keeps {1, 0}: mean 1/2, unbiased std² 1/2; ε = 1/2 → A = ±1/2."""
    out = run(make_batch({"a": GROUPS["a"]}), algo(norm=True, std_eps=0.5))
    kept = out.batch["response_mask"].sum(-1) > 0
    assert sorted(out.batch["advantages"][kept, 0].tolist()) == [-0.5, 0.5]


@pytest.mark.parametrize("zero_var_mask", [True, False])
def test_zero_variance_mask_composes(zero_var_mask):
    out = run(make_batch(), algo(zero_var_mask=zero_var_mask))
    z_rows = np.flatnonzero(out.non_tensor_batch["uid"] == "z")
    assert out.batch["response_mask"][z_rows].sum().item() == (0 if zero_var_mask else 3 * RESP_LEN)
    assert (out.batch["response_mask"].sum(-1) == 0).sum().item() == 5 + (3 if zero_var_mask else 0)


def test_reproducible_under_the_seed_and_another_seed_draws_again():
    """Same seed and uids: the same rows in every call (the V1 trainer mode recomputes them, test_zero_var_v1);
    the draw depends on the seed and the uid, not on Python's per-process hash salt."""
    groups = {f"g{i}": [1, 0, 0, 0, 0, 0, 0, 0] for i in range(16)}  # 6 of 7 negatives dropped per group

    def dropped(seed):
        out = run(make_batch(groups), algo(red_drop_seed=seed))
        return (out.batch["response_mask"].sum(-1) == 0).tolist()

    first = dropped(3)
    assert first == dropped(3) and sum(first) == 16 * 6
    assert first != dropped(4)
    scores = make_batch(groups).batch["token_level_rewards"].sum(-1)
    uids = np.array([uid for uid, rs in groups.items() for _ in rs], dtype=object)
    assert red_drop_rows(scores, uids, 3).tolist() == first
    # fixed by (seed, uid), in any process (a salted hash would move it from run to run): g0 keeps row 1
    assert np.flatnonzero(red_drop_rows(scores[:8], uids[:8], 3).numpy()).tolist() == [2, 3, 4, 5, 6, 7]
    # each group draws its own: the 16 alike groups do not all keep the negative at the same place
    kept_place = {tuple(np.flatnonzero(~np.array(first[8 * g:8 * g + 8]))) for g in range(16)}
    assert len(kept_place) > 1


def test_v0_bound_monitor_reports_the_dropped_fraction():
    """v0: verl's compute_advantage wrapped by the plugin hands off_grpo/red_drop/dropped_frac to the step."""
    from verl_offgrpo.patches import v0_advantage_metrics as v0
    from verl_offgrpo.patches.v0_advantage_metrics import wrap_compute_advantage

    got = []

    cfg = algo(zero_var_mask=True)
    v0._SINK[:], v0._ALGORITHM[:] = [got.append], [cfg]
    try:
        wrap_compute_advantage(compute_advantage)(make_batch(), cfg.adv_estimator, config=cfg)
    finally:
        v0._SINK[:], v0._ALGORITHM[:] = [], [None]
    assert got[0]["off_grpo/red_drop/dropped_frac"] == pytest.approx(5 / 22)
    assert got[0]["off_grpo/zero_var_masked_frac"] == pytest.approx(3 / 22)


@pytest.mark.parametrize("dtype, group", [
    (torch.bfloat16, [0.1, 0.2, 0.3, 0.0, 0.4]),    # g4: ε of the stored dtype (bf16 0.2 → 0.2002 vs mean 0.2003)
    (torch.float16, [0.1, 0.2, 0.3, 0.0, 0.4]),     # g4
    (torch.float32, [6.3, 4.2, 11.2, 9.1, 7.7]),     # g3: ×max|r| (7.7 → 7.6999998 vs mean 7.7)
    (torch.float64, [9.3, 9.7, 6.4, 4.9, 9.0, 7.6, 3.9, 9.3, 3.7, 5.0, 6.4, 6.836363636363636]),  # g1: needs more than ε64 (the mean's
    # rounding, 12 rows); N·ε64 bounds it, which no group found reaches (numpy's pairwise sum stays within ≈ 1.3·ε64)
])
def test_rounding_allowance_terms(dtype, group):
    from verl_offgrpo.groups import red_drop_rows

    assert not red_drop_rows(torch.tensor(group, dtype=dtype), np.array(["g"] * len(group), dtype=object), seed=0).any()


def test_a_group_of_three_with_two_negatives_drops_one():
    """{1, 0, 0}: mean 1/3, negatives 2 against 1 positive: one 0 dropped; the kept {1, 0} have mean 1/2, A = ±1/2."""
    out = run(make_batch({"t": [1, 0, 0]}), algo(zero_var_mask=False))
    kept = out.batch["response_mask"].sum(-1) > 0
    assert kept.tolist().count(False) == 1 and out.batch["token_level_rewards"][~kept, -1].tolist() == [0.0]
    assert sorted(out.batch["advantages"][kept, 0].tolist()) == [-0.5, 0.5]
