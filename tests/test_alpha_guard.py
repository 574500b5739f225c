"""The served-policy guard: stop a batch whose mean |log r'| neither the engine floor (lag 0) nor a lag explains."""

import pytest

from verl_offgrpo.config import OffGRPOConfig
from verl_offgrpo.sync.alpha_guard import SEQ_STATISTIC, STATISTIC, ServedPolicyError, check_served_policy


def test_raises_only_on_a_lag0_batch_above_the_limit():
    garbage, floor, lagged = {STATISTIC: 9.2}, {STATISTIC: 0.055}, {STATISTIC: 0.3}
    with pytest.raises(ServedPolicyError, match="step 3.*9.2"):
        check_served_policy(garbage, rollout_lag=0, limit=1.0, step=3)
    check_served_policy(floor, rollout_lag=0, limit=1.0)  # the bf16 engine floor
    check_served_policy(garbage, rollout_lag=2, limit=1.0)  # lagged batches: only by their own limit
    check_served_policy(garbage, rollout_lag=None, limit=1.0)  # before the first sync
    check_served_policy(garbage, rollout_lag=0, limit=0.0)  # guard off
    check_served_policy({}, rollout_lag=0, limit=1.0)  # no r': α = π_k, nothing to check
    check_served_policy({STATISTIC: 1.0}, rollout_lag=0, limit=1.0)  # the limit itself passes
    check_served_policy(lagged, rollout_lag=0, limit=1.0)


def test_default_lagged_limit_separates_the_measured_cases():
    """The shipped default sits between what was measured on GPUs: honest lagged batches (at most 0.25 per
    token at lag 9 for SmolLM2-135M, 0.30 at lag 3 for a tiny random model at a high learning rate) pass,
    and SmolLM2 sampled from weights discarded by a level-2 sleep (3.77 per token) stops the run."""
    default = OffGRPOConfig().max_log_rprime_lagged
    check_served_policy({STATISTIC: 0.30}, rollout_lag=3, limit=1.0, lagged_limit=default)
    with pytest.raises(ServedPolicyError, match=r"step 2: .*rollout lag 1"):
        check_served_policy({STATISTIC: 3.77}, rollout_lag=1, limit=1.0, step=2, lagged_limit=default)


def test_default_after_sync_limit_separates_the_measured_cases():
    """The shipped lag-0 default sits between what was measured on GPUs: a correct engine's numerics (0.0011
    per token for SmolLM2-135M, 0.020-0.021 for the 1.5B shape, 0.055 for a bf16 engine) pass, and a vLLM
    that loaded a neighbouring job's weights (two 1.5B random inits on one host: 0.99 per token) stops the run."""
    default = OffGRPOConfig().max_log_rprime_after_sync
    for honest in (0.0011, 0.021, 0.055):
        check_served_policy({STATISTIC: honest}, rollout_lag=0, limit=default)
    with pytest.raises(ServedPolicyError, match=r"step 1: .*right after a weight sync.*0\.99 .*after_sync=0\.5"):
        check_served_policy({STATISTIC: 0.99}, rollout_lag=0, limit=default, step=1)


def test_one_response_over_its_limit_stops_a_lag_0_batch_only():
    """max_seq_log_rprime_after_sync on the largest response's mean, at lag 0: on its own (the batch's limit off),
    NaN included; not on lagged batches (a lag's drift); 0 turns it off; the batch's message comes first."""
    one_far = {STATISTIC: 0.05, SEQ_STATISTIC: 1.5}
    with pytest.raises(ServedPolicyError, match=r"step 4: .*one response's mean .* 1\.5 .*batch's is 0\.05"):
        check_served_policy(one_far, rollout_lag=0, limit=0.5, step=4, seq_limit=1.0)
    with pytest.raises(ServedPolicyError, match="one response's mean"):
        check_served_policy(one_far, rollout_lag=0, limit=0.0, seq_limit=1.0)  # the batch's limit off
    with pytest.raises(ServedPolicyError, match=r"one response's mean .* nan"):
        check_served_policy({STATISTIC: float("nan"), SEQ_STATISTIC: float("nan")}, rollout_lag=0, limit=0.0,
                            seq_limit=1.0)
    check_served_policy(one_far, rollout_lag=0, limit=0.5, seq_limit=0.0)  # off
    check_served_policy(one_far, rollout_lag=0, limit=0.5, seq_limit=1.5)  # the limit itself passes
    check_served_policy(one_far, rollout_lag=2, limit=0.5, lagged_limit=1.5, seq_limit=1.0)  # lagged: not checked
    check_served_policy({STATISTIC: 0.05}, rollout_lag=0, limit=0.5, seq_limit=1.0)  # no per-response statistic
    with pytest.raises(ServedPolicyError, match=r"mean \|log π_k/α\| per token is 0\.9 "):  # the batch's first
        check_served_policy({STATISTIC: 0.9, SEQ_STATISTIC: 3.0}, rollout_lag=0, limit=0.5, seq_limit=1.0)


def test_lagged_batches_have_their_own_looser_limit():
    """A batch sampled after a skipped slot (lag >= 1) is where lost weights show (~9-11 per token); a
    real lag gives 0.1-0.5: a lagged limit of 5.0 stops the first and passes the second."""
    garbage, lagged = {STATISTIC: 9.2}, {STATISTIC: 0.3}
    with pytest.raises(ServedPolicyError, match=r"step 7: .*rollout lag 3.* 9\.2 .*max_log_rprime_lagged=5\.0"):
        check_served_policy(garbage, rollout_lag=3, limit=1.0, step=7, lagged_limit=5.0)
    check_served_policy(lagged, rollout_lag=9, limit=1.0, lagged_limit=5.0)  # a real lag, above the lag-0 limit
    check_served_policy({STATISTIC: 5.0}, rollout_lag=1, limit=1.0, lagged_limit=5.0)  # the limit itself passes
    check_served_policy(garbage, rollout_lag=3, limit=1.0, lagged_limit=0.0)  # off
    check_served_policy(garbage, rollout_lag=None, limit=1.0, lagged_limit=5.0)  # before the first sync


def test_a_nan_statistic_stops_the_run_at_any_lag():
    """NaN log-probs from the engine make r' and its mean NaN; every comparison with NaN is False, so a
    check written as `limit < value` would let the batch into the loss. Both limits stop it."""
    nan = {STATISTIC: float("nan")}
    with pytest.raises(ServedPolicyError, match="rollout lag 2"):
        check_served_policy(nan, rollout_lag=2, limit=1.0, step=4, lagged_limit=5.0)
    with pytest.raises(ServedPolicyError, match="right after a weight sync"):
        check_served_policy(nan, rollout_lag=0, limit=1.0, step=4, lagged_limit=5.0)
    check_served_policy(nan, rollout_lag=2, limit=1.0, lagged_limit=0.0)  # a limit of 0 is still off


def test_bound_monitor_reports_the_guard_statistic():
    import math

    import torch

    from verl_offgrpo.bound_monitor import tv_estimates

    rprime = torch.tensor([[math.exp(0.5), math.exp(-1.0), 7.0]])
    mask = torch.tensor([[1, 1, 0]])
    assert tv_estimates(rprime, mask)[STATISTIC] == pytest.approx(0.75)  # (0.5 + 1) / 2, padding ignored


def test_with_the_exact_weight_check_the_lagged_limit_is_a_monitor(caplog):
    """lagged_is_error=False (the served-weights check is on): a lagged batch above the limit warns and logs
    off_grpo/guard/lagged_over_limit = 1, one within it 0; the lag-0 limit and NaN still stop the run."""
    import logging

    from verl_offgrpo.sync import alpha_guard
    from verl_offgrpo.sync.alpha_guard import LAGGED_OVER_LIMIT

    kwargs = dict(limit=1.0, lagged_limit=5.0, lagged_is_error=False)
    with caplog.at_level(logging.WARNING, logger=alpha_guard.__name__):
        assert check_served_policy({STATISTIC: 9.2}, rollout_lag=3, step=7, **kwargs) == {LAGGED_OVER_LIMIT: 1.0}
    (record,) = caplog.records
    assert record.getMessage().startswith("verl-offgrpo: step 7: lagged batch (rollout lag 3) with mean |log")
    assert check_served_policy({STATISTIC: 0.3}, rollout_lag=3, **kwargs) == {LAGGED_OVER_LIMIT: 0.0}
    assert check_served_policy({STATISTIC: 0.3}, rollout_lag=0, **kwargs) == {}  # lag 0: checked, nothing to log
    with pytest.raises(ServedPolicyError, match="right after a weight sync"):
        check_served_policy({STATISTIC: 9.2}, rollout_lag=0, **kwargs)
    with pytest.raises(ServedPolicyError, match="rollout lag 2"):
        check_served_policy({STATISTIC: float("nan")}, rollout_lag=2, **kwargs)
    assert check_served_policy({STATISTIC: 9.2}, rollout_lag=3, limit=1.0, lagged_limit=0.0, lagged_is_error=False) == {}


@pytest.mark.parametrize("off, period, warned", [
    (("max_log_rprime_after_sync=0", "max_seq_log_rprime_after_sync=0"), 1, True),
    (("max_log_rprime_after_sync=0",), 1, False),  # the per-response limit still guards lag 0
    (("max_log_rprime_after_sync=0", "max_seq_log_rprime_after_sync=0"), 4, False),  # lagged limit, exact check on
    (("max_log_rprime_after_sync=0", "max_seq_log_rprime_after_sync=0", "max_log_rprime_lagged=0",
      "verify_served_weights=false"), 4, True),
    (("max_log_rprime_after_sync=0", "max_seq_log_rprime_after_sync=0", "max_log_rprime_lagged=0"), 4, False),
    (("max_log_rprime_after_sync=0", "max_seq_log_rprime_after_sync=0"), 2, False),  # v = 2 has lagged batches too
    (("max_log_rprime_after_sync=0", "max_seq_log_rprime_after_sync=0", "max_log_rprime_lagged=0",
      "verify_served_weights=false"), 2, True),
])
def test_start_up_says_once_when_every_served_policy_check_is_off(caplog, off, period, warned):
    """Each check is off by its own knob, none refused; with all that apply off (at v > 1 the lagged limit and the
    exact check too), one warning at start-up names them (a newcomer's trial: nothing said so)."""
    import logging

    from _overrides import shipped_config

    from verl_offgrpo.config import validate_off_grpo_config

    cfg = shipped_config(f"algorithm.off_grpo.sync_period={period}", *(f"algorithm.off_grpo.{o}" for o in off))
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate_off_grpo_config(cfg)
    said = [r.getMessage() for r in caplog.records if "every served-policy check is off" in r.getMessage()]
    assert said == ([f"off_grpo: every served-policy check is off (algorithm.off_grpo.{', '.join(off)}): nothing stops "
                     "a run whose vLLM serves weights other than α."] if warned else [])
