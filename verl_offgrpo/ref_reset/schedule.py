"""When π_ref ← π_θ happens (paper §3: the reference is reset to the current policy every R steps).

With R = ``algorithm.off_grpo.ref_reset_period`` and verl's 1-based ``global_steps`` s::

    reset at the end of step s  ⇔  R > 0  and  s ≥ 1  and  s mod R = 0

"End of step s" means after the actor update of step s, so the reference log-probs of step s + 1
(computed before that step's update) are those of π_θ after s updates, and the KL term of step s + 1
starts at exactly 0. During step s the reference is π_{R·⌊(s−1)/R⌋} (:func:`reference_step`; π_0 = the initial
model until the first reset). R = 0 keeps verl's behaviour (never reset).

Pure Python, no torch / verl import.
"""

from __future__ import annotations

from dataclasses import dataclass


def check_period(period) -> int:
    if isinstance(period, bool) or not isinstance(period, int) or period < 0:
        raise ValueError(f"algorithm.off_grpo.ref_reset_period must be an integer >= 0 (got {period!r}); 0 = never.")
    return period


def should_reset(step: int, period: int) -> bool:
    """``True`` iff π_ref ← π_θ at the end of step ``step``: ``period > 0 and step >= 1 and step % period == 0``."""
    check_period(period)
    return period > 0 and step is not None and int(step) >= 1 and int(step) % period == 0


def reference_step(step: int, period: int) -> int:
    """The step whose end-of-step policy the reference holds *during* step ``step`` (0 = initial model).

    During step s the reference is π after step R·⌊(s−1)/R⌋ (the last reset strictly before s).
    """
    check_period(period)
    if period == 0 or step is None or step <= 1:
        return 0
    return period * ((int(step) - 1) // period)


@dataclass
class RefResetState:
    """Trainer-side bookkeeping (kept on the trainer object; not checkpointed, see the resume notes)."""

    period: int
    last_step: int = 0  # last step whose end-of-step slot was handled (idempotence)
    last_reset_step: int = 0  # the reference holds π after this step (0 = initial model)
    num_resets: int = 0

    def decide(self, step: int) -> bool | None:
        """``None`` if this step's slot was already handled (repeated call), else whether to reset."""
        if step is None or int(step) < 1 or int(step) <= self.last_step:
            return None
        return should_reset(int(step), self.period)

    def commit(self, step: int, reset: bool) -> None:
        self.last_step = max(self.last_step, int(step))
        if reset:
            self.last_reset_step = int(step)
            self.num_resets += 1
