"""A job whose served-policy checks are all off says so once, at start-up: nothing then stops a run whose vLLM
serves weights other than α (each check is off by its own knob, ``0`` or ``false``; none is refused)."""

from __future__ import annotations

import logging

from .off_grpo import PREFIX, OffGRPOConfig

logger = logging.getLogger(__name__)


def unguarded_line(knobs: OffGRPOConfig) -> str | None:
    """The warning for ``knobs`` whose every served-policy check that applies is off (the r' limits at lag 0; at
    sync_period > 1 also the lagged limit and the exact served-weights check), else None."""
    off = {"max_log_rprime_after_sync": knobs.max_log_rprime_after_sync <= 0,
           "max_seq_log_rprime_after_sync": knobs.max_seq_log_rprime_after_sync <= 0}
    if knobs.sync_period > 1:
        off.update(max_log_rprime_lagged=knobs.max_log_rprime_lagged <= 0,
                   verify_served_weights=not knobs.verify_served_weights)
    if not all(off.values()):
        return None
    names = ", ".join(f"{name}={'false' if name == 'verify_served_weights' else 0}" for name in off)
    return (f"off_grpo: every served-policy check is off ({PREFIX}.{names}): nothing stops a run whose vLLM serves "
            "weights other than α.")


def warn_if_unguarded(knobs: OffGRPOConfig) -> None:
    """Log :func:`unguarded_line` as a warning where it applies."""
    if line := unguarded_line(knobs):
        logger.warning(line)
