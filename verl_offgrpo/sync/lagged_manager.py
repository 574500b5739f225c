"""The lagged checkpoint manager: verl's ``CheckpointEngineManager`` that syncs only every v steps.

One class serves both trainers:

* v0 (``trainer.use_v1=false``): select it with
  ``+actor_rollout_ref.rollout.checkpoint_manager_class=verl_offgrpo.sync.lagged_manager.LaggedCheckpointManager``;
  ``RayPPOTrainer.init_workers`` builds it as ``cls(config=, actor_wg=, replicas=)``. The trainer
  (for ``algorithm.off_grpo`` and the validation schedule) is found as the ``self`` of the calling
  frame (``init_workers``); a missing trainer is an error.
* V1: the ``off_grpo_sync`` trainer mode (:mod:`.trainer_v1`) builds it with ``trainer=self``.

``update_weights(s)`` follows :mod:`.schedule`. A real sync is verl's own (``actor_wg.update_weights``:
resume vLLM's weights, gather the FSDP shards, CUDA-IPC them in, ``set_global_steps(s)`` on the
server, resume the KV cache). A skipped sync does no resharding and no transfer: it empties the
actor workers' torch cache (as verl's sync does before vLLM resumes) and wakes the replicas the way
verl's sync does, without the transfer: weights (vLLM restores α from its level-1 CPU copy), then the
KV cache. The server's ``global_steps`` (weight version) only moves on real syncs, so V1's
``training/off_policy/trajectory_staleness/*`` reports the lag too.

Metrics of the slot of step s (not the first slot): ``off_grpo/synced``, ``off_grpo/lag``,
``off_grpo/rollout_lag``, ``off_grpo/weights_version``, ``off_grpo/num_syncs``,
``timing_s/off_grpo_sync`` (wall time of the slot, sync or skip); on skipped slots also its parts,
``timing_s/off_grpo_skip_{empty_cache,wake_weights,wake_kv_cache}`` and their wake total
``timing_s/off_grpo_skip_wake`` (the cost a lagged step still pays; see :meth:`wake_without_sync`),
``timing_s/off_grpo_skip_actor_wait`` (the part of ``empty_cache`` spent waiting for the actor's queued work),
and the actor workers' memory then: ``off_grpo/skip_{cache_emptied_frac,min_free_frac,wake_needs_frac}``.
With ``verify_served_weights`` (:mod:`.served_weights`; on wherever per_step at v > 1 wakes vLLM without a
sync) a real sync also records the served weights' fingerprint in every vLLM worker and a slot without one
checks it (``ServedPolicyError`` on any difference, before the next rollout): ``timing_s/off_grpo_verify_weights``
(that call) and ``off_grpo/weights_verified`` (1 on a check, 0 on a record).
Every step also reports ``timing_s/off_grpo_sleep``, the replicas' sleep after its rollout (inside verl's
``timing_s/gen``; level 1 at v > 1 with per_step copies α to host memory: :meth:`LaggedCheckpointManager.sleep_replicas`).
V1 merges them through the
trainer's ``_pending_sync_metrics`` (read by ``PPOTrainer._consume_sync_metrics`` right after
``on_step_end``). v0 has no channel from the manager to its local ``metrics`` dict: the manager
keeps them by step (``metrics_by_step``, ``last_metrics``) and, for v0 only, has the patch
:mod:`verl_offgrpo.patches.tracking_merge` wrap verl's ``Tracking.log`` in the trainer process, so the
``logger.log(data=metrics, step=s)`` of step s also carries the manager's metrics of step s (keys
already present win).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any, Optional

import ray

from verl.checkpoint_engine.base import CheckpointEngineManager
from verl.utils.ray_utils import auto_await

from ..config import advisories_silenced, check_sync_config, check_window_config
from ..config import config_value as _get
from ..config.readers import (
    as_integer,
    flag_at,
    guards_verls_advantage,
    lag0_batch_reaches_every_engine,
    rollout_data_parallel_size,
    uses_v1,
    vllm_quantization,
)
from ..patches import tracking_merge, v0_advantage_metrics
from ..worker_group import actor_handles
from . import served_cast, served_weights, sync_reached
from .alpha_guard import EXACT_CHECK_PASSED, SAME_PHASE_AS_LAG_0, ServedPolicyError, check_served_policy
from .schedule import FIRST, REPEAT, SlotDecision, SyncSchedule, validation_follows
from .window import WINDOW, WindowSchedule
from .vllm_sleep import empty_device_cache, keep_weights_across_sleep, replica_servers

logger = logging.getLogger(__name__)

#: the verl 0.9.1 names the manager relies on, checked before a selecting job starts
#: (:data:`verl_offgrpo.patches.INTERNALS_MODULES`): the members of its base class it overrides (``update_weights``,
#: ``sleep_replicas``) or calls (``__init__``, ``resume_kv_cache_replicas``); the actor worker group's Ray handles are
#: read in :mod:`verl_offgrpo.worker_group`. It also relies on instance attributes, which exist only once verl's
#: constructors ran: ``CheckpointEngineManager.{config,actor_wg,replicas}``, ``RolloutReplica.servers``
#: (:func:`.vllm_sleep.replica_servers`), and the trainer's ``config``, ``actor_rollout_wg``, ``global_steps`` and
#: ``total_training_steps`` (v0: ``RayPPOTrainer``, whose ``init_workers`` builds the manager,
#: :func:`find_calling_trainer`; V1: ``PPOTrainer``)
VERL_INTERNALS = (
    *(f"verl.checkpoint_engine.base.CheckpointEngineManager.{name}" for name in (
        "__init__", "update_weights", "sleep_replicas", "resume_kv_cache_replicas",
    )),
)  # fmt: skip

#: the warning, once per run, when ``empty_cache_on_skip=if_needed`` had to empty a worker's cache:
#: formatted with the least free fraction of device memory and ``rollout.gpu_memory_utilization``
CACHE_EMPTIED_HINT = (
    "verl-offgrpo: empty_cache_on_skip=if_needed emptied the actor's device cache on a skipped sync: "
    "%.2f of device memory was free, vLLM's pool takes back rollout.gpu_memory_utilization=%.2f. "
    "An emptying worker also waits for the device work the actor update left queued, which can be most of "
    "the skipped slot. If vLLM's weights and a batch's KV cache "
    "fit in less, rollout.gpu_memory_utilization below %.2f keeps the cache and the skipped slot is the "
    "wake alone. Shown once; off_grpo/skip_min_free_frac and off_grpo/skip_cache_emptied_frac log every skip."
)


def find_calling_trainer(skip: Any = None, depth: int = 8) -> Any:
    """The trainer whose method is constructing us: the first ``self`` up the stack with a config."""
    frame = sys._getframe(1)
    for _ in range(depth):
        frame = frame.f_back
        if frame is None:
            break
        obj = frame.f_locals.get("self")
        if obj is None or obj is skip or isinstance(obj, CheckpointEngineManager):
            continue
        if hasattr(obj, "config") and hasattr(obj, "actor_rollout_wg") and _get(obj.config, "algorithm") is not None:
            return obj
    return None


class LaggedCheckpointManager(CheckpointEngineManager):
    """verl's checkpoint manager with the off-policy sync schedule (see the module docstring)."""

    def __init__(
        self,
        config,
        actor_wg,
        replicas,
        *,
        trainer: Any = None,
        trainer_kind: Optional[str] = None,
    ) -> None:
        super().__init__(config=config, actor_wg=actor_wg, replicas=replicas)
        if trainer is None:
            trainer = find_calling_trainer(skip=self)
        if trainer is None:
            raise RuntimeError(
                "verl-offgrpo: LaggedCheckpointManager must be built by a verl trainer (RayPPOTrainer.init_workers "
                "or the off_grpo_sync V1 mode), or given trainer=...; none found on the call stack."
            )
        self.trainer = trainer
        full_config = trainer.config
        if trainer_kind is None:
            trainer_kind = "v1" if uses_v1(full_config) else "v0"  # the start-up checks' reading
        self.trainer_kind = trainer_kind
        with advisories_silenced():  # the driver's validate_config advised on this config already
            self.knobs = check_sync_config(full_config, trainer=trainer_kind)
        self.schedule = SyncSchedule(self.knobs.sync_period)
        self.free_cache_engine = flag_at(full_config, "actor_rollout_ref.rollout.free_cache_engine", True)
        # vLLM's pool takes back at most this fraction of device memory on wake
        self.wake_fraction = float(_get(full_config, "actor_rollout_ref.rollout.gpu_memory_utilization", 0.5))
        self.server_reports: list[dict] = []
        lagged = self.knobs.sync_period > 1
        # rollout_schedule=window (V1 only, checked): vLLM generates a whole window right after a sync and
        # sleeps at verl's own level; a skipped slot neither transfers nor wakes (.window)
        with advisories_silenced():
            self.knobs = check_window_config(full_config, knobs=self.knobs)  # rollout_schedule=auto resolved
        self.windowed = self.knobs.rollout_schedule == WINDOW
        if lagged and self.knobs.keep_weights == "sleep_level1" and self.free_cache_engine and not self.windowed:
            self.server_reports = keep_weights_across_sleep(self.replicas, level=1)
        # Whether a woken vLLM still holds the weights of its last sync. If not (sync_period=1 with
        # verl's level-2 sleep), every call is a real sync, exactly as verl does.
        self.keeps_weights = (lagged and not self.windowed) or not self.free_cache_engine
        # the trainer's window schedule (rollout_schedule=window): its batches' lags replace the sync schedule's
        self.window_schedule: Optional[WindowSchedule] = None
        # The exact check that a wake without a sync serves α (:mod:`.served_weights`): a fingerprint of
        # the served weights recorded in every vLLM worker at each real sync, compared at each such wake.
        # A windowed rollout never wakes vLLM without a sync (free_cache_engine=false too), so it records and
        # checks nothing; at v = 1 nothing is ever served without a sync.
        self.verify_weights = (bool(self.knobs.verify_served_weights) and self.keeps_weights and lagged
                               and not self.windowed)
        # The exact check that each real sync reached vLLM (:mod:`.sync_reached`), both schedules at v > 1: the
        # served weights change at a sync exactly when the trainer's (as vLLM's dtype) changed since the last one.
        self.verify_syncs = bool(self.knobs.verify_served_weights) and lagged
        self.tensor_parallel_size = as_integer(_get(full_config, "actor_rollout_ref.rollout.tensor_model_parallel_size", 1),
                                               "actor_rollout_ref.rollout.tensor_model_parallel_size") or 1
        # with vLLM data parallelism inside a replica the check reaches the leader's shard only (.served_weights)
        self.data_parallel_size = rollout_data_parallel_size(full_config)
        # A window's lagged batches come from the phase whose lag-0 batch met the strict limit; that speaks for every
        # engine only where that batch's B·n requests can reach them all (verl's router: fewest in flight first)
        self.lag0_batch_reaches_every_engine = lag0_batch_reaches_every_engine(full_config)
        # the start-up checks warn of both narrowings (config.guard_checks.narrowed_lines): a window's lag-0 batch
        # smaller than the engines, and data parallelism, where the check that each sync reached vLLM needs every
        # vLLM worker's answer, which collective_rpc does not return
        if self.data_parallel_size > 1:
            self.verify_syncs = False
        rollout_dtype = _get(full_config, "actor_rollout_ref.rollout.dtype", "bfloat16")
        self.rollout_dtype = sync_reached.DTYPES.get(str(rollout_dtype))
        if self.verify_syncs and self.rollout_dtype is None:
            self.verify_syncs = False
            logger.warning(
                "verl-offgrpo: actor_rollout_ref.rollout.dtype=%s: the check that each sync reached vLLM compares "
                "the trainer's weights cast to vLLM's dtype, and knows only %s; it is off for this run.",
                rollout_dtype, sorted(set(sync_reached.DTYPES.values())),
            )  # fmt: skip
        self.verify_tensors = sync_reached.tensors_checkable(
            _get(full_config, "actor_rollout_ref.rollout.checkpoint_engine.backend", None), self.rollout_dtype,
            vllm_quantization(full_config))
        self.actor_tensors: Optional[list[dict]] = None  # per actor rank, its tensors' fingerprints at the last sync
        # vLLM's packed_modules_mapping (from the first record), which places the trainer's tensors in vLLM's fused ones
        self.packed: Optional[dict[str, list[str]]] = None
        # the rule that each tensor vLLM holds whole is the trainer's cast (:mod:`.served_cast`): the (replica, tensor)
        # pairs the calibrating syncs found alike and unlike, and whether those syncs are over
        self.verify_cast = self.verify_tensors
        self.cast_trusted: set[tuple[int, str]] = set()
        self.cast_left_out: set[tuple[int, str]] = set()
        self.cast_armed = False
        self.told_no_tensor_names = False
        self.told_no_whole_copies = False
        self.record_answers: list = []  # per replica, its vLLM workers' answers to the last served-weights record
        self.last_sync_step: Optional[int] = None
        self.history: list[SlotDecision] = []
        self.metrics_by_step: dict[int, dict] = {}
        # the first slot logs nothing of its own; what it did (π_ref ← π_θ on resume) goes with the next step
        self.first_slot_metrics: dict = {}
        self.last_metrics: dict = {}
        self.cache_emptied_hint_shown = False
        if trainer_kind == "v0":
            tracking_merge.apply()
            v0_advantage_metrics.apply(self._stash_v0_step_metrics, full_config.algorithm,
                                       guards_verls=guards_verls_advantage(full_config))
        logger.info(
            "verl-offgrpo: lagged sync v=%d keep_weights=%s free_cache_engine=%s (%s trainer)",
            self.knobs.sync_period,
            self.knobs.keep_weights,
            self.free_cache_engine,
            trainer_kind,
        )

    # ------------------------------------------------------------------ schedule
    def _force(self, step: Optional[int]) -> bool:
        if step is None or not self.knobs.sync_before_validate:
            return False
        test_freq = _get(self.trainer.config, "trainer.test_freq", -1)
        total = getattr(self.trainer, "total_training_steps", None)
        return validation_follows(int(step), int(test_freq), total)

    @auto_await
    async def update_weights(self, global_steps: int = None):
        start = time.perf_counter()
        decision = self.schedule.decide(global_steps, force=self._force(global_steps))
        result: Any = {}
        slot_metrics: dict[str, float] = {}
        windowed_repeat = self.windowed and decision.reason == REPEAT
        if decision.sync or windowed_repeat or (not self.windowed and not self.keeps_weights):
            result = await super().update_weights(global_steps)
            if self.verify_weights or self.verify_syncs:
                slot_metrics = await self.verify_served_weights("record", decision)
            if self.verify_syncs:
                slot_metrics.update(await self.verify_sync_reached(decision))
        elif self.windowed:
            pass  # the window's batches are already generated: vLLM stays asleep until the window's last slot
        else:
            slot_metrics = await self.wake_without_sync()
            if self.verify_weights:
                slot_metrics.update(await self.verify_served_weights("check", decision))
        self.schedule.commit(decision)
        self.history.append(decision)
        # π_ref ← π_θ every R steps (algorithm.off_grpo.ref_reset_period), at the same end-of-step slot
        ref_metrics = {}
        if decision.reason != REPEAT and self.trainer is not None:
            from verl_offgrpo.ref_reset import maybe_reset_reference

            ref_metrics = maybe_reset_reference(self.trainer, global_steps, at_init=decision.reason == FIRST)
        if decision.reason == FIRST and ref_metrics:  # the resume's reset: logged with the next step's slot
            self.first_slot_metrics = ref_metrics
        if decision.reason not in (FIRST, REPEAT):
            metrics = {
                **self.first_slot_metrics,
                **ref_metrics,
                "off_grpo/synced": float(decision.sync),
                "off_grpo/lag": float(self._lag_after(decision)),
                "off_grpo/weights_version": float(decision.version_after),
                "off_grpo/num_syncs": float(self.schedule.num_syncs),
                "timing_s/off_grpo_sync": time.perf_counter() - start,
                **slot_metrics,
            }
            rollout_lag = self.rollout_lag_of(decision.step) if self.window_schedule else decision.rollout_lag
            if rollout_lag is not None:
                metrics["off_grpo/rollout_lag"] = float(rollout_lag)
            self.first_slot_metrics = {}
            self.last_metrics = metrics
            self._record(decision.step, metrics)
        return result

    @auto_await
    async def sleep_replicas(self):
        """verl's sleep of the replicas after a rollout, timed: ``timing_s/off_grpo_sleep`` of the
        current step (summed if the step sleeps twice, e.g. after validation).

        verl calls it inside its ``timing_s/gen`` timer. At v = 1 and in a window vLLM sleeps at verl's
        level 2 (weights discarded); at v > 1 with per_step and ``keep_weights=sleep_level1`` at level 1, which
        copies α to host memory after every rollout, synced step or not: a cost of the lag that
        ``timing_s/gen`` would otherwise hide.
        """
        start = time.perf_counter()
        await super().sleep_replicas()
        step = int(getattr(self.trainer, "global_steps", 0) or 0)
        slept = self.metrics_by_step.get(step, {}).get("timing_s/off_grpo_sleep", 0.0)
        self._record(step, {"timing_s/off_grpo_sleep": slept + time.perf_counter() - start})

    def _record(self, step: int, metrics: dict) -> None:
        """Add ``metrics`` to step ``step``'s (v0: also to what ``Tracking.log(step=step)`` merges);
        forget steps more than 8 older."""
        stores = [self.metrics_by_step] + ([tracking_merge.PENDING_METRICS] if self.trainer_kind == "v0" else [])
        for store in stores:
            store.setdefault(step, {}).update(metrics)
            for old in [s for s in store if s < step - 8]:
                del store[old]

    async def wake_without_sync(self) -> dict[str, float]:
        """A skipped sync: no resharding, no transfer; vLLM wakes with α (or never slept).

        The wake is verl's own sequence of a sync, minus the transfer: the weights (vLLM restores α
        from its level-1 CPU copy), then the KV cache (``resume_kv_cache``). Returns the wall time of
        each part (``timing_s/off_grpo_skip_*``; empty with ``no_sleep``):

        * ``empty_cache``: the actor workers' torch cache, emptied before vLLM takes memory back
          (``algorithm.off_grpo.empty_cache_on_skip``; with ``if_needed`` a worker keeps it when vLLM's
          pool fits anyway, and then does not wait for its queued device work either). Also
          ``timing_s/off_grpo_skip_actor_wait`` (longest wait of an emptying worker for that work),
          ``off_grpo/skip_cache_emptied_frac`` (share of the workers that emptied),
          ``off_grpo/skip_min_free_frac`` (least free device memory before, as a fraction) and
          ``off_grpo/skip_wake_needs_frac`` (``rollout.gpu_memory_utilization``); the first time
          ``if_needed`` empties a worker's cache it warns once (:data:`CACHE_EMPTIED_HINT`) with the
          ``gpu_memory_utilization`` that would have kept it;
        * ``wake_weights``: α restored from host memory into vLLM's weight buffers;
        * ``wake_kv_cache``: vLLM's KV cache mapped again;
        * ``wake``: the two wakes together.
        """
        if not self.free_cache_engine:
            return {}
        start = time.perf_counter()
        keep_if_fits = self.wake_fraction if self.knobs.empty_cache_on_skip == "if_needed" else None
        reports = ray.get([worker.__ray_call__.remote(empty_device_cache, keep_if_fits) for worker in self.actor_workers()])
        emptied = time.perf_counter()
        await asyncio.gather(*[server.wake_up.remote(tags=["weights"]) for server in replica_servers(self.replicas)])
        weights_woken = time.perf_counter()
        await self.resume_kv_cache_replicas()
        done = time.perf_counter()
        cache = {}
        if reports:
            cache["off_grpo/skip_cache_emptied_frac"] = sum(r["emptied"] for r in reports) / len(reports)
            free = [r["free_frac"] for r in reports if r["free_frac"] is not None]
            if free:
                cache["off_grpo/skip_min_free_frac"] = min(free)
                cache["off_grpo/skip_wake_needs_frac"] = self.wake_fraction
                emptied_if_needed = keep_if_fits is not None and any(r["emptied"] for r in reports)
                if emptied_if_needed and not self.cache_emptied_hint_shown:
                    self.cache_emptied_hint_shown = True
                    logger.warning(CACHE_EMPTIED_HINT, min(free), self.wake_fraction, min(free))
            cache["timing_s/off_grpo_skip_actor_wait"] = max(r["wait_s"] for r in reports)
        return {
            **cache,
            "timing_s/off_grpo_skip_empty_cache": emptied - start,
            "timing_s/off_grpo_skip_wake_weights": weights_woken - emptied,
            "timing_s/off_grpo_skip_wake_kv_cache": done - weights_woken,
            "timing_s/off_grpo_skip_wake": done - emptied,
        }

    def rollout_lag_of(self, step: int) -> Optional[int]:
        """Staleness of the batch trained in step ``step``: the window's (``rollout_schedule=window``:
        every batch of a window comes from the sync before it, whatever a forced sync did since) or
        the sync schedule's."""
        if self.window_schedule is not None:
            return self.window_schedule.rollout_lag(step)
        return self.schedule.rollout_lag_of(step)

    def _lag_after(self, decision: SlotDecision) -> int:
        """``off_grpo/lag`` of the slot: staleness of the next step's batch. In a window that batch is
        already buffered, so a forced sync (validation) does not change it (:meth:`.WindowSchedule.next_batch_lag`);
        else it is the age of the weights vLLM holds after the slot (:mod:`.schedule`)."""
        if self.window_schedule is not None:
            buffered = self.window_schedule.next_batch_lag(decision.step)
            if buffered is not None:
                return buffered
        return decision.lag

    async def verify_served_weights(self, action: str, decision: SlotDecision) -> dict[str, float]:
        """The exact served-weights check (:mod:`.served_weights`) in every vLLM worker of every replica.

        ``record`` (right after a real sync): each worker keeps a fingerprint of the weights it just
        loaded, α. ``check`` (after a wake without a sync): each worker compares what it serves now with
        its record, tolerance 0 (level-1 sleep restores the weights bit for bit); any difference raises
        :class:`ServedPolicyError` naming the step whose rollout would use the weights, the replica, the
        TP rank and the differing tensors, before that rollout. A windowed rollout never wakes vLLM
        without a sync, so it never checks (``verify_weights`` is off there); it records at each real sync
        when the check that the sync reached vLLM is on (``verify_syncs``), whose input is the record's
        answers (:attr:`record_answers`).

        Returns ``timing_s/off_grpo_verify_weights`` (the call's wall time, inside the slot's
        ``timing_s/off_grpo_sync``) and ``off_grpo/weights_verified`` (1 on a check, 0 on a record).
        """
        start = time.perf_counter()
        answers = await served_weights.call_replicas(self.replicas, action, decision.step)
        failures = served_weights.failures(answers)
        if failures and action == "check":
            raise ServedPolicyError(
                served_weights.mismatch_message(failures, decision.step, decision.reason == REPEAT, len(self.replicas))
            )
        if failures and self.tensor_parallel_size > 1:
            index, error = failures[0]
            raise ServedPolicyError(
                f"verl-offgrpo: step {decision.step}: could not record the served weights' fingerprint after the sync "
                f"on rollout replica {index}; with rollout TP > 1 a failed call leaves vLLM's executor out of step, so "
                "the run stops here. algorithm.off_grpo.verify_served_weights=false runs without the check: "
                + " ".join(str(error).split())[:1500]
            )
        if failures:
            # the check itself cannot run (e.g. an engine without verl's worker extension): say so loudly and
            # fall back to the r' monitor: per_step, its lagged limit is then an error again (check_served_policy)
            index, error = failures[0]
            logger.warning(
                "verl-offgrpo: could not record the served weights' fingerprint after the sync of step %s on rollout "
                "replica %s, so the exact check of algorithm.off_grpo.verify_served_weights is off for this run and "
                "%s instead: %s",
                decision.step, index,
                "max_log_rprime_after_sync on each window's first batch checks α" if self.windowed
                else "max_log_rprime_lagged stops the run", " ".join(str(error).split())[:1500],
            )  # fmt: skip
            self.verify_weights = self.verify_syncs = False
            return {"off_grpo/weights_verify_failed": 1.0}
        if action == "record":
            self.record_answers = answers
        return {
            "timing_s/off_grpo_verify_weights": time.perf_counter() - start,
            "off_grpo/weights_verified": float(action == "check"),
        }

    def actor_workers(self) -> list:
        """The actor worker group's Ray handles, where a skipped sync empties the torch cache and the sync check reads
        the trainer's weights (:func:`verl_offgrpo.worker_group.actor_handles`)."""
        return actor_handles(self.actor_wg, "the lagged sync", "actor_rollout_wg")

    async def verify_sync_reached(self, decision: SlotDecision) -> dict[str, float]:
        """The exact check that the sync just made reached every replica (:mod:`.sync_reached`): raises
        :class:`ServedPolicyError` if a replica's weights did not change as the trainer's did since the last real
        sync (per TP rank), or a tensor the trainer changed did not change in it, or a tensor every TP rank holds whole
        is not alike on all of them, or one a vLLM worker holds whole is not the trainer's cast (per tensor, where
        :attr:`verify_tensors`: :meth:`check_trainer_cast`). Returns ``timing_s/off_grpo_verify_sync``,
        ``off_grpo/trainer_changed`` (1 or 0; none at the first sync, which has nothing to compare with),
        ``off_grpo/sync_tensors_checked``, ``off_grpo/sync_copies_compared`` and ``off_grpo/sync_tensors_exact``."""
        start = time.perf_counter()
        workers = self.actor_workers()  # outside the try: no workers is verl's change, not a check that cannot run
        try:
            if self.packed is None:
                self.packed = sync_reached.packed_of(self.record_answers)
            reports = ray.get([w.__ray_call__.remote(sync_reached.actor_tensor_fingerprints, self.rollout_dtype,
                                                     self.packed) for w in workers])
            tensors = [r["tensors"] for r in reports]
            changed_tensors = sync_reached.trainer_changed_tensors(self.actor_tensors, tensors)
            changed = None if changed_tensors is None else bool(changed_tensors)
            # "unchanged ⇒ unchanged" only where vLLM keeps its weights across sleep (not after a level-2 sleep)
            asked = changed is not None and (changed or self.keeps_weights)
            breaking = sync_reached.replicas_breaking_the_rule(self.record_answers, changed) if asked else []
            if not self.verify_tensors:
                changed_tensors = None
            missing, checked, replicas = (sync_reached.tensors_that_did_not_arrive(self.record_answers, changed_tensors)
                                          if changed_tensors else ([], 0, 0))
            unequal, compared, tp_replicas = (
                sync_reached.replicas_with_unequal_copies(self.record_answers, sync_reached.trainer_numels(tensors))
                if self.verify_tensors else ([], 0, 0))
        except Exception as err:  # noqa: BLE001 - the check cannot run here: say so once, fall back to the r' monitor
            logger.warning(
                "verl-offgrpo: could not check that the sync of step %s reached vLLM, so that part of "
                "algorithm.off_grpo.verify_served_weights is off for this run: %s",
                decision.step, " ".join(str(err).split())[:1500],
            )  # fmt: skip
            self.verify_syncs = False
            return {"off_grpo/sync_verify_failed": 1.0}
        previous_step, self.actor_tensors, self.last_sync_step = self.last_sync_step, tensors, decision.step
        if breaking:
            raise ServedPolicyError(sync_reached.rule_broken_message(
                breaking, changed, decision.step, previous_step, len(self.replicas)))
        if missing:
            raise ServedPolicyError(sync_reached.tensors_message(missing, decision.step, previous_step,
                                                                 len(self.replicas)))
        if unequal:
            raise ServedPolicyError(sync_reached.unequal_copies_message(unequal, decision.step, len(self.replicas)))
        metrics = self.check_trainer_cast(reports, changed, decision.step, previous_step) if self.verify_cast else {}
        metrics["timing_s/off_grpo_verify_sync"] = time.perf_counter() - start
        if compared:
            metrics["off_grpo/sync_copies_compared"] = float(compared)
        elif tp_replicas and not self.told_no_whole_copies:
            self.told_no_whole_copies = True
            logger.warning(
                "verl-offgrpo: no 1-D tensor that every vLLM TP rank holds whole has a trainer tensor of its name and size "
                "(another naming, e.g. a multimodal model's), so the sync check does not compare the ranks' copies.",
            )  # fmt: skip
        if changed is not None:
            metrics["off_grpo/trainer_changed"] = float(changed)
        if changed_tensors and replicas:
            metrics["off_grpo/sync_tensors_checked"] = float(checked)
            if not checked and not self.told_no_tensor_names:
                self.told_no_tensor_names = True
                logger.warning(
                    "verl-offgrpo: none of the %d tensors the trainer changed by step %s has a vLLM tensor of its name "
                    "(after vLLM's packed modules), so the sync check reads whole TP ranks only, not tensors.",
                    len(changed_tensors), decision.step,
                )  # fmt: skip
        return metrics

    def check_trainer_cast(self, reports: list[dict], changed: Optional[bool], step: int,
                           previous_step: Optional[int]) -> dict[str, float]:
        """The rule of :mod:`.served_cast` at the sync of ``step``: each tensor a vLLM worker holds whole is the
        trainer's (the actor ranks' ``reports``) cast to vLLM's dtype. A calibrating sync
        (:func:`.served_cast.calibrates`) trusts the (replica, tensor) pairs it finds alike and warns of the others
        (raises where another replica holds the tensor alike: the replicas get the same weights); any
        other sync compares the trusted pairs and raises :class:`ServedPolicyError` on a difference. Returns
        ``off_grpo/sync_tensors_exact``. A failure of the comparison itself turns this rule off (a warning), not the
        others."""
        try:
            unplaced = {name for report in reports for name in report.get("unplaced") or ()}
            composed = served_cast.composed_fingerprints([r["tensors"] for r in reports], unplaced, self.packed)
            calibrating = served_cast.calibrates(self.cast_armed, changed)
            unlike, alike, exact = served_cast.compare_with_trainer(
                self.record_answers, composed, None if calibrating else self.cast_trusted, self.cast_left_out)
        except Exception as err:  # noqa: BLE001 - this rule cannot run here: say so once, the other rules stay on
            logger.warning(
                "verl-offgrpo: could not compare vLLM's weights with the trainer's cast at the sync of step %s, so "
                "that rule of algorithm.off_grpo.verify_served_weights is off for this run (the other sync rules "
                "stay on): %s",
                step, " ".join(str(err).split())[:1500],
            )  # fmt: skip
            self.verify_cast = False
            return {}
        if not calibrating and unlike:
            raise ServedPolicyError(served_cast.unlike_message(unlike, step, self.rollout_dtype, len(self.replicas),
                                                               previous_step))
        if calibrating and (odd := served_cast.unlike_where_another_replica_is_alike(unlike, alike)):
            raise ServedPolicyError(served_cast.replicas_disagree_message(odd, step, self.rollout_dtype,
                                                                          len(self.replicas)))
        if calibrating:
            self.cast_left_out |= served_cast.pairs_of(unlike)
            self.cast_trusted = (self.cast_trusted | alike) - self.cast_left_out
            self.cast_armed = bool(changed)
            exact -= served_cast.copies_of(unlike)
            if unlike:
                logger.warning(served_cast.left_out_warning(unlike, exact, self.rollout_dtype, step))
            if changed is None and not exact:
                logger.warning(served_cast.nothing_compared_warning())
        return {served_cast.COMPARED: float(exact)} if exact else {}

    @property
    def lagged_limit_warns(self) -> bool:
        """Whether a lagged batch over ``max_log_rprime_lagged`` only warns: in a window (its lagged batches come
        from the generation phase whose lag-0 batch the strict limit checked: no wake, no transfer since) whose
        lag-0 batch can reach every engine and whose sync the exact check saw reach every vLLM worker (a stale
        engine among several moves the lag-0 batch's mean by its share only), or with the exact check on every
        vLLM worker at each wake; else that limit is the only check left, and stops the run (in a window too when
        ``max_log_rprime_after_sync`` = 0: no lag-0 batch was checked to vouch for the phase)."""
        window_checked = (self.windowed and self.lag0_batch_reaches_every_engine and self.verify_syncs
                          and self.knobs.max_log_rprime_after_sync > 0)
        return window_checked or self.every_wake_checked_exactly

    @property
    def every_wake_checked_exactly(self) -> bool:
        """Whether the exact served-weights check covers every vLLM worker that samples a lagged batch (on, and
        no data-parallel shard out of its reach): then a lagged batch over ``max_log_rprime_lagged`` only warns."""
        return self.verify_weights and self.data_parallel_size == 1

    def check_served_policy(self, metrics: dict, step: int) -> dict[str, float]:
        """The r' monitor (:mod:`.alpha_guard`) on step ``step``'s bound-monitor metrics: raises if |log r'|
        is far above the engine floor (lag 0) or NaN; on a lagged batch above what a lag gives it warns
        (:attr:`lagged_limit_warns`) or raises.
        Returns its metrics (``off_grpo/guard/*``) for the step."""
        lag = self.rollout_lag_of(step)
        knobs = self.knobs
        return check_served_policy(
            metrics, lag, knobs.max_log_rprime_after_sync, step, knobs.max_log_rprime_lagged,
            lagged_is_error=not self.lagged_limit_warns,
            served_alpha_because=SAME_PHASE_AS_LAG_0 if self.windowed else EXACT_CHECK_PASSED,
            seq_limit=knobs.max_seq_log_rprime_after_sync,
        )  # fmt: skip

    def _stash_v0_step_metrics(self, metrics: dict) -> None:
        """v0: metrics computed during the trainer's current step, logged with that step (after the guard)."""
        step = int(getattr(self.trainer, "global_steps", 0))
        tracking_merge.PENDING_METRICS.setdefault(step, {}).update(metrics)
        tracking_merge.PENDING_METRICS[step].update(self.check_served_policy(metrics, step))

    def step_metrics(self, step: int) -> dict:
        """The metrics of step ``step``: its slot's (none for the first slot or one that did not run)
        and its sleep's."""
        return dict(self.metrics_by_step.get(step, {}))
