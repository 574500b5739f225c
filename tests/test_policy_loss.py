"""The off_grpo policy loss through verl's real ``losses.ppo_loss`` with a real ``ActorConfig``.

Hand-derived reference (ε = 0.2, π_k = 0.5 on every token, α = π_k / r', π_θ = r·α)::

    token  A    r'   r     window [max(r'−ε,0), r'+ε]   f = min(rA, clip(r)A)
    0     +1   1.5  2.0   [1.3, 1.7]                   1.7   (clipped high)
    1     −1   0.1  0.05  [0.0, 0.3]                  −0.05
    2     +1   1.0  0.5   [0.8, 1.2]                   0.5
    3     −1   2.0  1.0   [1.8, 2.2]                  −1.8   (clipped low)

token-mean loss = −(1.7 − 0.05 + 0.5 − 1.8)/4 = −0.0875; ∂loss/∂log π_θ = −A·r/4 where the unclipped
term is selected, 0 where the clip binds: [0, 0.0125, −0.125, 0].
"""

import math

import pytest
import torch
from tensordict import TensorDict

import verl  # noqa: F401  (loads the plugin)
import verl.utils.tensordict_utils as tu
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.workers.config import ActorConfig, PolicyLossConfig
from verl.workers.utils.losses import ppo_loss

PROMPT_LEN = 2


def actor_config(loss_mode="off_grpo", **kw):
    kw.setdefault("clip_ratio", 0.2)
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_mini_batch_size=4,
        ppo_micro_batch_size_per_gpu=4,
        policy_loss=PolicyLossConfig(loss_mode=loss_mode),
        **kw,
    )


def call_ppo_loss(config, log_prob, old_log_prob, advantages, response_mask, rollout_is_weights=None,
                  ref_log_prob=None, lengths=None):
    """Run verl's ppo_loss on a padded batch. ``log_prob`` (bs, L) is placed into the flat
    (prompt+response) model output the way verl's no-padding layout expects it."""
    bs, resp_len = log_prob.shape
    lengths = lengths or [resp_len] * bs
    pieces = []
    for i, n in enumerate(lengths):
        pieces += [torch.zeros(PROMPT_LEN - 1), log_prob[i, :n], torch.zeros(1)]
    flat = torch.cat(pieces)
    attention_mask = torch.zeros(bs, PROMPT_LEN + resp_len, dtype=torch.int64)
    for i, n in enumerate(lengths):
        attention_mask[i, : PROMPT_LEN + n] = 1
    fields = {
        "prompts": torch.ones(bs, PROMPT_LEN, dtype=torch.int64),
        "responses": torch.ones(bs, resp_len, dtype=torch.int64),
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "old_log_probs": old_log_prob,
        "advantages": advantages,
    }
    if rollout_is_weights is not None:
        fields["rollout_is_weights"] = rollout_is_weights
    if ref_log_prob is not None:
        fields["ref_log_prob"] = ref_log_prob
    data = TensorDict(fields, batch_size=bs)
    tu.assign_non_tensor_data(data, "dp_size", 1)
    tu.assign_non_tensor_data(data, "batch_num_tokens", int(response_mask.sum()))
    tu.assign_non_tensor_data(data, "global_batch_size", bs)
    loss, metrics = ppo_loss(config, {"log_probs": flat}, data)
    return loss, metrics


def metric_value(metrics, key):
    """A metric as verl reports it: ppo_loss wraps values in verl's ``Metric`` aggregator."""
    value = metrics[key]
    if hasattr(value, "aggregate"):
        value = value.aggregate()
    return float(value.item() if torch.is_tensor(value) else value)


def reference_batch():
    A = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]])
    rprime = torch.tensor([[1.5], [0.1], [1.0], [2.0]])
    r = torch.tensor([[2.0], [0.05], [0.5], [1.0]])
    pi_k = torch.full((4, 1), 0.5)
    log_prob = torch.log(r * pi_k / rprime).requires_grad_(True)
    return log_prob, torch.log(pi_k), A, torch.ones(4, 1, dtype=torch.int64), rprime


def test_hand_derived_loss_gradient_and_metrics():
    log_prob, old, A, mask, rprime = reference_batch()
    loss, metrics = call_ppo_loss(actor_config(), log_prob, old, A, mask, rollout_is_weights=rprime)
    torch.testing.assert_close(loss, torch.tensor(-0.0875))
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0], [0.0125], [-0.125], [0.0]]))
    assert metric_value(metrics, "actor/off_grpo/clipfrac_high") == pytest.approx(0.25)
    assert metric_value(metrics, "actor/off_grpo/clipfrac_low") == pytest.approx(0.25)
    assert metric_value(metrics, "actor/pg_clipfrac") == pytest.approx(0.5)
    assert "actor/pg_clipfrac_lower" not in metrics  # verl's dual-clip fraction: the off_grpo loss has no dual clip
    # verl's ppo_kl: mean of log π_k − log π_θ = −log(r/r') per token
    expected_kl = -(math.log(2.0 / 1.5) + math.log(0.05 / 0.1) + math.log(0.5 / 1.0) + math.log(1.0 / 2.0)) / 4
    assert metric_value(metrics, "actor/ppo_kl") == pytest.approx(expected_kl, rel=1e-5)
    assert metric_value(metrics, "actor/off_grpo/rprime_mean") == pytest.approx((1.5 + 0.1 + 1.0 + 2.0) / 4)
    assert metric_value(metrics, "actor/off_grpo/rprime_max") == pytest.approx(2.0)
    expected_abs_log = (math.log(1.5) + abs(math.log(0.1)) + 0 + math.log(2.0)) / 4
    assert metric_value(metrics, "actor/off_grpo/mean_abs_log_rprime") == pytest.approx(expected_abs_log, rel=1e-5)
    assert metric_value(metrics, "actor/off_grpo/masked_seq_frac") == 0.0


def test_asymmetric_clip_uses_low_and_high():
    # token 0 of the reference: r=2.0, r'=1.5, A=+1; ε_high=0.6 -> window top 2.1 > r: unclipped, f=2.0
    # token 3: r=1.0, r'=2.0, A=-1; ε_low=1.5 -> window bottom 0.5 < r: unclipped, f=-1.0
    log_prob, old, A, mask, rprime = reference_batch()
    cfg = actor_config(clip_ratio_low=1.5, clip_ratio_high=0.6)
    loss, metrics = call_ppo_loss(cfg, log_prob, old, A, mask, rollout_is_weights=rprime)
    torch.testing.assert_close(loss, torch.tensor(-(2.0 - 0.05 + 0.5 - 1.0) / 4))
    assert metric_value(metrics, "actor/pg_clipfrac") == 0.0


def random_batch(seed, bs=6, resp_len=5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(bs, resp_len, generator=g) * 3
    log_prob = (old + 0.4 * torch.randn(bs, resp_len, generator=g)).requires_grad_(True)
    A = torch.randn(bs, 1, generator=g).expand(bs, resp_len).contiguous()
    mask = torch.ones(bs, resp_len, dtype=torch.int64)
    mask[0, 3:] = 0
    mask[2, 1:] = 0
    return log_prob, old, A * mask, mask


@pytest.mark.parametrize("weights", ["none", "ones"])
def test_rprime_one_reduces_to_on_policy_grpo(weights):
    """r' = 1 (no rollout log-probs, or α = π_k) gives verl's PPO/GRPO clipped surrogate exactly
    (dual clip off: clip_ratio_c huge), loss and gradient."""
    log_prob, old, A, mask = random_batch(0)
    rprime = None if weights == "none" else torch.ones_like(old) * mask
    ours, _ = call_ppo_loss(actor_config(), log_prob, old, A, mask, rollout_is_weights=rprime)
    (g_ours,) = torch.autograd.grad(ours, log_prob)
    log_prob2 = log_prob.detach().clone().requires_grad_(True)
    theirs, _ = call_ppo_loss(actor_config("vanilla", clip_ratio_c=1e9), log_prob2, old, A, mask)
    (g_theirs,) = torch.autograd.grad(theirs, log_prob2)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(g_ours, g_theirs)


def test_loss_equals_formula_on_random_batch_all_agg_modes():
    log_prob, old, A, mask = random_batch(1)
    g = torch.Generator().manual_seed(7)
    rprime = torch.exp(0.5 * torch.randn(old.shape, generator=g)) * mask
    eps = 0.2
    r = torch.exp(log_prob.detach() - old) * torch.where(mask.bool(), rprime, torch.ones_like(rprime))
    rp = torch.where(mask.bool(), rprime, torch.ones_like(rprime))
    f = torch.minimum(r * A, torch.maximum(torch.minimum(r, rp + eps), (rp - eps).clamp(min=0)) * A)
    m = mask.float()
    expected = {
        "token-mean": -(f * m).sum() / m.sum(),
        "seq-mean-token-sum": -((f * m).sum(-1)).mean(),
        "seq-mean-token-mean": -((f * m).sum(-1) / m.sum(-1)).mean(),
    }
    for mode, value in expected.items():
        loss, _ = call_ppo_loss(actor_config(loss_agg_mode=mode), log_prob, old, A, mask, rollout_is_weights=rprime)
        torch.testing.assert_close(loss, value, msg=mode)


def test_extreme_ratios_give_finite_loss_and_gradient():
    log_prob = torch.tensor([[200.0, -200.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-100.0, 100.0, -1.0]])
    A = torch.tensor([[1.0, -1.0, 1.0]])
    rprime = torch.tensor([[1e30, 1e-30, 0.0]])  # includes r' = 0 on a valid token
    mask = torch.ones(1, 3, dtype=torch.int64)
    loss, metrics = call_ppo_loss(actor_config(), log_prob, old, A, mask, rollout_is_weights=rprime)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(log_prob.grad).all()
    assert math.isfinite(metric_value(metrics, "actor/off_grpo/mean_abs_log_rprime"))


@pytest.mark.parametrize(
    "log_ratio_to_k, log_rprime, expected_log_r",
    [
        (30.0, -15.0, 5.0),  # log π_θ − log π_k is clamped to 20 first: log r = 20 − 15
        (15.0, 10.0, 20.0),  # then log r itself: 15 + 10 = 25 -> 20
    ],
)
def test_log_ratios_are_clamped_where_the_docstring_says(log_ratio_to_k, log_rprime, expected_log_r):
    """log r = clamp(clamp(log π_θ − log π_k, ±20) + log r', ±20). With A = −1 and r far above the window
    the unclipped term r·A is selected, so the loss is r itself: e^5 and e^20 (not e^15 and e^25)."""
    old = torch.tensor([[-40.0]])
    log_prob = (old + log_ratio_to_k).requires_grad_(True)
    rprime = torch.tensor([[math.exp(log_rprime)]])
    loss, _ = call_ppo_loss(actor_config(), log_prob, old, torch.tensor([[-1.0]]), torch.ones(1, 1, dtype=torch.int64),
                            rollout_is_weights=rprime)  # fmt: skip
    assert loss.item() == pytest.approx(math.exp(expected_log_r), rel=1e-4)


def test_kl_and_denominator_exclude_masked_rows():
    """Rows with an all-zero response_mask (zero-variance groups) leave the pg denominator and the KL."""
    log_prob, old, A, mask = random_batch(2, bs=4, resp_len=3)
    mask = torch.ones(4, 3, dtype=torch.int64)
    ref = old - 0.3
    cfg = actor_config(use_kl_loss=True, kl_loss_coef=0.5, kl_loss_type="low_var_kl")
    masked = mask.clone()
    masked[2:] = 0
    A_masked = A * masked
    loss_full, m_full = call_ppo_loss(cfg, log_prob, old, A_masked, mask, ref_log_prob=ref)
    loss_masked, m_masked = call_ppo_loss(cfg, log_prob, old, A_masked, masked, ref_log_prob=ref)
    # pg part: same numerator (A = 0 on the masked rows), denominator 6 instead of 12 tokens
    pg_full, pg_masked = metric_value(m_full, "actor/pg_loss"), metric_value(m_masked, "actor/pg_loss")
    assert pg_masked == pytest.approx(2 * pg_full, rel=1e-5)
    # KL: mean over the 6 kept tokens only
    from verl.trainer.ppo.core_algos import kl_penalty

    kl = kl_penalty(log_prob.detach(), ref, "low_var_kl")
    assert metric_value(m_masked, "kl_loss") == pytest.approx(kl[:2].mean().item(), rel=1e-5)
    assert metric_value(m_masked, "actor/off_grpo/masked_seq_frac") == 0.5


def test_the_estimators_zero_variance_mask_reaches_the_loss_denominator_and_the_kl():
    """The mask as the estimator leaves it, end to end: verl's ``compute_advantage`` (off_grpo, mask on)
    on rewards (0, 2 | 1, 1), then verl's ``ppo_loss`` on its advantages and response_mask.

    Group a: mean 1, unbiased std² 2, ε = 2 → A = ∓1/2; group z is zero-variance and leaves.
    Row 1 has r = π_θ/π_k = 1.1 (r' = 1, inside [0.8, 1.2]): f = 1.1·½ = 0.55 a token; row 0 r = 1, f = −½.
    pg_loss = −(3·0.55 − 3·0.5)/6 = −0.025 (over the 12 tokens it would be −0.0125).
    KL (low_var_kl, ref = π_k − 0.3): e^{−d} + d − 1 with d = log π_θ − log π_ref, d = 0.3 on row 0 and
    0.3 + log 1.1 on row 1; the mean over group a's 6 tokens only."""
    from test_advantage import algo_config, make_batch, run

    out = run(make_batch([0, 2, 1, 1], ["a", "a", "z", "z"]), algo_config(zero_var_mask=True, std_eps=2.0))
    A, mask = out.batch["advantages"], out.batch["response_mask"]
    resp_len = mask.shape[1]
    old = torch.full((4, resp_len), -1.0)
    log_prob = old.clone()
    log_prob[1] += math.log(1.1)
    log_prob.requires_grad_(True)
    cfg = actor_config(use_kl_loss=True, kl_loss_coef=0.5, kl_loss_type="low_var_kl")
    _, metrics = call_ppo_loss(cfg, log_prob, old, A, mask, ref_log_prob=old - 0.3)
    assert metric_value(metrics, "actor/pg_loss") == pytest.approx(-0.025, rel=1e-5)
    d0, d1 = 0.3, 0.3 + math.log(1.1)
    kl = (math.exp(-d0) + d0 - 1 + math.exp(-d1) + d1 - 1) / 2
    assert metric_value(metrics, "kl_loss") == pytest.approx(kl, rel=1e-5)
    assert metric_value(metrics, "actor/off_grpo/masked_seq_frac") == 0.5


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_seq_mean_modes_keep_masked_rows_in_verls_fixed_denominator(mode):
    """Why validation rejects zero_var_mask with the seq-mean modes: verl's trainer passes
    global_batch_size = the mini-batch's row count, masked rows included, so masking two of four rows
    halves the kept rows' loss instead of removing the masked ones (token-mean: the previous test). If
    verl ever counts only rows with tokens, this fails and the start-up check can go."""
    log_prob, old, A, _ = random_batch(2, bs=4, resp_len=3)
    masked = torch.ones(4, 3, dtype=torch.int64)
    masked[2:] = 0
    cfg = actor_config(loss_agg_mode=mode)
    loss_masked, _ = call_ppo_loss(cfg, log_prob, old, A * masked, masked)  # global_batch_size 4, as verl passes
    loss_removed, _ = call_ppo_loss(cfg, log_prob[:2], old[:2], A[:2], masked[:2])  # the masked rows gone
    assert loss_removed.abs().item() > 1e-3
    torch.testing.assert_close(loss_masked, 0.5 * loss_removed)


def test_a_mini_batch_with_every_row_masked_gives_zero_loss_not_nan():
    """All groups zero-variance under the mask: verl's engine counts 0 tokens in the mini-batch, and
    0/0 made actor/pg_loss NaN. The loss, the KL term and the gradient are exactly 0 instead."""
    log_prob, old, _, _ = random_batch(3, bs=3, resp_len=3)
    none = torch.zeros(3, 3, dtype=torch.int64)
    cfg = actor_config(use_kl_loss=True, kl_loss_coef=0.5, kl_loss_type="low_var_kl")
    loss, metrics = call_ppo_loss(cfg, log_prob, old, torch.zeros(3, 3), none, ref_log_prob=old - 0.3)
    (grad,) = torch.autograd.grad(loss, log_prob)
    assert loss.item() == 0.0 and metric_value(metrics, "actor/pg_loss") == 0.0 and metric_value(metrics, "kl_loss") == 0.0
    assert torch.equal(grad, torch.zeros_like(grad))


def test_a_micro_batch_without_a_loss_token_logs_neutral_metrics():
    """Every row masked (r' = 2 on all of them): nothing is measured, so each loss metric is its neutral value,
    r' mean and max 1 (no lag), not a mean of nothing read as 0; verl averages micro-batches with equal weight,
    so a 0 would read as a policy far off α. The bound monitor's r' terms are 0 with a weight
    (``rprime_terms_frac``) of 0, so a reader can divide the dilution out."""
    log_prob, old, _, _ = random_batch(7, bs=3, resp_len=3)
    none = torch.zeros(3, 3, dtype=torch.int64)
    rprime = torch.full((3, 3), 2.0)
    _, metrics = call_ppo_loss(actor_config(), log_prob, old, torch.zeros(3, 3), none, rollout_is_weights=rprime)
    expected = {"actor/off_grpo/rprime_mean": 1.0, "actor/off_grpo/rprime_max": 1.0,
                "actor/off_grpo/clipfrac_high": 0.0,
                "actor/off_grpo/clipfrac_low": 0.0, "actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0,
                "actor/off_grpo/masked_seq_frac": 1.0}  # fmt: skip
    assert {key: metric_value(metrics, key) for key in expected} == expected
    terms = ("actor/off_grpo/mean_abs_log_rprime", "actor/off_grpo/tv_token", "actor/off_grpo/tv_seq", "actor/off_grpo/rprime_terms_frac")
    assert [metric_value(metrics, key) for key in terms] == [0.0] * 4
    # one row back in the loss: its own r' again
    some = none.clone()
    some[0] = 1
    _, metrics = call_ppo_loss(actor_config(), log_prob, old, torch.zeros(3, 3), some, rollout_is_weights=rprime)
    assert metric_value(metrics, "actor/off_grpo/rprime_mean") == pytest.approx(2.0)
    assert metric_value(metrics, "actor/off_grpo/mean_abs_log_rprime") == pytest.approx(math.log(2.0))
    assert metric_value(metrics, "actor/off_grpo/rprime_terms_frac") == 1.0


def test_verls_vanilla_loss_is_nan_on_a_mini_batch_with_every_row_masked():
    """Why validation warns when the mask is used with another loss (test_config): verl's own loss computes
    0/0 on such a mini-batch, so the logged actor/pg_loss is NaN; its gradient is 0 (masked_sum selects the
    masked tokens away), as the off_grpo loss's is."""
    log_prob, old, _, _ = random_batch(3, bs=3, resp_len=3)
    none = torch.zeros(3, 3, dtype=torch.int64)
    loss, metrics = call_ppo_loss(actor_config(loss_mode="vanilla"), log_prob, old, torch.zeros(3, 3), none)
    (grad,) = torch.autograd.grad(loss, log_prob)
    assert math.isnan(loss.item()) and math.isnan(metric_value(metrics, "actor/pg_loss"))
    assert torch.equal(grad, torch.zeros_like(grad))


def test_sequence_metrics_count_rows_with_some_tokens_and_ignore_padding():
    """masked_seq_frac counts rows with no loss token at all (partly padded rows are in the loss), and
    rprime_max reads only loss tokens (a huge r' on padding is not the batch's)."""
    log_prob, old, A, mask = random_batch(5, bs=3, resp_len=4)  # rows 0 and 2 partly padded
    mask[1] = 0  # row 1 left the loss
    rprime = torch.ones(3, 4)
    rprime[2, 3] = 50.0  # on a padded token of row 2
    rprime[0, 1] = 1.5
    _, metrics = call_ppo_loss(actor_config(), log_prob, old, A * mask, mask, rollout_is_weights=rprime)
    assert metric_value(metrics, "actor/off_grpo/masked_seq_frac") == pytest.approx(1 / 3)
    assert metric_value(metrics, "actor/off_grpo/rprime_max") == pytest.approx(1.5)


def test_padding_values_never_reach_the_metrics():
    """NaN in old_log_prob on padded positions: verl's loss ignores them, and so do the plugin's metrics
    (actor/ppo_kl was NaN when padding was multiplied by a 0 mask instead of selected away)."""
    log_prob, old, A, mask = random_batch(4, bs=3, resp_len=4)
    clean, clean_metrics = call_ppo_loss(actor_config(), log_prob, old, A, mask)
    padded_nan = torch.where(mask.bool(), old, torch.full_like(old, float("nan")))
    loss, metrics = call_ppo_loss(actor_config(), log_prob, padded_nan, A, mask)
    torch.testing.assert_close(loss, clean)
    for name in ("actor/ppo_kl", "actor/pg_clipfrac", "actor/off_grpo/mean_abs_log_rprime"):
        assert metric_value(metrics, name) == pytest.approx(metric_value(clean_metrics, name)), name


def test_without_the_actor_config_it_refuses():
    from verl_offgrpo.policy_loss import compute_policy_loss_off_grpo

    log_prob, old, A, mask = random_batch(1, bs=3, resp_len=2)
    with pytest.raises(ValueError, match="needs the actor config"):
        compute_policy_loss_off_grpo(old, log_prob, A, mask, config=None)


def test_registered_under_off_grpo():
    from verl_offgrpo.policy_loss import compute_policy_loss_off_grpo

    assert get_policy_loss_fn("off_grpo") is compute_policy_loss_off_grpo


def test_skipped_optimizer_step_frac_is_the_fraction_of_mini_batches_the_engine_skipped(monkeypatch):
    """``actor/off_grpo/skipped_optimizer_step_frac`` is 1 on each micro-batch of a mini-batch without a
    loss token while verl's ``BaseEngine.train_batch`` carries the plugin's skip (verl_offgrpo.patches.empty_update),
    0 otherwise. Aggregated as verl does (a rank's micro-batches with ``append_to_dict``, the data-parallel
    ranks with ``Metric.aggregate_dp``, the step's mini-batches by ``reduce_metrics``), a step with one of
    two mini-batches empty logs 0.5: the key has no "min"/"max" that would make verl take an extreme
    instead of the mean. Without the wrap an empty mini-batch does take a step, and the metric says 0."""
    from verl.utils.metric import Metric, reduce_metrics
    from verl.utils.py_functional import append_to_dict
    from verl.workers.engine.base import BaseEngine

    from verl_offgrpo.patches.empty_update import is_wrapped

    key = "actor/off_grpo/skipped_optimizer_step_frac"
    assert is_wrapped(BaseEngine)  # the plugin's import hook wrapped its train_batch on import
    log_prob, old, A, mask = random_batch(4, bs=3, resp_len=3)
    none = torch.zeros(3, 3, dtype=torch.int64)
    _, empty = call_ppo_loss(actor_config(), log_prob, old, torch.zeros(3, 3), none)
    _, kept = call_ppo_loss(actor_config(), log_prob, old, A * mask, mask)
    assert metric_value(empty, key) == 1.0 and metric_value(kept, key) == 0.0

    def one_rank(micro_batches):  # verl's engine: one rank's micro-batch metrics, appended
        merged = {}
        for metrics in micro_batches:
            append_to_dict(merged, {key: metrics[key]})
        return merged[key]

    step = {}
    for micro_batches in ([empty, empty], [kept, kept]):  # two mini-batches, two micro-batches each
        ranks = [one_rank(micro_batches), one_rank(micro_batches)]  # two DP ranks: the same all-reduced count
        append_to_dict(step, {key: Metric.aggregate_dp(ranks)})
    assert reduce_metrics(step)[key] == pytest.approx(0.5)

    monkeypatch.setattr(BaseEngine, "train_batch", BaseEngine.train_batch.__wrapped__)  # verl's own, unwrapped
    _, unwrapped = call_ppo_loss(actor_config(), log_prob, old, torch.zeros(3, 3), none)
    assert metric_value(unwrapped, key) == 0.0


@pytest.mark.parametrize("loss_mode", ["off_grpo", "rec"])
def test_ranks_with_unequal_empty_micro_batches_aggregate_and_the_guard_reads_the_kept_ones(loss_mode):
    """Two data-parallel ranks with two micro-batches each; rank 0's first has no loss token (a zero-variance
    group), the other three have r' = 2, 1/2 and 1 on every token. verl's engine appends each rank's
    micro-batch metrics and then calls ``Metric.aggregate_dp``, which raises unless every rank logged each key
    equally often, so the losses log every key on every micro-batch. The step's r' terms as the guard reads
    them on a skipped batch (term / rprime_terms_frac) are the means over the three kept micro-batches:
    |log r'| (ln 2 + ln 2 + 0)/3, tv_token ½·(1 + ½ + 0)/3 = 0.25; verl's plain mean would say ln 2 / 2."""
    from verl.utils.metric import Metric
    from verl.utils.py_functional import append_to_dict

    from verl_offgrpo.sync.old_log_prob_skip import rprime_terms_after_update

    log_prob, old, A, _ = random_batch(5, bs=3, resp_len=3)
    log_prob, old, A = log_prob[:2], old[:2], A[:2]
    mask = torch.ones(2, 3, dtype=torch.int64)

    def micro_batch(rprime, kept=True):
        m = mask if kept else torch.zeros_like(mask)
        return call_ppo_loss(actor_config(loss_mode), log_prob, old, A * m, m,
                             rollout_is_weights=torch.full((2, 3), rprime))[1]  # fmt: skip

    ranks = [[micro_batch(2.0, kept=False), micro_batch(2.0)], [micro_batch(0.5), micro_batch(1.0)]]
    keys = set(ranks[0][0])
    assert all(set(m) == keys for rank in ranks for m in rank)  # every key on every micro-batch
    per_rank = []
    for rank in ranks:
        merged = {}
        for metrics in rank:
            append_to_dict(merged, metrics)
        per_rank.append(merged)
    step = {key: Metric.aggregate_dp([r[key] for r in per_rank]) for key in keys if isinstance(per_rank[0][key], Metric)}
    assert step["actor/off_grpo/mean_abs_log_rprime"] == pytest.approx(math.log(2.0) / 2)
    assert step["actor/off_grpo/rprime_terms_frac"] == pytest.approx(0.75)
    terms = rprime_terms_after_update(step)
    assert terms["off_grpo/bound/mean_abs_log_rprime"] == pytest.approx(2 * math.log(2.0) / 3)
    assert terms["off_grpo/bound/tv_token"] == pytest.approx(0.25)
    assert terms["off_grpo/bound/tv_seq"] == pytest.approx(0.5 * ((8 - 1) + (1 - 0.125) + 0) / 3)
    # no micro-batch with a loss token: nothing measured, nothing for the guard
    assert rprime_terms_after_update({**step, "actor/off_grpo/rprime_terms_frac": 0.0}) == {}


def test_a_token_with_zero_advantage_is_never_counted_as_clipped_high():
    """clipfrac_high counts tokens whose A > 0 and r above r' + ε (the clip binds there); a token with A = 0 above the
    window takes no clipped gradient. Two tokens, π_k = 0.5, r' = 1, ε = 0.2: r = 2.0 with A = 0, r = 1.0 with A = 1:
    neither is clipped high."""
    r, pi_k = torch.tensor([[2.0, 1.0]]), torch.full((1, 2), 0.5)
    _, metrics = call_ppo_loss(actor_config(), torch.log(r * pi_k).requires_grad_(True), torch.log(pi_k),
                               torch.tensor([[0.0, 1.0]]), torch.ones(1, 2, dtype=torch.int64),
                               rollout_is_weights=torch.ones(1, 2))
    assert metric_value(metrics, "actor/off_grpo/clipfrac_high") == 0.0
