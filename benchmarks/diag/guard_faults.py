"""Fault injection for ``benchmarks/guard_faults_gpu.py``: make vLLM serve something other than α, from
outside the plugin's code path (lab only, never for training).

Loaded in every verl process of a job through ``VERL_USE_EXTERNAL_MODULES=benchmarks.diag.guard_faults``
(the repo root is on the jobs' ``PYTHONPATH``; ``benchmarks`` is a namespace package). It acts only in
vLLM's worker processes, where it patches vLLM's own ``Worker`` (``vllm.v1.worker.gpu_worker``) as soon as
that module is imported; elsewhere it does nothing. ``OFFGRPO_GUARD_FAULT`` picks the fault:

* ``level2``: every ``Worker.sleep`` runs at level 2 (weights discarded), whatever level it was asked for.
  The plugin's sleep-level override in the server still reports level 1: the failure of issue 32.
* ``perturb``: at the first weights wake after the worker's K-th real sync (``OFFGRPO_GUARD_FAULT_AFTER_SYNC``,
  default 2; a sync = verl's ``update_weights_from_ipc`` on this worker), one element of the first matrix
  of decoder layer L (``OFFGRPO_GUARD_FAULT_LAYER``, default 3) gains one ulp (its bits + 1), on TP rank
  ``OFFGRPO_GUARD_FAULT_RANK`` (default: the last rank).
* ``noise``: as ``perturb``, but that whole tensor gets Gaussian noise of 1e-3 times its RMS.
* ``stale_sync``: the worker's K-th real sync (``OFFGRPO_GUARD_FAULT_AFTER_SYNC``) is received as usual, then
  every parameter is put back as it was before it, on every rank: vLLM keeps the previous sync's weights.
* ``stale_sync_rank``: as ``stale_sync``, on TP rank ``OFFGRPO_GUARD_FAULT_RANK`` only (default: the last rank):
  the sync reaches the other ranks, so the replica as a whole changed.
* ``stale_sync_tensor``: as ``stale_sync``, on every rank, for one tensor only: the first parameter of decoder
  layer L (``OFFGRPO_GUARD_FAULT_LAYER``): every rank changed, that tensor did not.
* ``stale_sync_rank_norm``: as ``stale_sync_rank``, for one tensor only: the first layer norm of decoder layer L,
  a tensor every TP rank holds whole: every rank changed, and the norm changed on the other ranks (run it at --tp 2).
* ``corrupt_sync_tensor``: the worker's K-th real sync is received as usual, then one element of the first matrix
  of decoder layer L gains one ulp on TP rank ``OFFGRPO_GUARD_FAULT_RANK`` (as ``perturb``, but right after the
  sync): that tensor changed at the sync, yet is not the trainer's cast (at TP = 1 the exact rule's to catch, in
  either rollout schedule).

Each injection prints a ``[guard-fault]`` line (the vLLM worker's output reaches the job's console log).
"""

from __future__ import annotations

import os
import sys

FAULT = os.environ.get("OFFGRPO_GUARD_FAULT", "").strip()
AFTER_SYNC = int(os.environ.get("OFFGRPO_GUARD_FAULT_AFTER_SYNC", "2"))
LAYER = int(os.environ.get("OFFGRPO_GUARD_FAULT_LAYER", "3"))
RANK = os.environ.get("OFFGRPO_GUARD_FAULT_RANK", "last")
GPU_WORKER = "vllm.v1.worker.gpu_worker"
EXTENSION_MODULE = "verl.workers.rollout.vllm_rollout.utils"
FAULTS = ("level2", "perturb", "noise", "stale_sync", "stale_sync_rank", "stale_sync_tensor", "stale_sync_rank_norm",
          "corrupt_sync_tensor")
STALE_SYNCS = ("stale_sync", "stale_sync_rank", "stale_sync_tensor", "stale_sync_rank_norm")
#: the faults that act on one TP rank only (``OFFGRPO_GUARD_FAULT_RANK``)
ONE_RANK = ("stale_sync_rank", "stale_sync_rank_norm", "corrupt_sync_tensor")
#: the faults injected at the K-th sync
AT_SYNC = STALE_SYNCS + ("corrupt_sync_tensor",)
_MARK = "__guard_fault_patched__"


def _say(text: str) -> None:
    print(f"[guard-fault] pid {os.getpid()}: {text}", flush=True)


def _wrap_syncs() -> None:
    """Wrap verl's worker-extension ``update_weights_from_ipc`` (once per process) to count a worker's real syncs;
    with ``stale_sync`` its K-th call receives the weights, then copies the ones from before it back (the
    transfer's handshake stays verl's)."""
    module = sys.modules.get(EXTENSION_MODULE)
    cls = getattr(module, "vLLMColocateWorkerExtension", None)
    if cls is None or getattr(cls.update_weights_from_ipc, _MARK, False):
        return
    original = cls.update_weights_from_ipc

    def update_weights_from_ipc(self, *args, **kwargs):
        self._guard_fault_syncs = getattr(self, "_guard_fault_syncs", 0) + 1
        if FAULT not in AT_SYNC or self._guard_fault_syncs != AFTER_SYNC:
            return original(self, *args, **kwargs)
        if FAULT in ONE_RANK and getattr(self, "rank", None) != _target_rank(self):
            return original(self, *args, **kwargs)
        if FAULT == "corrupt_sync_tensor":
            out = original(self, *args, **kwargs)
            _perturb(self, ulp=True, when=f"right after sync #{self._guard_fault_syncs}")
            return out
        import torch

        named = list(self.model_runner.model.named_parameters())
        if FAULT == "stale_sync_tensor":
            named = [next((n, p) for n, p in named if f"layers.{LAYER}." in n)]
        if FAULT == "stale_sync_rank_norm":
            named = [next((n, p) for n, p in named if f"layers.{LAYER}." in n and "layernorm" in n)]
        params = [p for _, p in named]
        before = [p.detach().clone() for p in params]
        out = original(self, *args, **kwargs)
        moved = sum(not torch.equal(param, old) for param, old in zip(params, before))
        with torch.no_grad():
            for param, old in zip(params, before):
                param.copy_(old)
        # "moved": how many of them the sync changed; 0 means the put-back left vLLM on what it was sent (untestable)
        _say(f"{FAULT}: rank {getattr(self, 'rank', '?')}: sync #{self._guard_fault_syncs} received, then the "
             f"{len(params)} parameter tensor(s) from before it put back ({named[0][0]}, ...); moved {moved}")  # fmt: skip
        return out

    setattr(update_weights_from_ipc, _MARK, True)
    cls.update_weights_from_ipc = update_weights_from_ipc


def _target_rank(worker) -> int:
    if RANK != "last":
        return int(RANK)
    parallel = getattr(worker, "parallel_config", None) or getattr(getattr(worker, "vllm_config", None), "parallel_config", None)
    return int(getattr(parallel, "tensor_parallel_size", 1) or 1) - 1


def _perturb(worker, ulp: bool, when: str) -> None:
    import torch

    model = worker.model_runner.model
    for name, param in model.named_parameters():
        if f"layers.{LAYER}." in name and param.dim() >= 2:
            break
    else:
        name, param = next(iter(model.named_parameters()))
    with torch.no_grad():
        if ulp:
            flat = param.data.view(-1)
            words = flat.view(torch.int16) if flat.element_size() == 2 else flat.view(torch.uint8)
            words[0] += 1
            what = "one ulp added to element 0"
        else:
            rms = param.data.float().pow(2).mean().sqrt()
            param.data.add_((torch.randn_like(param.data, dtype=torch.float32) * 1e-3 * rms).to(param.dtype))
            what = "Gaussian noise of 1e-3 RMS added to every element"
    _say(f"{FAULT}: rank {getattr(worker, 'rank', '?')}: {name} {tuple(param.shape)}: {what} ({when})")


def patch_worker(module) -> None:
    """Patch vLLM's ``Worker`` (``module`` = :data:`GPU_WORKER`) for :data:`FAULT`; idempotent."""
    worker_cls = module.Worker
    if getattr(worker_cls, _MARK, False):
        return
    setattr(worker_cls, _MARK, True)
    if FAULT == "level2":
        original_sleep = worker_cls.sleep

        def sleep(self, level: int = 1):
            if not getattr(self, "_guard_fault_said", False):
                self._guard_fault_said = True
                _say(f"level2: rank {getattr(self, 'rank', '?')}: vLLM asked to sleep at level {level}; sleeping at level 2 "
                     "from now on (weights discarded)")  # fmt: skip
            return original_sleep(self, level=2)

        worker_cls.sleep = sleep
    elif FAULT in ("perturb", "noise"):
        original_wake = worker_cls.wake_up

        def wake_up(self, tags=None):
            _wrap_syncs()
            out = original_wake(self, tags)
            weights = tags is None or "weights" in tags
            if (weights and not getattr(self, "_guard_fault_done", False)
                    and getattr(self, "_guard_fault_syncs", 0) >= AFTER_SYNC and getattr(self, "rank", 0) == _target_rank(self)):
                self._guard_fault_done = True
                _perturb(self, ulp=FAULT == "perturb", when=f"first weights wake after sync #{self._guard_fault_syncs}")
            return out

        worker_cls.wake_up = wake_up
    elif FAULT in AT_SYNC:
        original_wake = worker_cls.wake_up

        def wake_up(self, tags=None):  # every sync wakes the weights first: the extension is loaded by then
            _wrap_syncs()
            return original_wake(self, tags)

        worker_cls.wake_up = wake_up


def install() -> None:
    if not FAULT:
        return
    if FAULT not in FAULTS:
        raise ValueError(f"OFFGRPO_GUARD_FAULT={FAULT!r}: one of {FAULTS}")
    from verl_offgrpo.patches.post_import import on_import

    on_import(GPU_WORKER, "Worker", patch_worker)


install()
