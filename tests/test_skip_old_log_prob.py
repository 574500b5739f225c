"""``algorithm.off_grpo.skip_old_log_prob``: the losses take π_k from their own forward on a batch whose
π_k pass was skipped, verl's bypass branch hands them α, and the start-up checks refuse what is not exact.

Hand-derived reference (ε = 0.2; one optimizer step per batch, so π_θ = π_k when the gradient is taken and
r = π_θ/α equals r' = π_k/α on every token)::

    token  A    r = r'   r'-centred window   off_grpo f = rA   α-centred window [0.8, 1.2]
    0     +1   1.5      [1.3, 1.7]          1.5               clipped (1.2)
    1     −1   0.1      [0.0, 0.3]         −0.1               clipped (−0.8)
    2     +1   1.0      [0.8, 1.2]          1.0               1.0
    3     −1   2.0      [1.8, 2.2]         −2.0               −2.0

off_grpo: token-mean loss = −(1.5 − 0.1 + 1.0 − 2.0)/4 = −0.1, ∂loss/∂log π_θ = −A·r/4 =
[−0.375, 0.025, −0.25, 0.5] (the r'-centred clip never binds at θ = θ_k). Read as r' = 1 (α as π_old,
the loss not told), tokens 0 and 1 would be clipped: [0, 0, −0.25, 0.5].
rec (one-side, NoIS, anchor alpha: ρ = π_θ/α, band [0.8, 1.2]): M = [0, 0, 1, 1], ∂loss/∂log π_θ = −A·M/4 =
[0, 0, −0.25, 0.25]; anchor pi_k: ρ = 1, M = 1, −A/4.
"""

import logging
import math

import pytest
import torch
from tensordict import TensorDict

import verl  # noqa: F401  (loads the plugin)
from verl.workers.config import ActorConfig

from verl_offgrpo.config import OffGRPOConfigError, validate_off_grpo_config
from verl_offgrpo.policy_loss_config import OffGRPOPolicyLossConfig

from _overrides import shipped_config as compose
from _overrides import V0_MANAGER, validate_as_main_ppo
from test_policy_loss import call_ppo_loss, metric_value

A = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]])
R = torch.tensor([[1.5], [0.1], [1.0], [2.0]])
LOG_ALPHA = torch.log(torch.full((4, 1), 0.25))
MASK = torch.ones(4, 1, dtype=torch.int64)


def actor(loss_mode="off_grpo", told=True, **rec):
    return ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4, clip_ratio=0.2,
        policy_loss=OffGRPOPolicyLossConfig(loss_mode=loss_mode, pi_k_from_forward=told, rec=rec or None),
    )


def log_pi_theta():
    return (LOG_ALPHA + torch.log(R)).requires_grad_(True)


def grad_of(config, log_prob, old, rollout_is_weights=None):
    loss, metrics = call_ppo_loss(config, log_prob, old, A, MASK, rollout_is_weights=rollout_is_weights)
    loss.backward()
    return loss.detach(), log_prob.grad.clone(), metrics


def test_off_grpo_takes_pi_k_from_its_forward_on_a_skipped_batch():
    loss, grad, metrics = grad_of(actor(), log_pi_theta(), LOG_ALPHA)  # old_log_probs = α, no weights
    torch.testing.assert_close(loss, torch.tensor(-0.1))
    torch.testing.assert_close(grad, torch.tensor([[-0.375], [0.025], [-0.25], [0.5]]))
    assert metric_value(metrics, "actor/pg_clipfrac") == 0.0
    assert metric_value(metrics, "actor/ppo_kl") == 0.0
    expected = (math.log(1.5) + abs(math.log(0.1)) + 0.0 + math.log(2.0)) / 4
    assert metric_value(metrics, "actor/off_grpo/mean_abs_log_rprime") == pytest.approx(expected, rel=1e-5)
    assert metric_value(metrics, "actor/off_grpo/rprime_max") == pytest.approx(2.0, rel=1e-5)
    # the bound monitor's TV estimates, read off the loss on a skipped batch: ½·mean|r' − 1| = ½·2.4/4 (one
    # token a row, so the sequence estimate is the same)
    assert metric_value(metrics, "actor/off_grpo/tv_token") == pytest.approx(0.3, rel=1e-5)
    assert metric_value(metrics, "actor/off_grpo/tv_seq") == pytest.approx(0.3, rel=1e-5)


def test_a_loss_not_told_reads_alpha_as_pi_old_and_clips_around_one():
    """Why the trainer tells the loss: the same batch read as r' = 1 clips tokens 0 and 1."""
    _, grad, _ = grad_of(actor(told=False), log_pi_theta(), LOG_ALPHA)
    torch.testing.assert_close(grad, torch.tensor([[0.0], [0.0], [-0.25], [0.5]]))


def test_a_batch_that_kept_the_pass_is_read_as_before():
    """With rollout_is_weights (a lag-0 batch, or the knob off), old_log_probs is π_k: same numbers as the
    skipped batch when π_k = π_θ, since r' arrives as the weight."""
    log_prob = log_pi_theta()
    loss, grad, _ = grad_of(actor(), log_prob, log_prob.detach().clone(), rollout_is_weights=R.clone())
    torch.testing.assert_close(loss, torch.tensor(-0.1))
    torch.testing.assert_close(grad, torch.tensor([[-0.375], [0.025], [-0.25], [0.5]]))


def test_padding_of_a_skipped_batch_never_enters():
    """α's log-probs on padding may hold anything (a NaN here): log r' is 0 there, the loss finite."""
    log_prob = torch.cat([LOG_ALPHA + torch.log(R), torch.zeros(4, 1)], dim=1).requires_grad_(True)
    old = torch.cat([LOG_ALPHA, torch.full((4, 1), float("nan"))], dim=1)
    mask = torch.tensor([[1, 0]] * 4)
    loss, metrics = call_ppo_loss(actor(), log_prob, old, A.expand(4, 2), mask)
    loss.backward()
    torch.testing.assert_close(loss, torch.tensor(-0.1))
    torch.testing.assert_close(log_prob.grad[:, :1], torch.tensor([[-0.375], [0.025], [-0.25], [0.5]]))
    assert torch.all(log_prob.grad[:, 1] == 0)
    assert metric_value(metrics, "actor/off_grpo/tv_token") == pytest.approx(0.3, rel=1e-5)


@pytest.mark.parametrize(
    "anchor, expected",
    [("alpha", [[0.0], [0.0], [-0.25], [0.25]]), ("pi_k", [[-0.25], [0.25], [-0.25], [0.25]])],
)
def test_rec_takes_pi_k_from_its_forward_on_a_skipped_batch(anchor, expected):
    _, grad, metrics = grad_of(actor("rec", anchor=anchor), log_pi_theta(), LOG_ALPHA)
    torch.testing.assert_close(grad, torch.tensor(expected))
    assert metric_value(metrics, "actor/rec/clipped_frac") == (0.5 if anchor == "alpha" else 0.0)
    # r' for the bound monitor and the served-policy guard after the update, whatever the anchor
    expected = (math.log(1.5) + abs(math.log(0.1)) + 0.0 + math.log(2.0)) / 4
    assert metric_value(metrics, "actor/off_grpo/mean_abs_log_rprime") == pytest.approx(expected, rel=1e-5)
    assert metric_value(metrics, "actor/off_grpo/tv_token") == pytest.approx(0.3, rel=1e-5)


def test_rec_without_rollout_log_probs_logs_no_rprime_terms():
    """v = 1 without α's log-probs: r' is unknown to rec, so it logs no r' terms (not a made-up r' = 1)."""
    _, _, metrics = grad_of(actor("rec", told=False, anchor="pi_k"), log_pi_theta(), log_pi_theta().detach())
    assert not [name for name in metrics if "rprime" in name or "tv_" in name]


@pytest.mark.parametrize("enabled, lag, skipped", [(True, None, False), (True, 0, False), (True, 1, True),
                                                   (True, 9, True), (False, 3, False)])
def test_only_lagged_batches_skip_and_only_with_the_knob(enabled, lag, skipped):
    """The rule the trainer applies to each batch's rollout lag (per_step: the sync schedule's; window: the
    window's, as ``test_window`` runs it through verl's fit); None is before the first sync."""
    from verl_offgrpo.sync.old_log_prob_skip import skips_old_log_prob

    assert skips_old_log_prob(enabled, lag) is skipped


# ----------------------------------------------------------------------------- verl's bypass branch
class FakeTQ:
    """The two TransferQueue calls verl's ``_compute_old_log_prob`` makes in bypass mode."""

    def __init__(self, fields):
        self.store, self.puts = dict(fields), []

    def kv_batch_get(self, keys, partition_id, select_fields):
        return TensorDict({k: self.store[k] for k in select_fields}, batch_size=len(keys))

    def kv_batch_put(self, keys, partition_id, fields):
        self.puts.append(sorted(fields.keys()))
        self.store.update({k: fields[k] for k in fields.keys()})


def test_verls_bypass_branch_hands_the_loss_alpha_as_old_log_probs_and_never_runs_the_actor(monkeypatch):
    """verl 0.9.1's own ``PPOTrainer._compute_old_log_prob`` inside :func:`bypass_mode_for_this_batch`."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import trainer_base

    from verl_offgrpo.sync.old_log_prob_skip import bypass_mode_for_this_batch

    alpha = torch.tensor([[-1.0, -2.0], [-0.5, -0.25]])
    tq = FakeTQ({"rollout_log_probs": alpha})
    monkeypatch.setattr(trainer_base, "tq", tq)
    config = OmegaConf.create({"algorithm": {"rollout_correction": {"bypass_mode": False}}})
    wg = SimpleNamespace(compute_log_prob=lambda batch: pytest.fail("the actor ran the π_k pass"))
    trainer = SimpleNamespace(config=config, actor_rollout_ref=None, actor_rollout_wg=wg)
    batch = SimpleNamespace(keys=["a", "b"], partition_id="train", extra_info={})
    with bypass_mode_for_this_batch(config):
        assert trainer_base.PPOTrainer._compute_old_log_prob(trainer, batch, metrics={}) is batch
    assert tq.puts == [["old_log_probs"]]
    torch.testing.assert_close(tq.store["old_log_probs"], alpha)
    assert config.algorithm.rollout_correction.bypass_mode is False


# ----------------------------------------------------------------------------- start-up checks
GOOD = ("algorithm.off_grpo.skip_old_log_prob=true", "algorithm.off_grpo.sync_period=4",
        "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8")


def test_a_config_it_can_run_passes_verls_checks_and_the_plugins():
    validate_as_main_ppo(compose(*GOOD))
    assert validate_off_grpo_config(compose(*GOOD)).skip_old_log_prob is True


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["actor_rollout_ref.actor.ppo_epochs=2"], r"one optimizer step per batch.*got ppo_epochs=2, "
                                                    r"ppo_mini_batch_size=8\), or drop the knob\.$"),
        (["actor_rollout_ref.actor.ppo_mini_batch_size=4"],
         r"actor_rollout_ref.actor.ppo_mini_batch_size=8 \(= data.train_batch_size; got ppo_epochs=1, "
         r"ppo_mini_batch_size=4\)"),
        (["trainer.use_v1=false", V0_MANAGER], "V1 trainer mode off_grpo_sync.*would compute old_log_prob every step"),
        # the lag's own checks come first, and cover what the knob needs besides
        (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"], "sync_period=4 trains on samples of a lagged"),
        (["actor_rollout_ref.rollout.calculate_log_probs=false"], "sync_period=4 needs α's log-probs from vLLM"),
        (["algorithm.rollout_correction=null"], r"sync_period=4 needs r' = π_k/α per token"),
        (["actor_rollout_ref.actor.policy_loss._target_=verl.workers.config.PolicyLossConfig",
          "~actor_rollout_ref.actor.policy_loss.rec"], "must be the plugin's"),
        (["algorithm.use_kl_in_reward=true", "algorithm.off_grpo.zero_var_mask=false"],
         r"verl's KL-in-reward reads π_k's .*use_kl_in_reward=false\)\.$"),
        (["algorithm.off_grpo.rollout_schedule=per_step", "algorithm.off_grpo.verify_served_weights=false"],
         "with algorithm.off_grpo.verify_served_weights=false that check .* one data-parallel shard a replica, or "
         "max_log_rprime_lagged=0"),
        (["algorithm.off_grpo.rollout_schedule=per_step", "actor_rollout_ref.rollout.data_parallel_size=2"],
         r"data_parallel_size=2 \(the exact check reaches the leader's shard only\) that check is the only one"),
        # in a window too: its lagged limit stays an error where the exact check misses the window's sync somewhere
        (["algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.verify_served_weights=false"],
         "with algorithm.off_grpo.verify_served_weights=false that check is the only one on them"),
        (["algorithm.off_grpo.rollout_schedule=window", "actor_rollout_ref.rollout.data_parallel_size=2"],
         r"data_parallel_size=2 \(the exact check reaches the leader's shard only\) that check is the only one"),
        # a window whose B·n samples are fewer than the engines (dynamic batch sizes: verl's own check passes)
        (["trainer.n_gpus_per_node=64", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
          "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096"],
         r"in a window whose data.train_batch_size × rollout.n samples are fewer than the vLLM engines that check is "
         r"the only one on them .*: raise the batch, or set algorithm.off_grpo.max_log_rprime_lagged=0\.$"),
        # a window whose lag-0 batch no limit checks: nothing vouches for its lagged batches (the trainer's
        # skip would never act; found by a review)
        (["algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.max_log_rprime_after_sync=0"],
         r"in a window with algorithm.off_grpo.max_log_rprime_after_sync=0 \(no lag-0 batch checked to vouch for "
         r"them\) that check is the only one on them: set max_log_rprime_after_sync > 0 \(default 0\.5\), or "
         r"max_log_rprime_lagged=0\.$"),
        (["algorithm.off_grpo.allow_truncated_rprime=true"], "set algorithm.off_grpo.allow_truncated_rprime=false"),
        (["algorithm.off_grpo.rollout_schedule=per_step", "+trainer.v1.sync.parameter_sync_step=2"],
         "parameter_sync_step=2"),
        (["+actor_rollout_ref.actor.megatron.router_replay.mode=R2"], "router_replay.mode=R2 replays"),
        (["+actor_rollout_ref.actor.veomni.router_replay.mode=R2"], r"actor\.veomni\.router_replay\.mode=R2 replays"),
        (["algorithm.off_grpo.skip_old_log_prob=false", "+actor_rollout_ref.actor.policy_loss.pi_k_from_forward=true"],
         "is set by the plugin's trainer, not by hand"),
        # at v = 1 the trainer never sets it: by hand it would take π_k from the forward on every mini-batch
        (["algorithm.off_grpo.sync_period=1", "+actor_rollout_ref.actor.policy_loss.pi_k_from_forward=true"],
         r"not by hand: .*\(it acts at sync_period > 1 only\)"),
    ],
)
def test_what_it_cannot_run_is_one_line_at_start_up(overrides, match):
    with pytest.raises(OffGRPOConfigError, match=match) as err:
        validate_as_main_ppo(compose(*GOOD, *overrides))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("extra", [(), ("trainer.use_v1=false",), ("actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
                                                                  "algorithm.adv_estimator=grpo")])
def test_at_v1_the_knob_does_nothing_and_says_so_in_one_line(extra, caplog):
    """No batch is lagged at v = 1: a recipe that sweeps v keeps the knob, whatever trainer or loss runs at v = 1."""
    with caplog.at_level(logging.INFO, logger="verl_offgrpo.config.old_log_prob_checks"):
        knobs = validate_off_grpo_config(compose(*GOOD, "algorithm.off_grpo.sync_period=1", *extra))
    assert knobs.skip_old_log_prob and not knobs.skips_lagged_old_log_prob
    lines = [r.getMessage() for r in caplog.records if r.name == "verl_offgrpo.config.old_log_prob_checks"]
    assert lines == ["off_grpo: algorithm.off_grpo.skip_old_log_prob=true does nothing at sync_period=1: no batch is "
                     "lagged, so verl's old_log_prob pass runs every step."]


def test_per_step_with_the_exact_check_or_without_the_lagged_limit_passes():
    validate_off_grpo_config(compose(*GOOD, "algorithm.off_grpo.rollout_schedule=per_step"))
    validate_off_grpo_config(compose(*GOOD, "algorithm.off_grpo.rollout_schedule=per_step",
                                     "algorithm.off_grpo.verify_served_weights=false",
                                     "algorithm.off_grpo.max_log_rprime_lagged=0"))


@pytest.mark.parametrize("period, told", [(4, True), (1, False)])
def test_the_trainer_tells_the_loss_only_where_a_batch_can_be_lagged(period, told):
    """At v = 1 no batch is lagged, so the loss is not told (a batch without r' then stays r' = 1)."""
    from verl_offgrpo.sync.trainer_v1 import prepare_v1_config

    config = compose(*GOOD, f"algorithm.off_grpo.sync_period={period}")
    prepare_v1_config(config)
    assert bool(config.actor_rollout_ref.actor.policy_loss.get("pi_k_from_forward", False)) is told


FEW_SAMPLES = ("trainer.n_gpus_per_node=64", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
               "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096")


@pytest.mark.parametrize("overrides", [
    # per_step: the exact check covers every lagged batch's wake; the window's two refusals are the window's
    ("algorithm.off_grpo.rollout_schedule=per_step", *FEW_SAMPLES),
    ("algorithm.off_grpo.rollout_schedule=per_step", "algorithm.off_grpo.max_log_rprime_after_sync=0"),
    # a window: each refusal's own way out, max_log_rprime_lagged=0, passes
    ("algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.max_log_rprime_lagged=0", *FEW_SAMPLES),
    ("algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.max_log_rprime_after_sync=0",
     "algorithm.off_grpo.max_log_rprime_lagged=0"),
])
def test_the_window_only_refusals_leave_per_step_and_their_way_out_alone(overrides):
    """A window's lag-0 batch that cannot reach every engine, or that no limit checks, refuses the knob only in a
    window and only with the lagged limit on (the fix each message names is max_log_rprime_lagged=0)."""
    assert validate_off_grpo_config(compose(*GOOD, *overrides)).skip_old_log_prob is True


def test_a_config_the_trainer_prepared_passes_its_checks_again():
    """At v > 1 the trainer sets policy_loss.pi_k_from_forward itself (not by hand): its own re-check takes it."""
    from verl_offgrpo.sync.trainer_v1 import prepare_v1_config

    config = compose(*GOOD)
    prepare_v1_config(config)
    assert config.actor_rollout_ref.actor.policy_loss.pi_k_from_forward
    assert validate_off_grpo_config(config).skips_lagged_old_log_prob


def test_one_optimizer_step_by_hand():
    """π_θ = π_k at the gradient only at one mini-batch of ppo_mini_batch_size × rollout.n rows and one epoch: 8 × 2 =
    16 rows pass, 17 do not, and neither do 16 rows at ppo_epochs = 2 (the start-up checks refuse that config; this
    is the batch-time rule that still holds if one slips through)."""
    from omegaconf import OmegaConf

    from verl_offgrpo.sync.old_log_prob_skip import one_optimizer_step

    def cfg(epochs):
        return OmegaConf.create({"actor_rollout_ref": {"actor": {"ppo_epochs": epochs, "ppo_mini_batch_size": 8},
                                                       "rollout": {"n": 2}}})

    assert one_optimizer_step(16, cfg(1)) and not one_optimizer_step(17, cfg(1))
    assert not one_optimizer_step(16, cfg(2))
