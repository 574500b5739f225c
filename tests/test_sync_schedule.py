"""The pure lag schedule (verl_offgrpo/sync/schedule.py): which slots sync, lag bookkeeping, resume."""

import pytest

from verl_offgrpo.sync.schedule import validation_follows
from verl_offgrpo.sync.schedule import CAP, FIRST, FORCED, PERIOD, REPEAT, SKIP, SyncSchedule, simulate


def synced_steps(decisions):
    return [d.step for d in decisions if d.sync]


@pytest.mark.parametrize(
    "period, expected",
    [
        (1, list(range(0, 21))),
        (4, [0, 4, 8, 12, 16, 20]),
        (10, [0, 10, 20]),
    ],
)
def test_which_steps_sync_fresh_run(period, expected):
    decisions = simulate(period, range(1, 21))
    assert synced_steps(decisions) == expected
    assert decisions[0].reason == FIRST and decisions[0].sync


def test_period_one_is_on_policy():
    decisions = simulate(1, range(1, 13))
    assert all(d.sync for d in decisions)
    assert all(d.lag == 0 for d in decisions)
    assert [d.rollout_lag for d in decisions[1:]] == [0] * 12


def test_lag_values_period_4():
    decisions = simulate(4, range(1, 13))
    by_step = {d.step: d for d in decisions}
    # after the slot of step s: s - s_w (0 right after a sync)
    assert [by_step[s].lag for s in range(1, 13)] == [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0]
    # the batch trained in step s was sampled from π_{s_w before the slot}; trainer was at π_{s-1}
    assert [by_step[s].rollout_lag for s in range(1, 13)] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    assert [by_step[s].version_after for s in range(1, 13)] == [0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12]
    assert decisions[0].rollout_lag is None
    assert max(d.lag for d in decisions) == 3 and max(d.rollout_lag or 0 for d in decisions) == 3


def test_lag_never_exceeds_period_minus_one():
    for period in (2, 3, 4, 7, 10):
        for start in (0, 3, 5, 11):
            decisions = simulate(period, range(start + 1, start + 40), start=start)
            assert max(d.lag for d in decisions) <= period - 1
            assert max(d.rollout_lag or 0 for d in decisions) <= period - 1


def test_resume_mid_period_syncs_first_and_keeps_phase():
    # an uninterrupted run syncs at 0, 4, 8, 12, 16; a run resumed from global_step_10 syncs at 10
    # (vLLM has dummy weights) and then at the same steps as the uninterrupted run.
    resumed = simulate(4, range(11, 21), start=10)
    assert resumed[0].reason == FIRST and resumed[0].step == 10
    assert synced_steps(resumed) == [10, 12, 16, 20]
    by_step = {d.step: d for d in resumed}
    assert by_step[11].lag == 1 and by_step[11].rollout_lag == 0
    assert by_step[12].rollout_lag == 1 and by_step[12].lag == 0
    assert by_step[13].rollout_lag == 0


def test_resume_on_a_sync_step():
    resumed = simulate(4, range(9, 14), start=8)
    assert synced_steps(resumed) == [8, 12]
    assert [d.reason for d in resumed] == [FIRST, SKIP, SKIP, SKIP, PERIOD, SKIP]


def test_forced_sync_resets_lag_but_not_phase():
    decisions = simulate(4, range(1, 13), forced={5})
    assert synced_steps(decisions) == [0, 4, 5, 8, 12]
    by_step = {d.step: d for d in decisions}
    assert by_step[5].reason == FORCED and by_step[5].lag == 0
    assert by_step[6].rollout_lag == 0 and by_step[8].rollout_lag == 2


def test_repeat_call_in_same_step_never_syncs():
    schedule = SyncSchedule(4)
    schedule.slot(0)
    schedule.slot(1)
    d = schedule.slot(1)  # verl's _validate wakes vLLM again with update_weights(global_steps)
    assert d.reason == REPEAT and not d.sync and d.version_after == 0
    assert d.rollout_lag is None  # a repeat trains no batch: no lag to report or guard
    d = schedule.slot(None)  # V1's _validate passes no step
    assert d.reason == REPEAT and not d.sync and d.step == 1
    d = schedule.slot(4, force=True)
    assert d.sync
    assert schedule.slot(4, force=True).reason == REPEAT  # force does not turn a repeat into a sync
    assert (schedule.num_syncs, schedule.num_skips) == (2, 1)


def test_cap_when_slots_are_missing():
    schedule = SyncSchedule(4)
    schedule.slot(0)
    schedule.slot(1)
    d = schedule.slot(6)  # steps 2..5 never reached the slot
    assert d.sync and d.reason == CAP
    resumed = SyncSchedule(4)
    resumed.slot(1)  # a resume's first slot, off the period's phase: s_w = 1
    resumed.slot(2)
    d = resumed.slot(5)  # 5 is not a multiple of 4, but s − s_w = 4 = v: the lag may not reach v
    assert d.sync and d.reason == CAP and d.rollout_lag == 3


def test_decide_is_pure():
    schedule = SyncSchedule(3)
    schedule.slot(0)
    before = (schedule.version, schedule.last_step, schedule.num_syncs, schedule.num_skips)
    for _ in range(3):
        assert not schedule.decide(1).sync
        assert schedule.decide(3).sync
    assert (schedule.version, schedule.last_step, schedule.num_syncs, schedule.num_skips) == before


def test_steps_going_backwards_raise():
    schedule = SyncSchedule(2)
    schedule.slot(0)
    schedule.slot(5)
    with pytest.raises(ValueError, match="backwards"):
        schedule.slot(3)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "4", True, None])
def test_bad_period_rejected(bad):
    with pytest.raises(ValueError, match="sync_period"):
        SyncSchedule(bad)


def test_validation_follows_matches_verl_fit():
    assert [s for s in range(1, 13) if validation_follows(s, 5, 12)] == [5, 10, 12]
    assert [s for s in range(1, 13) if validation_follows(s, -1, 12)] == []
    assert [s for s in range(1, 13) if validation_follows(s, 0, 12)] == []
    assert validation_follows(7, 3, None) is False and validation_follows(6, 3, None) is True


def test_rollout_lag_known_before_the_slot_is_what_the_slot_reports():
    """rollout_lag_of(s), read while step s trains (before its slot), equals the slot's rollout_lag."""
    from verl_offgrpo.sync.schedule import SyncSchedule

    for period, forced in ((1, ()), (4, ()), (3, (5,)), (10, (7, 8))):
        schedule = SyncSchedule(period)
        assert schedule.rollout_lag_of(1) is None  # no sync yet: unknown
        schedule.slot(0)
        for s in range(1, 25):
            before = schedule.rollout_lag_of(s)
            decision = schedule.slot(s, force=s in forced)
            assert before == decision.rollout_lag, (period, s)
        assert schedule.rollout_lag_of(25) == 24 - schedule.version
