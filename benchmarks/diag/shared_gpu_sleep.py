"""vLLM's sleep beside another job on the same GPU (lab only: two learning jobs a GPU, NOTEBOOK §14).

vLLM 0.24's ``Worker.sleep`` (``vllm/v1/worker/gpu_worker.py``) reads the **device's** free memory
before and after its allocator sleeps and asserts it grew::

    freed = free_after − free_before ≥ 0        (torch.cuda.mem_get_info: the whole GPU, every process)

A neighbouring job that allocates in that moment makes ``freed`` negative, and the job dies with
"Memory usage increased after sleeping." although its own sleep was done (the allocator has slept
before the assertion runs). Where ``OFFGRPO_SHARED_GPU_SLEEP=1`` (``mainppo_job.on_gpus`` sets it for
jobs that share a GPU), :func:`install` wraps ``Worker.sleep`` so that exactly this assertion prints
:data:`MESSAGE` instead of failing; any other error still fails. Loaded by ``diag/sitecustomize.py`` in
every process of such a job (vLLM's engine-core workers included).
"""

from __future__ import annotations

import functools
import os

ENV = "OFFGRPO_SHARED_GPU_SLEEP"
MODULE = "vllm.v1.worker.gpu_worker"
ASSERTION = "Memory usage increased after sleeping."
MESSAGE = "[shared-gpu-sleep] vLLM slept; the GPU's free memory fell meanwhile (a neighbouring job allocated)"
_MARK = "__offgrpo_shared_gpu_sleep__"


def wrap(cls: type, say=print) -> None:
    """``cls.sleep`` with vLLM's device-wide "memory increased" assertion turned into one printed line; idempotent."""
    sleep = cls.sleep
    if getattr(sleep, _MARK, False):
        return

    @functools.wraps(sleep)
    def sleep_beside_a_neighbour(self, *args, **kwargs):
        try:
            return sleep(self, *args, **kwargs)
        except AssertionError as err:
            if str(err) != ASSERTION:
                raise
            say(f"{MESSAGE} (pid {os.getpid()})", flush=True)

    setattr(sleep_beside_a_neighbour, _MARK, True)
    cls.sleep = sleep_beside_a_neighbour


def install(environ=os.environ) -> bool:
    """Where :data:`ENV` ``=1``, wrap vLLM's ``Worker.sleep`` once its module is imported; True if asked to."""
    if environ.get(ENV) != "1":
        return False
    from verl_offgrpo.patches.post_import import on_import

    on_import(MODULE, "Worker", lambda module: wrap(module.Worker))
    return True
