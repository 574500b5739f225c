"""Trainer side (driver / TaskRunner process): decide, then run the in-place copy on every actor rank.

Call :func:`maybe_reset_reference` once at the end of every training step s (after the actor update),
with verl's ``global_steps``; it is idempotent per step (a second call for the same or an earlier step
does nothing and returns ``{}``), so a hook that fires twice per step (v0's ``update_weights`` before a
validation) is harmless. At start-up call it with ``at_init=True`` and the loaded step: after a resume
from step s0 ≥ 1 it resets π_ref ← π_{s0} (verl does not checkpoint the reference; it reloads the
initial model). That is exact iff s0 mod R = 0 — choose ``trainer.save_freq`` as a multiple of R —
otherwise the reference is π_{s0} instead of π_{R⌊s0/R⌋} and a warning says so.

The copy runs in the actor worker processes through Ray's ``__ray_call__`` (see :mod:`.worker`), on
all ranks of ``trainer.actor_rollout_wg`` at once; the driver only receives small reports.

Metrics (only when ``ref_reset_period`` R > 0):

* ``off_grpo/ref_reset``: 1.0 if π_ref ← π_θ ran at the end of this step, else 0.0
* ``off_grpo/ref_num_resets``: resets so far (this process)
* ``off_grpo/ref_policy_step``: the step whose end-of-step policy π_ref now holds (0 = initial model)
* ``timing_s/off_grpo_ref_reset``, ``off_grpo/ref_reset_gb`` (bytes written, all ranks): on resets
* ``off_grpo/ref_reset_max_abs_diff``: on resets with verification (env ``VERL_OFFGRPO_REF_RESET_VERIFY=1``)
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from ..worker_group import actor_handles
from .param_copy import RefResetError
from .schedule import RefResetState, check_period

logger = logging.getLogger(__name__)

#: the verl 0.9.1 names the reset reaches through, checked before a selecting job starts
#: (:data:`verl_offgrpo.patches.INTERNALS_MODULES`): the colocated wrappers whose
#: instances hold ``worker_dict`` / ``fused_worker_dict``, and the worker whose ``.actor`` / ``.ref`` TrainingWorkers
#: hold ``engine.module`` (:mod:`.worker`); the trainer's ``ref_in_actor`` and ``actor_rollout_wg`` are instance data
VERL_INTERNALS = (
    "verl.single_controller.ray.base.create_colocated_worker_cls",
    "verl.single_controller.ray.base.create_colocated_worker_cls_fused",
    "verl.workers.engine_workers.ActorRolloutRefWorker",
)

STATE_ATTR = "_off_grpo_ref_reset_state"
VERIFY_ENV = "VERL_OFFGRPO_REF_RESET_VERIFY"


def reset_period(config: Any) -> int:
    from verl_offgrpo.config import OffGRPOConfig, config_value

    return check_period(OffGRPOConfig.from_algorithm(config_value(config, "algorithm")).ref_reset_period)


def get_state(trainer: Any) -> RefResetState:
    state = getattr(trainer, STATE_ATTR, None)
    if state is None:
        state = RefResetState(period=reset_period(trainer.config))
        setattr(trainer, STATE_ATTR, state)
    return state


def actor_workers(trainer: Any) -> list:
    """The Ray actor handles that hold both the actor and the reference engines."""
    if getattr(trainer, "ref_in_actor", False):
        raise RefResetError(
            "verl-offgrpo ref reset: the reference is the actor's base model with LoRA adapters disabled "
            "(ref_in_actor); resetting it is not supported."
        )
    return actor_handles(getattr(trainer, "actor_rollout_wg", None), "the reference reset", "actor_rollout_wg",
                         RefResetError)


def run_reset_on_workers(workers: list, verify: bool = False) -> list[dict]:
    """π_ref ← π_θ on every rank (all at once: each rank copies its own shards; no collective)."""
    import ray

    from .worker import reset_reference_on_worker

    return ray.get([w.__ray_call__.remote(reset_reference_on_worker, verify) for w in workers])


def _verify_default() -> bool:
    return os.environ.get(VERIFY_ENV, "0").strip().lower() in ("1", "true", "yes")


#: the copy's metrics when it runs on resume, apart from a reset of the step it is logged with
RESUME_NAMES = {
    "timing_s/off_grpo_ref_reset": "timing_s/off_grpo_ref_reset_on_resume",
    "off_grpo/ref_reset_gb": "off_grpo/ref_resume_gb",
    "off_grpo/ref_reset_max_abs_diff": "off_grpo/ref_resume_max_abs_diff",
}


def _reset(trainer: Any, verify: bool) -> dict:
    start = time.perf_counter()
    reports = run_reset_on_workers(actor_workers(trainer), verify=verify)
    metrics = {
        "timing_s/off_grpo_ref_reset": time.perf_counter() - start,
        "off_grpo/ref_reset_gb": sum(r.get("bytes_written", 0) for r in reports) / 1e9,
    }
    if verify:
        diffs = [r.get("max_abs_diff") for r in reports if r.get("max_abs_diff") is not None]
        metrics["off_grpo/ref_reset_max_abs_diff"] = max(diffs) if diffs else 0.0
    return metrics


def maybe_reset_reference(trainer: Any, step: int, *, at_init: bool = False, verify: bool | None = None) -> dict:
    """π_ref ← π_θ at the end of step ``step`` iff R > 0 and step % R == 0; return the step's metrics.

    ``at_init=True``: start-up / resume slot (``step`` = the loaded ``global_steps``, 0 for a fresh run).
    Returns ``{}`` when R = 0 or when this step was already handled.
    """
    state = get_state(trainer)
    if state.period == 0:
        return {}
    verify = _verify_default() if verify is None else bool(verify)
    if at_init:
        s0 = int(step or 0)
        if s0 < 1 or state.last_step >= s0:
            state.last_step = max(state.last_step, s0)
            return {}
        exact = s0 % state.period == 0
        if not exact:
            logger.warning(
                "verl-offgrpo: resumed at step %d, not a multiple of ref_reset_period=%d: verl does not checkpoint "
                "the reference, so π_ref is set to the resumed policy π_%d instead of π_%d. Use a "
                "trainer.save_freq that is a multiple of ref_reset_period for an exact resume.",
                s0, state.period, s0, state.period * (s0 // state.period),
            )  # fmt: skip
        copy = _reset(trainer, verify)
        state.commit(s0, reset=True)
        # logged with the next step (whose own reset, if any, has the unprefixed names)
        metrics = {RESUME_NAMES[key]: value for key, value in copy.items()}
        metrics.update(
            {
                "off_grpo/ref_reset_on_resume": 1.0,
                "off_grpo/ref_resume_exact": float(exact),
                "off_grpo/ref_num_resets": float(state.num_resets),
                "off_grpo/ref_policy_step": float(state.last_reset_step),
            }
        )
        return metrics
    decision = state.decide(step)
    if decision is None:
        return {}
    metrics = _reset(trainer, verify) if decision else {}
    state.commit(step, reset=decision)
    metrics.update(
        {
            "off_grpo/ref_reset": float(decision),
            "off_grpo/ref_num_resets": float(state.num_resets),
            "off_grpo/ref_policy_step": float(state.last_reset_step),
        }
    )
    return metrics
