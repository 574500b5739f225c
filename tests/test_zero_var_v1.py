"""V1 trainer: the zero-variance mask reaches the TransferQueue's ``loss_mask`` and ``response_mask``
(which the V1 actor's token-mean denominator and KL read), and the bound monitor is computed.
A dict-backed stand-in implements the two TransferQueue calls used (kv_batch_get / kv_batch_put)."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl_offgrpo.sync.advantage_v1 import after_advantage_v1
from verl_offgrpo.zero_var_mask import zero_variance_rows


def nested(rows, dtype=torch.float32):
    return torch.nested.as_nested_tensor([torch.tensor(r, dtype=dtype) for r in rows], layout=torch.jagged)


class FakeTQ:
    def __init__(self, fields):
        self.store = dict(fields)
        self.puts = []

    def kv_batch_get(self, keys, partition_id, select_fields):
        return {k: self.store[k] for k in select_fields}

    def kv_batch_put(self, keys, partition_id, fields):
        self.puts.append(sorted(fields.keys()))
        for k in fields.keys():
            self.store[k] = fields[k]


class _UID(list):
    """Like tensordict's LinkedList that kv_batch_get returns for uid: iterable, no tolist()."""


def make_store():
    # groups: a = {1, 1} (zero variance), b = {0, 1}, c = {2} (singleton)
    return {
        "uid": _UID(["a", "a", "b", "b", "c"]),
        "rm_scores": nested([[0, 1.0], [0, 0, 1.0], [0.0], [0, 1.0], [2.0]]),
        "response_mask": nested([[1, 1], [1, 1, 1], [1], [1, 1], [1]], torch.int64),
        "loss_mask": nested([[1, 1], [1, 1, 1], [1], [1, 1], [1]], torch.int64),
        "rollout_is_weights": nested([[1, 1], [2.0, 0.5, 1], [1], [1, 1], [1]]),
    }


def algo(**off_grpo):
    return OmegaConf.create({"use_kl_in_reward": False, "off_grpo": off_grpo})


class Meta:
    def __init__(self, fields):
        self.keys = [f"k{i}" for i in range(5)]
        self.partition_id = "train"
        self.fields = fields
        self.tags = [{} for _ in self.keys]  # KVBatchMeta's per-sample tags (no is_padding: every row a sample)

    def __len__(self):
        return len(self.keys)


def test_masks_zeroed_for_zero_variance_group_only():
    tq = FakeTQ(make_store())
    metrics = after_advantage_v1(tq, Meta(list(make_store())), algo(zero_var_mask=True, std_eps=1e-6))
    assert tq.puts == [["loss_mask", "response_mask"]]
    assert [t.sum().item() for t in tq.store["loss_mask"].unbind()] == [0, 0, 1, 2, 1]
    assert [t.sum().item() for t in tq.store["response_mask"].unbind()] == [0, 0, 1, 2, 1]
    assert metrics["off_grpo/zero_var_masked_frac"] == pytest.approx(2 / 5)
    assert metrics["off_grpo/bound/zero_var_group_frac"] == pytest.approx(1 / 2)
    # TV over the 9 loss tokens before masking: ½·(|2−1| + |0.5−1|)/9
    assert metrics["off_grpo/bound/tv_token"] == pytest.approx(0.5 * 1.5 / 9)


def test_verls_padding_rows_are_not_a_zero_variance_group():
    """verl's V1 _balance_batch pads the batch to a divisible size with rows tagged is_padding, sharing one
    uid, reward 0 and no loss token: two of them looked like a zero-variance group in the metrics (verl
    leaves them out of its own metrics too). Here the real groups b = {0, 1} and d = {1, 0} are mixed."""
    store = {
        "uid": _UID(["b", "b", "d", "d", "pad0", "pad0"]),
        "rm_scores": nested([[0.0], [0, 1.0], [1.0], [0.0], [0.0], [0.0]]),
        "response_mask": nested([[1], [1, 1], [1], [1], [0], [0]], torch.int64),
        "loss_mask": nested([[1], [1, 1], [1], [1], [0], [0]], torch.int64),
    }
    batch = Meta(list(store))
    batch.keys = [f"k{i}" for i in range(6)]
    batch.tags = [{}] * 4 + [{"is_padding": True}] * 2
    tq = FakeTQ(store)
    metrics = after_advantage_v1(tq, batch, algo(zero_var_mask=True))
    assert metrics["off_grpo/zero_var_masked_frac"] == 0.0 and metrics["off_grpo/bound/zero_var_group_frac"] == 0.0
    assert tq.puts == []  # no real row to mask
    batch.tags = [{}] * 6  # untagged, the same two rows are a zero-variance group of 6 rows
    metrics = after_advantage_v1(FakeTQ(store), batch, algo(zero_var_mask=True))
    assert metrics["off_grpo/zero_var_masked_frac"] == pytest.approx(2 / 6)


def test_mask_off_writes_nothing():
    tq = FakeTQ(make_store())
    metrics = after_advantage_v1(tq, Meta(list(make_store())), algo(zero_var_mask=False))
    assert tq.puts == []
    assert metrics["off_grpo/zero_var_masked_frac"] == 0.0


def test_without_rollout_weights_tv_is_zero():
    store = make_store()
    del store["rollout_is_weights"]
    tq = FakeTQ(store)
    metrics = after_advantage_v1(tq, Meta(list(store)), algo())
    assert metrics["off_grpo/bound/tv_token"] == 0.0


def test_zero_variance_rows_exact_equality_and_singletons():
    rows = zero_variance_rows(torch.tensor([0.3, 0.3, 0.1 + 0.2, 5.0], dtype=torch.float64), np.array(["a", "a", "a", "s"], dtype=object))
    assert rows.tolist() == [False, False, False, False]  # 0.1+0.2 != 0.3 exactly; singleton never
    rows = zero_variance_rows(torch.tensor([1.0, 1.0, 0.0, 1.0]), np.array(["a", "a", "b", "b"], dtype=object))
    assert rows.tolist() == [True, True, False, False]


def test_red_drop_rows_reach_the_masks_as_the_estimator_dropped_them():
    """RED-Drop on V1: the trainer mode recomputes the dropped rows from (seed, uid, rewards, row order) and
    zeroes exactly the rows whose response_mask verl's estimator call zeroed, padding rows left out; the
    zero-variance group is masked too."""
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    uids = ["r", "z", "r", "r", "z", "r", "r", "pad", "pad"]
    rewards = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # r: 1 positive, 4 negatives -> 3 dropped
    cfg = OmegaConf.create({"adv_estimator": "red_drop", "norm_adv_by_std_in_grpo": False, "use_kl_in_reward": False,
                            "off_grpo": {"red_drop_seed": 7}})  # fmt: skip
    token_rewards = torch.tensor(rewards)[:, None]
    estimator_mask = torch.ones(9, 1, dtype=torch.int64)
    get_adv_estimator_fn("red_drop")(token_level_rewards=token_rewards, response_mask=estimator_mask,
                                     index=np.array(uids, dtype=object), config=cfg)  # fmt: skip
    store = {
        "uid": _UID(uids),
        "rm_scores": nested([[r] for r in rewards]),
        "response_mask": nested([[1]] * 7 + [[0]] * 2, torch.int64),
        "loss_mask": nested([[1]] * 7 + [[0]] * 2, torch.int64),
    }
    batch = Meta(list(store))
    batch.keys = [f"k{i}" for i in range(9)]
    batch.tags = [{}] * 7 + [{"is_padding": True}] * 2
    tq = FakeTQ(store)
    metrics = after_advantage_v1(tq, batch, cfg)
    written = [t.sum().item() for t in tq.store["loss_mask"].unbind()]
    assert written[:7] == estimator_mask[:7, 0].tolist()
    assert written[:7].count(0) == 3 + 2 and written == [t.sum().item() for t in tq.store["response_mask"].unbind()]
    assert metrics["off_grpo/red_drop/dropped_frac"] == pytest.approx(3 / 7)
    assert metrics["off_grpo/zero_var_masked_frac"] == pytest.approx(2 / 7)


def test_a_padded_tensors_masked_rows_are_zeroed_on_a_copy():
    """A padded (not nested) tensor: the masked groups' rows become 0 in the result, the input is left as it was."""
    from verl_offgrpo.zero_var_mask import zero_rows_nested

    x = torch.ones(3, 2)
    assert zero_rows_nested(x, torch.tensor([False, True, False])).tolist() == [[1, 1], [0, 0], [1, 1]]
    assert x.sum() == 6


class KeyedMeta(Meta):
    def __init__(self, fields, keys, tags=None):
        super().__init__(fields)
        self.keys = keys
        self.tags = tags


def test_an_agent_loop_with_several_outputs_a_session_is_refused_before_the_update():
    """Keys ``{uid}_{session_id}_{index}`` (verl's AgentLoopWorkerTQ): a session with outputs 0 and 1 would count
    one sample twice in its group; verl's padding rows and one output a session pass."""
    one_each = ["a_0_0", "a_1_0", "b_0_0", "b_1_0", "c_0_0"]
    after_advantage_v1(FakeTQ(make_store()), KeyedMeta(["rollout_is_weights"], one_each), algo(zero_var_mask=True))
    padded = ["a_0_0", "a_1_0", "b_0_0", "pad9f_0_0", "pad9f_1_0"]  # verl's filler (padding_utils): one uid, a
    tags = [{}, {}, {}, {"is_padding": True}, {"is_padding": True}]  # session each; left out of the check anyway
    after_advantage_v1(FakeTQ(make_store()), KeyedMeta(["rollout_is_weights"], padded, tags), algo())
    # filler rows whose keys would read as one session with two outputs: passed only because they are tagged
    # is_padding (the same keys untagged are refused), so the tag filter itself is exercised
    shared = ["a_0_0", "a_1_0", "b_0_0", "pad9f_0_0", "pad9f_0_1"]
    after_advantage_v1(FakeTQ(make_store()), KeyedMeta(["rollout_is_weights"], shared, tags), algo())
    with pytest.raises(RuntimeError, match=r"2 outputs for session pad9f_0"):
        after_advantage_v1(FakeTQ(make_store()), KeyedMeta(["rollout_is_weights"], shared, [{}] * 5), algo())
    two_outputs = ["a_0_0", "a_0_1", "b_0_0", "b_1_0", "c_0_0"]
    tq = FakeTQ(make_store())
    with pytest.raises(RuntimeError, match=r"^verl-offgrpo: adv_estimator=off_grpo: the agent loop returned 2 outputs "
                                           r"for session a_0 \(1 such sessions in this batch\); .* set "
                                           r"algorithm.adv_estimator=grpo under the plugin's loss.$"):
        after_advantage_v1(tq, KeyedMeta(["rollout_is_weights"], two_outputs),
                           OmegaConf.create({"adv_estimator": "off_grpo", "off_grpo": {"zero_var_mask": True}}))
    assert tq.puts == []  # nothing written back


def test_verl_groups_sessions_for_its_grpo_only():
    """What the refusal stands on (verl 0.9.1): ``compute_advantage_for_multi_trajectories`` takes each session's
    final output for ``grpo`` and hands every output to another estimator, so ``off_grpo`` would group the two
    outputs of session u_0 as two samples (the audit's case: rewards copied to every output of a session)."""
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    keys = ["u_0_0", "u_0_1", "u_1_0", "u_2_0"]

    def advantages(estimator):
        rewards = torch.tensor([[1.0], [1.0], [0.0], [0.0]])
        data = DataProto.from_dict(
            tensors={"token_level_rewards": rewards, "response_mask": torch.ones(4, 1)},
            non_tensors={"uid": np.array(["u"] * 4, dtype=object)},
        )
        cfg = OmegaConf.create({"adv_estimator": estimator, "norm_adv_by_std_in_grpo": True, "off_grpo": {}})
        out = compute_advantage_for_multi_trajectories(data, batch_keys=keys, adv_estimator=estimator, config=cfg)
        return out.batch["advantages"][:, 0]

    # grpo: sessions {1, 0, 0}: mean 1/3, unbiased std 0.57735 → (1 − 1/3)/0.57735 = 1.1547, (0 − 1/3)/0.57735
    assert torch.allclose(advantages("grpo"), torch.tensor([1.1547, 1.1547, -0.5774, -0.5774]), atol=1e-4)
    # off_grpo: four rows {1, 1, 0, 0}: mean 1/2, unbiased std 0.57735 → ±0.8660
    assert torch.allclose(advantages("off_grpo"), torch.tensor([0.8660, 0.8660, -0.8660, -0.8660]), atol=1e-4)


def test_the_session_of_a_key():
    from verl_offgrpo.sync.advantage_v1 import sessions_with_several_outputs

    assert sessions_with_several_outputs(["u_0_a", "u_0_b"]) == {}  # a3: not {uid}_{session}_{index}
    assert sessions_with_several_outputs(["my_uid_0_0", "my_uid_0_1", "my_uid_1_0"]) == {"my_uid_0": 2}  # a7


def test_with_kl_in_the_reward_the_monitor_reads_the_rewards_the_estimator_summed():
    """``algorithm.use_kl_in_reward`` (allowed with the mask off): verl's estimator sums ``token_level_rewards``
    (r − β·KL), not ``rm_scores``, and so does the bound monitor. Group a's task rewards are {1, 1} (zero variance),
    its penalised ones {1 − 0.5, 1 − 0.25} are not: zero_var_group_frac is 0 of the 2 groups, not 1/2; group b
    {0 − 0.5, 1}: unbiased std² of {0.5, 0.75} and {−0.5, 1} are 1/32 and 9/8; with ε = 1/32, σ_a = √(1/16) = 1/4
    and σ_b = √(37/32), so the coefficients (1 − σ)/σ are 3 and (1 − √(37/32))/√(37/32)."""
    import math

    store = make_store()
    store["token_level_rewards"] = nested([[0, 0.5], [0, 0, 0.75], [-0.5], [0, 1.0], [2.0]])
    metrics = after_advantage_v1(FakeTQ(store), Meta(list(store)),
                                 OmegaConf.create({"use_kl_in_reward": True, "off_grpo": {"zero_var_mask": False,
                                                                                          "std_eps": 1 / 32}}))
    assert metrics["off_grpo/bound/zero_var_group_frac"] == 0.0
    coefs = [3.0, (1 - math.sqrt(37 / 32)) / math.sqrt(37 / 32)]
    assert metrics["off_grpo/bound/coef_mean"] == pytest.approx(sum(coefs) / 2)
    assert metrics["off_grpo/bound/coef_max"] == pytest.approx(max(coefs))
