"""What the served-policy checks cannot cover, said once at start-up (and by ``compose``), before any GPU work:
every check off (each by its own knob, ``0`` or ``false``; none is refused), or a rollout layout that narrows the
exact checks (vLLM data parallelism, a window's lag-0 batch smaller than the engines)."""

from __future__ import annotations

import logging
from typing import Any

from .off_grpo import PREFIX, OffGRPOConfig
from .readers import lag0_batch_reaches_every_engine, rollout_data_parallel_size

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


def narrowed_lines(config: Any, knobs: OffGRPOConfig) -> list[str]:
    """The warnings for a lagged run (sync_period > 1, ``knobs`` resolved) whose layout narrows the exact checks
    (the trainer's manager acts on the same facts, :mod:`verl_offgrpo.sync.lagged_manager`):

    * ``rollout.data_parallel_size`` > 1 with ``verify_served_weights``: vLLM's collective_rpc answers for each
      replica's leader shard only, so the check that each sync reached vLLM is off, and the lagged limit
      ``max_log_rprime_lagged`` is the only check of the other shards' lagged batches (in a window, which checks no
      wake, of all its lagged batches; it stops the run);
    * a window whose lag-0 batch (B·n samples) is smaller than the vLLM engines: some engine may sample only lagged
      batches, so the lagged limit stops the run there too."""
    if knobs.sync_period <= 1:
        return []
    lines, lagged_limit, window = [], f"{PREFIX}.max_log_rprime_lagged", knobs.rollout_schedule == "window"
    unchecked = "the window's" if window else "the other shards'"  # a window checks no wake, the leader's neither
    stops = (f"a lagged batch over {lagged_limit} stops the run" if knobs.max_log_rprime_lagged > 0 else
             f"with {lagged_limit}=0 nothing checks {unchecked} lagged batches")
    data_parallel = rollout_data_parallel_size(config)
    if knobs.verify_served_weights and data_parallel > 1:
        also = ("" if window else  # a window wakes vLLM only to sync
                " and the check of each wake without a sync reaches the leader's data-parallel shard only")
        lines.append(f"off_grpo: actor_rollout_ref.rollout.data_parallel_size={data_parallel}: vLLM's collective_rpc "
                     f"answers for each replica's leader shard only, so the exact check that each sync reached vLLM is "
                     f"off{also}: {stops}.")
    if window and not lag0_batch_reaches_every_engine(config):
        lines.append("off_grpo: a window's first batch (data.train_batch_size × rollout.n samples) is smaller than the "
                     "number of vLLM engines, so some engine may sample only lagged batches: "
                     + (f"over {lagged_limit} they stop the run." if knobs.max_log_rprime_lagged > 0 else
                        f"with {lagged_limit}=0 nothing checks them."))
    return lines


def warn_where_narrowed(config: Any, knobs: OffGRPOConfig) -> None:
    """Log each of :func:`narrowed_lines` as a warning."""
    for line in narrowed_lines(config, knobs):
        logger.warning(line)
