"""The Ray handles of verl's actor worker group, read in one place.

The lagged sync (a skipped slot empties the actor's device cache; the sync check reads the trainer's weights) and
the reference reset (the in-place copy) run code in the actor's worker processes through Ray's ``__ray_call__`` on
these handles. None there (a verl that moved them) is an error: both would otherwise quietly do nothing.
"""

from __future__ import annotations

from typing import Any

#: the verl 0.9.1 name read here, checked before a selecting job starts (:data:`verl_offgrpo.patches.INTERNALS_MODULES`)
VERL_INTERNALS = ("verl.single_controller.ray.base.RayWorkerGroup.workers",)


def actor_handles(worker_group: Any, needed_by: str, where: str, error: type[Exception] = RuntimeError) -> list:
    """``worker_group.workers`` as a list; ``error`` (one line naming ``needed_by``, and ``where``, the attribute that
    should hold the group) where there is no group, or its handles are missing or empty."""
    if worker_group is None:
        raise error(f"verl-offgrpo: {needed_by} needs the trainer's actor worker group ({where}); it has none.")
    workers = list(getattr(worker_group, "workers", None) or [])
    if not workers:
        raise error(f"verl-offgrpo: the actor worker group ({type(worker_group).__name__}) has no Ray handles in "
                    f".workers (where verl 0.9.1's RayWorkerGroup keeps them); {needed_by} cannot reach the actor's "
                    "workers.")
    return workers
