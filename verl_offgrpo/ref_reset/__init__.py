"""Periodic reference reset π_ref ← π_θ every R = ``algorithm.off_grpo.ref_reset_period`` steps.

Paper: Mroueh et al., arXiv 2505.22257, §3 (the KL term β·KL(π_θ‖π_ref) anchors to a recent policy,
not the initial model). verl 0.9.1 has no such feature (upstream issues #415, #3032).

Schedule (:mod:`.schedule`): reset at the end of step s  ⇔  R > 0 and s ≥ 1 and s mod R = 0.

Modules (none imports vllm; the worker module imports torch only):

* :mod:`.schedule` — the pure schedule and trainer-side bookkeeping.
* :mod:`.param_copy` — :func:`copy_params_into_` (dst_module, src_module): in-place, shard-local copy of the
  actor's parameters into the reference (plain modules, FSDP1 flat parameters, FSDP2 DTensors; casts
  dtype, writes CPU-offloaded shards where they live; checks names/shapes/sharding first).
* :mod:`.worker` — runs in each actor worker process via Ray's ``__ray_call__``: finds verl's actor and
  reference ``TrainingWorker`` s (``ActorRolloutRefWorker.actor`` / ``.ref``) and copies.
* :mod:`.trainer` — :func:`maybe_reset_reference` (trainer, step) → metrics, for V1 ``on_step_end`` and
  v0's checkpoint manager.
* the start-up rejection of unsupported setups is :func:`verl_offgrpo.config.check_ref_reset_config`.

Only :mod:`.schedule` is imported eagerly (no torch/ray at import).
"""

from __future__ import annotations

from .schedule import RefResetState, reference_step, should_reset

__all__ = [
    "RefResetError",
    "RefResetState",
    "copy_params_into_",
    "maybe_reset_reference",
    "reference_step",
    "reset_reference_on_worker",
    "should_reset",
]


def __getattr__(name):  # lazy: torch / ray only when used
    if name in ("copy_params_into_", "RefResetError"):
        from . import param_copy as _copy

        return getattr(_copy, name)
    if name == "maybe_reset_reference":
        from .trainer import maybe_reset_reference

        return maybe_reset_reference
    if name == "reset_reference_on_worker":
        from .worker import reset_reference_on_worker

        return reset_reference_on_worker
    raise AttributeError(name)
