"""verl's ``vLLMHttpServer.collective_rpc`` returns vLLM's answer, one result per worker (verl drops it).

verl 0.9.1's ``vLLMHttpServer.collective_rpc`` awaits ``self.engine.collective_rpc(...)`` — vLLM's
``AsyncLLM.collective_rpc``, whose value is the list of the method's results, one per TP worker of the
replica's leader data-parallel shard, in rank order — and returns None, although its caller
``vLLMAsyncRollout._execute_method`` documents "the result of the method execution". The check that each
sync reached vLLM (:mod:`verl_offgrpo.sync.sync_reached`) reads every worker's answer to the served-weights
``record`` (whether its weights changed at the sync), so in a selecting job the method returns that list:

    collective_rpc(self, method, timeout, args, kwargs) = await self.engine.collective_rpc(method=…, timeout=…, args=…, kwargs=…)

the same call as verl's, with its value. verl's own calls through it (the weight sync's worker methods)
return None per worker and ignore the value.

Installed, as a post-import hook on :data:`MODULE`, only in the processes of a selecting job
(``VERL_OFFGRPO_JOB=1``, :mod:`.job_env`), where verl's vLLM server actors import it. Written for verl 0.9.1
(:data:`VERL_VERSIONS`): replaces ``vLLMHttpServer.collective_rpc``.
"""

from __future__ import annotations

import inspect

from verl_offgrpo.patches import VERL_VERSIONS, complain, hook_for_job, job_selected, loaded_class, targets_where_vllm

MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"
CLASS = "vLLMHttpServer"
TARGETS = (f"{MODULE}.{CLASS}.collective_rpc",)
WHEN = ("vLLM server actors of a selecting job (VERL_OFFGRPO_JOB=1): collective_rpc returns vLLM's per-worker "
        "results, which the check that each sync reached vLLM reads; not installed in other jobs")
#: the parameters of verl 0.9.1's method, which the replacement keeps
PARAMETERS = ("self", "method", "timeout", "args", "kwargs")
_MARK = "__off_grpo_returns_results__"

__all__ = ["TARGETS", "VERL_VERSIONS", "WHEN", "collective_rpc", "install", "live", "return_results"]


async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
    """verl 0.9.1's ``vLLMHttpServer.collective_rpc``, returning vLLM's list of per-worker results."""
    return await self.engine.collective_rpc(method=method, timeout=timeout, args=args, kwargs=kwargs)


setattr(collective_rpc, _MARK, True)


def return_results(cls: type) -> None:
    """``cls.collective_rpc`` (verl 0.9.1's ``vLLMHttpServer.collective_rpc``) becomes :func:`collective_rpc`;
    idempotent. A method of another shape is a :class:`~verl_offgrpo.patches.PatchError`."""
    original = getattr(cls, "collective_rpc", None)
    if getattr(original, _MARK, False):
        return
    if not inspect.iscoroutinefunction(original) or tuple(inspect.signature(original).parameters) != PARAMETERS:
        from verl_offgrpo.patches import PatchError

        raise PatchError(f"verl-offgrpo: {cls.__qualname__}.collective_rpc is not verl 0.9.1's "
                         f"async ({', '.join(PARAMETERS)}); the check that each sync reached vLLM was written for it.")
    cls.collective_rpc = collective_rpc


def _apply(module) -> None:
    cls = getattr(module, CLASS, None)
    if not isinstance(cls, type):
        complain(f"verl-offgrpo: {MODULE} lacks {CLASS}; the check that each sync reached vLLM was written for "
                 "verl 0.9.1.", True)
        return
    return_results(cls)


def preflight_targets() -> tuple[str, ...]:
    """verl's module imports vllm: check it only where vllm is installed."""
    return targets_where_vllm(TARGETS)


def live() -> bool:
    cls = loaded_class(MODULE, CLASS)
    return cls is not None and getattr(getattr(cls, "collective_rpc", None), _MARK, False)


def install() -> None:
    """In a selecting job's process, a post-import hook on :data:`MODULE`; in any other process nothing."""
    if not job_selected():
        return
    hook_for_job(MODULE, CLASS, _apply)
