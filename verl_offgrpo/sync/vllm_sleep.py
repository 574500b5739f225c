"""Keep α in vLLM across verl's sleep/wake cycle (``algorithm.off_grpo.keep_weights``).

verl puts every rollout replica to sleep right after generation. For a colocated (hybrid) model,
``vLLMHttpServer._sleep_hybrid`` sleeps at ``self._resolve_sleep_level()``, which is 2. vLLM's level-2
sleep discards the weights, so a woken engine that did not get a weight sync would serve garbage. At
level 1 vLLM copies the weights to CPU and restores them on wake. (verl 0.9.1's ``vLLMHttpServer.release_kv_cache``,
which a checkpoint-engine backend other than ``naive`` calls before its transfer, sleeps at that level too, so
the override sets its level as well.)

``sleep_level1``: the lagged checkpoint manager calls :func:`override_sleep_level` on each
``vLLMHttpServer`` actor of the policy replicas through Ray's ``__ray_call__``. The function runs
in the server actor's own process and shadows ``_resolve_sleep_level`` on that instance only (a
patch in the driver would not reach it; reward-model and teacher replicas are untouched). It
returns what the server now resolves, so the driver can check it took. This is not an import-time
patch (:mod:`verl_offgrpo.patches`): it acts on chosen server objects, at run time. The verl members
it relies on are :data:`VERL_INTERNALS`, which :func:`verl_offgrpo.patches.preflight` checks before a
selecting job starts (where vllm is installed).

``no_sleep``: ``rollout.free_cache_engine=False``; in verl 0.9.1 this makes ``vLLMHttpServer.sleep``
and its KV-cache freeing no-ops and the worker's naive ``update_weights`` skips ``resume``: vLLM keeps
weights and KV cache on the GPU all the time. Nothing to patch.

This module never imports vllm: the server object is only touched through attributes.
"""

from __future__ import annotations

import time
from typing import Any

import ray

from ..accelerator import available_device

SLEEP_LEVEL_ATTR = "_off_grpo_sleep_level"
#: verl's rollout server class, one of whose instances :func:`override_sleep_level` changes
SERVER_CLASS = "verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer"
#: the server members it needs: ``_resolve_sleep_level`` (private, shadowed on the instance), the private
#: ``_sleep_hybrid`` that calls it, and ``sleep``/``wake_up`` (the lagged manager's wake)
SERVER_MEMBERS = ("_resolve_sleep_level", "_sleep_hybrid", "sleep", "wake_up")
#: the server's other members the plugin relies on: ``release_kv_cache`` (also sleeps at the shadowed level) and
#: ``collective_rpc`` (the served-weights check's calls to vLLM's workers, :func:`.served_weights.call_replicas`)
OTHER_SERVER_MEMBERS = ("release_kv_cache", "collective_rpc")
#: Written for verl 0.9.1: the verl attributes this module overrides (per instance) or relies on;
#: :func:`verl_offgrpo.patches.preflight` checks they exist (:data:`verl_offgrpo.patches.INTERNALS_MODULES`). Instance
#: attributes, which exist only once verl's constructors ran, are read too: ``RolloutReplica.servers``
#: (:func:`replica_servers`) and the server's ``config``, ``rollout_mode``, ``node_rank`` and ``global_steps``.
VERL_INTERNALS = tuple(f"{SERVER_CLASS}.{name}" for name in SERVER_MEMBERS + OTHER_SERVER_MEMBERS)
#: How verl 0.9.1's server uses them (:func:`verl_offgrpo.patches.uses_problems`): ``_sleep_hybrid`` and
#: ``release_kv_cache`` sleep at ``self._resolve_sleep_level()`` (else the override would not take), and ``wake_up``
#: takes ``tags`` (the lagged manager wakes α's weights alone, then the KV cache).
VERL_USES = (
    (f"{SERVER_CLASS}._sleep_hybrid", ("_resolve_sleep_level",)),
    (f"{SERVER_CLASS}.release_kv_cache", ("_resolve_sleep_level",)),
    (f"{SERVER_CLASS}.wake_up", ("tags",)),
)


def override_sleep_level(server: Any, level: int) -> dict:
    """Run inside a ``vLLMHttpServer`` actor (via ``__ray_call__``): sleep at ``level`` from now on."""
    missing = [name for name in SERVER_MEMBERS if not hasattr(server, name)]
    if missing:
        raise RuntimeError(
            f"verl-offgrpo: rollout server {type(server).__name__} lacks {missing}; the sleep-level override "
            "was written for verl 0.9.1's vLLMHttpServer."
        )

    def _resolve_sleep_level() -> int:
        return level

    # Replaces verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer._resolve_sleep_level
    # (written for verl 0.9.1) on this one server object, in its own actor process.
    server._resolve_sleep_level = _resolve_sleep_level
    setattr(server, SLEEP_LEVEL_ATTR, level)
    config = getattr(server, "config", None)
    mode = getattr(server, "rollout_mode", None)
    return {
        "sleep_level": server._resolve_sleep_level(),
        "rollout_mode": getattr(mode, "value", mode),
        "free_cache_engine": getattr(config, "free_cache_engine", None),
        "node_rank": getattr(server, "node_rank", None),
        "server_class": type(server).__name__,
    }


def read_server_state(server: Any) -> dict:
    """Run inside a server actor: its sleep level and weight version (for checks and tests)."""
    return {
        "sleep_level": server._resolve_sleep_level(),
        "override": getattr(server, SLEEP_LEVEL_ATTR, None),
        "global_steps": getattr(server, "global_steps", None),
    }


def replica_servers(replicas, leaders_only: bool = False) -> list:
    """The launched servers of the policy ``replicas`` (verl's ``RolloutReplica.servers``), every one, or
    with ``leaders_only`` the first of each replica: node rank 0, which owns vLLM's engine (``collective_rpc``)."""
    servers = []
    for replica in replicas:
        handles = getattr(replica, "servers", None)
        if not handles:
            raise RuntimeError(f"verl-offgrpo: rollout replica {type(replica).__name__} has no launched servers.")
        servers.extend(handles[:1] if leaders_only else handles)
    return servers


def keep_weights_across_sleep(replicas, level: int = 1) -> list[dict]:
    """Driver side: make every server of ``replicas`` sleep at ``level``; verify and return their reports."""
    servers = replica_servers(replicas)
    reports = ray.get([server.__ray_call__.remote(override_sleep_level, level) for server in servers])
    for report in reports:
        if report["sleep_level"] != level:
            raise RuntimeError(f"verl-offgrpo: sleep-level override did not take on a rollout server: {report}")
        if report["rollout_mode"] not in (None, "hybrid"):
            raise RuntimeError(
                "verl-offgrpo: algorithm.off_grpo.sync_period > 1 needs the colocated hybrid rollout "
                f"(actor_rollout_ref.hybrid_engine=true); a server runs in mode {report['rollout_mode']!r}."
            )
    return reports


def keeps_device_cache(free_bytes: int, total_bytes: int, wake_fraction: float | None) -> bool:
    """Whether an actor worker may keep its torch cache on a skipped sync (``empty_cache_on_skip=if_needed``).

    vLLM's pool (weights + KV cache) is at most ``rollout.gpu_memory_utilization`` × total memory, so
    its wake fits if free ≥ wake_fraction · total. ``wake_fraction`` None (``always``): never keep.
    """
    return wake_fraction is not None and free_bytes >= wake_fraction * total_bytes


def empty_device_cache(worker: Any, wake_fraction: float | None = None) -> dict:
    """Run inside an actor worker (via ``__ray_call__``): free the torch cache before vLLM wakes.

    verl's naive sync does this before resuming vLLM; a skipped sync must too, or the memory the
    actor update left cached can make vLLM's wake-up run out of device memory, unless the wake fits
    anyway (:func:`keeps_device_cache`). Returns ``{"emptied", "free_frac", "wait_s"}``: whether the
    cache was emptied, the free fraction of device memory before (None without a device), and the
    seconds spent waiting for the device work the actor still had queued.

    Reading the free memory needs no wait: the caching allocator hands memory back to the driver only
    in ``empty_cache``, so queued work cannot change what ``mem_get_info`` reports. A worker that keeps
    its cache therefore returns at once, and the work the actor update queued runs on in the worker's
    stream while vLLM, in its own process, wakes (verl queues its FSDP offload copies ``non_blocking``,
    and waiting for them can be most of a skipped slot). Stream order keeps it correct: the actor's next use of those tensors is
    queued behind it. A worker that empties its cache waits first.
    """
    device = available_device()
    report = {"emptied": True, "free_frac": None, "wait_s": 0.0}
    if device is not None:
        free, total = device.mem_get_info()
        report["free_frac"] = free / total
        if keeps_device_cache(free, total, wake_fraction):
            report["emptied"] = False
        else:
            start = time.perf_counter()
            device.synchronize()
            report["wait_s"] = time.perf_counter() - start
            device.empty_cache()
    if report["emptied"]:
        worker._off_grpo_empty_cache_calls = getattr(worker, "_off_grpo_empty_cache_calls", 0) + 1
    return report
