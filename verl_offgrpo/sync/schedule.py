"""The lag schedule of the off-policy sync: which weight-sync slots really sync (pure, no verl import).

verl calls ``checkpoint_manager.update_weights(s)`` once per training step ("the slot of step s"),
right after the actor update of step s (V1 ``on_step_end``, v0 after ``update_actor``), and once
before training (``on_init_end`` / start of ``fit``) with s = 0, or s = S after resuming from
``global_step_S``. Let v = ``algorithm.off_grpo.sync_period`` and s_w the step whose weights π_{s_w}
vLLM holds (undefined before the first sync of this process). The slot of step s syncs iff

    sync(s) = [s_w undefined]                 first slot of this process: fresh start or resume
            ∨ [s ≡ 0 (mod v)]                 the period, phase-aligned to the global step
            ∨ [s − s_w ≥ v]                   never lag by more than v (e.g. if a slot was missed)
            ∨ force                           e.g. validation follows step s (sync_before_validate)

and then s_w ← s. Otherwise the slot only wakes vLLM, which still serves α = π_{s_w}.

Bookkeeping reported per slot (steps are verl's ``global_steps``):

    lag(s)         = s − s_w        after the slot: age of the weights now in vLLM (0 right after a
                                    sync); the batch of step s+1 is sampled from π_{s_w} while the
                                    trainer starts step s+1 at π_s, so this is also its staleness.
    rollout_lag(s) = (s − 1) − s_w⁻ s_w⁻ = s_w before the slot: staleness of the batch trained in
                                    step s (sampled from π_{s_w⁻}, r' = π_{s−1}/π_{s_w⁻}); equals V1's
                                    ``training/off_policy/trajectory_staleness``.

Both are ≤ v − 1. v = 1 syncs every slot (on-policy GRPO, lag 0). Phase alignment makes a resumed
run sync at the same steps as an uninterrupted one, apart from the extra sync at the resume step
(vLLM starts with dummy weights, and α of the interrupted run is gone). A repeated call in the same
step (verl's validation wakes vLLM with ``update_weights`` after a colocated reward model ran) is
``repeat``: it never transfers weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: Reasons a slot syncs or not.
FIRST, PERIOD, CAP, FORCED, SKIP, REPEAT = "first", "period", "cap", "forced", "skip", "repeat"


@dataclass(frozen=True)
class SlotDecision:
    """What one call of the sync slot did."""

    step: int
    sync: bool
    reason: str
    version_before: Optional[int]  # s_w⁻ (None before the first sync of this process)
    version_after: int  # s_w after the slot

    @property
    def lag(self) -> int:
        """s − s_w after the slot (0 right after a sync)."""
        return self.step - self.version_after

    @property
    def rollout_lag(self) -> Optional[int]:
        """(s − 1) − s_w⁻: staleness of the batch trained in step s; None for the first slot."""
        if self.version_before is None or self.reason == REPEAT:
            return None
        return self.step - 1 - self.version_before


def check_period(period: int) -> int:
    if isinstance(period, bool) or not isinstance(period, int) or period < 1:
        raise ValueError(f"algorithm.off_grpo.sync_period must be an integer >= 1 (got {period!r}).")
    return period


def validation_follows(step: int, test_freq: int, total_training_steps: int | None) -> bool:
    """Whether verl validates right after the step-``step`` sync slot (same test as both trainers' fit)."""
    if test_freq is None or test_freq <= 0:
        return False
    is_last_step = total_training_steps is not None and step >= total_training_steps
    return is_last_step or step % test_freq == 0


class SyncSchedule:
    """The state of the schedule in one process run: s_w and the last slot seen.

    ``decide`` is pure; ``slot`` decides and records. Nothing needs to be checkpointed: after a
    resume, the first slot syncs and the phase comes from ``global_steps``.
    """

    def __init__(self, period: int):
        self.period = check_period(period)
        self.version: Optional[int] = None  # s_w
        self.last_step: Optional[int] = None
        self.num_syncs = 0
        self.num_skips = 0

    def decide(self, step: Optional[int], force: bool = False) -> SlotDecision:
        if self.version is None:
            s = 0 if step is None else int(step)
            return SlotDecision(s, True, FIRST, None, s)
        if step is None or step == self.last_step:
            s = self.last_step if step is None else int(step)
            return SlotDecision(s, False, REPEAT, self.version, self.version)
        s = int(step)
        if self.last_step is not None and s < self.last_step:
            raise ValueError(f"sync slot for step {s} after step {self.last_step}: global_steps went backwards")
        if force:
            return SlotDecision(s, True, FORCED, self.version, s)
        if s % self.period == 0:
            return SlotDecision(s, True, PERIOD, self.version, s)
        if s - self.version >= self.period:
            return SlotDecision(s, True, CAP, self.version, s)
        return SlotDecision(s, False, SKIP, self.version, self.version)

    def commit(self, decision: SlotDecision) -> None:
        self.version = decision.version_after
        self.last_step = decision.step
        if decision.reason != REPEAT:
            if decision.sync:
                self.num_syncs += 1
            else:
                self.num_skips += 1

    def rollout_lag_of(self, step: int) -> Optional[int]:
        """(s − 1) − s_w: staleness of the batch being trained in step s, known before the slot of
        step s (the ``rollout_lag`` that slot will report); None before the first sync."""
        return None if self.version is None else int(step) - 1 - self.version

    def slot(self, step: Optional[int], force: bool = False) -> SlotDecision:
        decision = self.decide(step, force=force)
        self.commit(decision)
        return decision


def simulate(period: int, steps, start: int = 0, forced=()) -> list[SlotDecision]:
    """Decisions of a run that starts (or resumes) at ``start`` and then runs the given step slots."""
    schedule = SyncSchedule(period)
    out = [schedule.slot(start)]
    forced = set(forced)
    for s in steps:
        out.append(schedule.slot(s, force=s in forced))
    return out
