"""Windowed rollout (``algorithm.off_grpo.rollout_schedule=window``): one generation phase per sync window.

Paper (Alg. 1): the v steps between two syncs each train on fresh prompts sampled from the same
lagged policy α. ``per_step`` samples them step by step (every step wakes vLLM, generates B
prompts, sleeps it). ``window`` samples all of them at once, right after the sync that starts the
window: one wake, one generation phase of k·B prompts, one sleep and one sync per window. Each step
still draws its own B prompts (groups) from the window's buffer, recomputes π_k (``old_log_prob``)
with the current actor and trains once, so the data distribution and every per-step quantity are
those of ``per_step``; only when the samples are generated changes.

Windows are phase-aligned to the sync schedule (:mod:`.schedule`): syncs happen in the slots of
steps s ≡ 0 (mod v), so the window that starts at step s covers

    s, s+1, …, min(⌈s/v⌉·v, T)          k(s) = min(⌈s/v⌉·v, T) − s + 1 ≤ v

(T = ``total_training_steps``, or the last step of ``trainer.total_epochs`` epochs if earlier). A fresh
run starts windows at 1, v+1, 2v+1, …; a run resumed from step S starts a shorter window at S+1, then
aligns; the last window ends at T. The buffer of the interrupted window is not checkpointed, but the
checkpoint of step S holds the dataloader state after step S's own batch, so the resumed window fetches
(and generates anew) exactly the prompts the interrupted one had not trained on. A forced sync inside a window (validation with ``sync_before_validate``) does not
end it: the buffered samples are still α's. Every sample of a window comes from the weights synced
in the slot before its first step, version w = s − 1, so the step s' of the window trains with
rollout lag s' − 1 − w (0 on the window's first step, where the served-policy guard holds the batch
to the engine floor).

Pure bookkeeping; the trainer mode (:mod:`.trainer_v1`) does the generation and the TransferQueue
keeps the buffered groups (verl's sync replay buffer serves B of them per step). The settings a
window cannot honour are rejected by :func:`verl_offgrpo.config.check_window_config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from verl_offgrpo.config.window_checks import window_length  # k(s), also the start-up checks' (one formula)

WINDOW = "window"

__all__ = ["WINDOW", "RolloutWindow", "WindowSchedule", "window_length"]


@dataclass
class RolloutWindow:
    """The window being trained on: its first step, its length, the weights version that sampled it."""

    start: int
    length: int
    version: Optional[int]  # s_w of the sync before the window (None if unknown)
    used: int = 0  # steps of the window that have drawn their batch
    generation_s: Optional[float] = None  # from submitting its prompts to vLLM's sleep after the last (trainer's clock)

    @property
    def remaining(self) -> int:
        return self.length - self.used

    def rollout_lag(self, step: int) -> Optional[int]:
        """(s − 1) − w: staleness of the batch trained at ``step``; None if the version is unknown."""
        return None if self.version is None else int(step) - 1 - self.version

    def covers(self, step: int) -> bool:
        """Whether ``step`` trains on this window's samples."""
        return self.start <= int(step) < self.start + self.length


class WindowSchedule:
    """Which steps generate, and the lag of every step's batch, in one process run."""

    def __init__(self, period: int, total_steps: Optional[int] = None):
        self.period = int(period)
        self.total_steps = total_steps
        self.current: Optional[RolloutWindow] = None

    def starts_window(self, step: int) -> bool:
        """Whether step ``step`` must generate: no window yet, or the current one is used up."""
        return self.current is None or self.current.remaining <= 0

    def begin(self, step: int, version: Optional[int]) -> RolloutWindow:
        """Open the window that starts at ``step``, sampled by weights version ``version``."""
        self.current = RolloutWindow(int(step), window_length(step, self.period, self.total_steps), version)
        return self.current

    def draw(self) -> RolloutWindow:
        """One step of the current window has drawn its batch."""
        if self.current is None or self.current.remaining <= 0:
            raise RuntimeError("verl-offgrpo: rollout window used up before its step drew a batch")
        self.current.used += 1
        return self.current

    def rollout_lag(self, step: int) -> Optional[int]:
        return None if self.current is None else self.current.rollout_lag(step)

    def next_batch_lag(self, step: int) -> Optional[int]:
        """s − w: staleness of the batch step s + 1 trains on, if the current window holds it (a forced
        sync in the slot of step s does not change it); None if the next step starts a window."""
        if self.current is None or not self.current.covers(int(step) + 1):
            return None
        return self.current.rollout_lag(int(step) + 1)

    def generation_metrics(self) -> dict[str, float]:
        """``off_grpo/window/generation_s_per_step``: the current window's generation phase over its k steps, logged
        on each of them (verl's ``timing_s/gen`` holds it all on the first step); {} before it is timed."""
        if self.current is None or self.current.generation_s is None:
            return {}
        return {"off_grpo/window/generation_s_per_step": self.current.generation_s / self.current.length}

    def metrics(self, step: int, generated: bool) -> dict[str, float]:
        """Per-step metrics: ``off_grpo/window/{generated,length,position}`` (position 0 = the window's first step)."""
        if self.current is None:
            return {}
        return {
            "off_grpo/window/generated": float(generated),
            "off_grpo/window/length": float(self.current.length),
            "off_grpo/window/position": float(int(step) - self.current.start),
        }

