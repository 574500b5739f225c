"""With ``allow_truncated_rprime`` verl's ``rollout_is_weights`` are no longer π_k/α (IcePop zeroes tokens,
batch normalisation rescales them): the bound monitor and the served-policy guard of the plugin's estimators
read r' off the log-probs instead, on both trainers. The batches go through verl's own rollout correction
(``compute_rollout_correction_and_add_to_batch``) and, for v0, verl's ``compute_advantage`` as the plugin's
patch wraps it; configs come from the plugin's ``compose`` validation (accepted, exit 0)."""

import math

import numpy as np
import pytest
import torch

BASE = ["actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "algorithm.off_grpo.sync_period=4",
        "algorithm.off_grpo.allow_truncated_rprime=true"]
NORMALISED = "algorithm.rollout_correction.rollout_is_batch_normalize=true"
ICEPOP = 'algorithm.rollout_correction.rollout_is_threshold="0.5_2.0"'


def accepted_config(*overrides):
    from verl_offgrpo.cli.compose import validate

    code, error, cfg = validate([*BASE, *overrides])
    assert code == 0, error
    return cfg


def corrected_batch(cfg, old_log_probs, rollout_log_probs):
    """A v0 ``DataProto`` (groups of two, rewards 1/0) after verl's rollout correction."""
    from verl import DataProto
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    bs, length = old_log_probs.shape
    rewards = torch.zeros(bs, length)
    rewards[:, -1] = torch.tensor([1.0, 0.0] * (bs // 2))
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(bs, length, dtype=torch.int64),
                 "old_log_probs": old_log_probs, "rollout_log_probs": rollout_log_probs},
        non_tensors={"uid": np.array([f"g{i // 2}" for i in range(bs)], dtype=object)},
    )
    data, _ = compute_rollout_correction_and_add_to_batch(data, cfg.algorithm.rollout_correction)
    return data


def guard_v0(cfg, old_log_probs, rollout_log_probs, monkeypatch):
    """verl's v0 ``compute_advantage`` (patched as the lagged manager patches it); the sink runs the guard as
    ``LaggedCheckpointManager._stash_v0_step_metrics`` does for a batch of rollout lag 0."""
    from verl.trainer.ppo import ray_trainer

    from verl_offgrpo.config import OffGRPOConfig
    from verl_offgrpo.patches import v0_advantage_metrics
    from verl_offgrpo.sync.alpha_guard import check_served_policy

    monkeypatch.setattr(ray_trainer, "compute_advantage", ray_trainer.compute_advantage)  # undone after the test
    monkeypatch.setattr(v0_advantage_metrics, "_SINK", [])
    knobs = OffGRPOConfig.from_algorithm(cfg.algorithm)
    seen = {}

    def sink(metrics):
        seen.update(metrics)
        check_served_policy(metrics, 0, knobs.max_log_rprime_after_sync, 1, knobs.max_log_rprime_lagged)

    v0_advantage_metrics.apply(sink, cfg.algorithm)
    data = corrected_batch(cfg, old_log_probs, rollout_log_probs)
    ray_trainer.compute_advantage(data, adv_estimator="off_grpo", num_repeat=2, config=cfg.algorithm)
    return seen


def guard_v1(cfg, old_log_probs, rollout_log_probs):
    """The V1 trainer's step after verl's ``_compute_advantage`` (:func:`after_advantage_v1`, on a dict-backed
    TransferQueue holding verl's corrected batch), then the guard at rollout lag 0."""
    from verl_offgrpo.config import OffGRPOConfig
    from verl_offgrpo.sync.advantage_v1 import after_advantage_v1
    from verl_offgrpo.sync.alpha_guard import check_served_policy

    data = corrected_batch(cfg, old_log_probs, rollout_log_probs)
    store = {name: data.batch[name] for name in ("old_log_probs", "rollout_log_probs", "rollout_is_weights",
                                                 "response_mask")}
    store.update(uid=list(data.non_tensor_batch["uid"]), rm_scores=data.batch["token_level_rewards"],
                 loss_mask=data.batch["response_mask"].clone())

    class TQ:
        def kv_batch_get(self, keys, partition_id, select_fields):
            return {k: store[k] for k in select_fields}

        def kv_batch_put(self, keys, partition_id, fields):
            store.update({k: fields[k] for k in fields.keys()})

    class Meta:
        keys = [f"k{i}" for i in range(len(data))]
        partition_id, fields, tags = "train", list(store), None

        def __len__(self):
            return len(self.keys)

    metrics = after_advantage_v1(TQ(), Meta(), cfg.algorithm)
    knobs = OffGRPOConfig.from_algorithm(cfg.algorithm)
    check_served_policy(metrics, 0, knobs.max_log_rprime_after_sync, 1, knobs.max_log_rprime_lagged)
    return metrics


@pytest.mark.parametrize("trainer", ["v0", "v1"])
def test_a_broken_engine_stops_the_run_under_batch_normalised_weights(trainer, monkeypatch):
    """vLLM serving garbage right after a sync (α ≈ 1 where π_k = e^-9.2: mean |log r'| = 9.2) stops the run at
    lag 0 with the exact r' and with verl's batch-normalised weights (each ≈ 1) alike."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    old, alpha = torch.full((8, 16), -9.2), torch.zeros(8, 16)
    for overrides in ((), (NORMALISED,)):
        cfg = accepted_config(*overrides)
        with pytest.raises(ServedPolicyError):
            guard_v0(cfg, old, alpha, monkeypatch) if trainer == "v0" else guard_v1(cfg, old, alpha)


@pytest.mark.parametrize("trainer", ["v0", "v1"])
def test_an_honest_engine_passes_under_an_icepop_threshold(trainer, monkeypatch):
    """An honest engine after a sync with r' = 0.45 on 1 token in 25 (mean |log r'| = 0.04·0.799 = 0.032, under
    max_log_rprime_after_sync = 0.5): IcePop (0.5, 2.0) zeroes those tokens' weights, which read as log 0
    (clamped to −20: 0.8 a token) would stop the run; the monitor reads the log-probs, 0.032."""
    cfg = accepted_config(ICEPOP)
    old = torch.full((8, 25), -1.0)
    alpha = old.clone()
    alpha[:, 0] = -1.0 - math.log(0.45)
    data = corrected_batch(cfg, old, alpha)
    assert float(data.batch["rollout_is_weights"][:, 0].abs().max()) == 0.0  # verl zeroed them
    seen = guard_v0(cfg, old, alpha, monkeypatch) if trainer == "v0" else guard_v1(cfg, old, alpha)
    assert seen["off_grpo/bound/mean_abs_log_rprime"] == pytest.approx(0.04 * -math.log(0.45), rel=1e-6)
