"""v0 trainer: ``verl.utils.tracking.Tracking.log`` also logs the lagged checkpoint manager's metrics of the step.

verl's v0 trainer (``RayPPOTrainer.fit``) builds each step's ``metrics`` dict locally and hands it to
``logger.log(data=metrics, step=s)``; the checkpoint manager it calls has no channel into that dict.
The lagged manager (:mod:`verl_offgrpo.sync.lagged_manager`) therefore keeps the metrics of step s in
:data:`PENDING_METRICS`, and :func:`apply` wraps ``Tracking.log`` (class-wide, once per process) so
that the call of step s also carries them (keys already in ``data`` win); a step without pending
metrics is logged as verl logs it.

Installed by the lagged manager for the v0 trainer, in the trainer's process, when it is built: only
a job that selects the plugin builds it (``rollout.checkpoint_manager_class`` names it). Nothing at
``import verl``; the V1 trainer passes its metrics through verl's own ``_pending_sync_metrics``.
Written for verl 0.9.1 (:data:`VERL_VERSIONS`): wraps ``Tracking.log(self, data, step, backend=None)``.
"""

from __future__ import annotations

import functools
import sys

from verl_offgrpo.patches import VERL_VERSIONS

MODULE = "verl.utils.tracking"
TARGETS = (f"{MODULE}.Tracking.log",)
#: used by the v0 trainer only: a job on the V1 trainer does not need its target (:func:`~verl_offgrpo.patches.preflight`)
TRAINER = "v0"
WHEN = ("trainer process of a v0 job with the lagged checkpoint manager (a selecting job), from when the manager "
        "is built: Tracking.log(step=s) also logs the manager's metrics of step s; not installed otherwise")
_WRAPPED = "__off_grpo_wrapped__"

#: step -> metrics waiting for ``Tracking.log(step=step)`` in this process (filled by the lagged manager)
PENDING_METRICS: dict[int, dict] = {}

__all__ = ["PENDING_METRICS", "TARGETS", "TRAINER", "VERL_VERSIONS", "WHEN", "apply", "install", "live"]


def apply() -> None:
    """Wrap ``Tracking.log`` (once per process) to merge :data:`PENDING_METRICS` of the logged step."""
    from verl.utils import tracking

    original = tracking.Tracking.log
    if getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def log(self, data, step, backend=None):
        extra = PENDING_METRICS.pop(step, None)
        if extra:
            data = {**extra, **data}
        return original(self, data=data, step=step, backend=backend)

    setattr(log, _WRAPPED, True)
    tracking.Tracking.log = log


def live() -> bool:
    """Whether verl's ``Tracking.log`` carries the wrap in this process (read off the class)."""
    module = sys.modules.get(MODULE)
    tracking = getattr(module, "Tracking", None) if module is not None else None
    return tracking is not None and getattr(getattr(tracking, "log", None), _WRAPPED, False)


def install() -> None:
    """Nothing at ``import verl``: the lagged manager calls :func:`apply` when it is built for the v0 trainer."""
