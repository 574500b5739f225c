"""verl's vLLM worker extension gets the served-weights check's RPC method (:mod:`verl_offgrpo.sync.served_weights`).

vLLM mixes ``verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension`` into every worker,
so a method added to that class is callable through verl's ``vLLMHttpServer.collective_rpc`` on every
TP rank: the path verl's own weight sync takes. Only in the processes of a job that selects the plugin
(``VERL_OFFGRPO_JOB=1``, :mod:`.job_env`), where vLLM's workers import the module.

Written for verl 0.9.1 (:data:`VERL_VERSIONS`): adds ``vLLMColocateWorkerExtension.off_grpo_served_weights``.
"""

from __future__ import annotations

import logging
from typing import Optional

from verl_offgrpo.patches import VERL_VERSIONS, hook_for_job, job_selected, loaded_class, targets_where_vllm

MODULE = "verl.workers.rollout.vllm_rollout.utils"
CLASS = "vLLMColocateWorkerExtension"
TARGETS = (f"{MODULE}.{CLASS}",)
WHEN = ("vLLM workers of a selecting job (VERL_OFFGRPO_JOB=1): the worker extension gains the served-weights "
        "check's RPC method; not installed in other jobs")

logger = logging.getLogger(__name__)

__all__ = ["TARGETS", "VERL_VERSIONS", "WHEN", "install", "install_worker_method", "live", "worker_method"]


def worker_method(self, action: str, step: Optional[int] = None, replica: Optional[int] = None) -> dict:
    """The method the extension class gains (:data:`~verl_offgrpo.sync.served_weights.RPC_METHOD`): runs
    :func:`~verl_offgrpo.sync.served_weights.served_weights_rpc` on the vLLM worker ``self``."""
    from verl_offgrpo.sync.served_weights import served_weights_rpc

    return served_weights_rpc(self, action, step=step, replica=replica)


def install_worker_method(module) -> None:
    """Post-import hook of :data:`MODULE`: give its worker extension class :data:`CLASS` the method
    :func:`worker_method` as ``RPC_METHOD`` (vLLM mixes that class into every worker, so ``collective_rpc``
    finds it); idempotent."""
    from verl_offgrpo.sync.served_weights import RPC_METHOD

    cls = getattr(module, CLASS, None)
    if not isinstance(cls, type):
        # not an import error for everyone: only the check fails, at the first sync, with this hint
        logger.warning(
            "verl-offgrpo: %s lacks %s; the served-weights check was written for verl 0.9.1's vLLM worker "
            "extension and will fail (set algorithm.off_grpo.verify_served_weights=false to run without it).",
            module.__name__, CLASS,
        )  # fmt: skip
        return
    if getattr(cls, RPC_METHOD, None) is not worker_method:
        setattr(cls, RPC_METHOD, worker_method)


def preflight_targets() -> tuple[str, ...]:
    """verl's module imports vllm: check it only where vllm is installed."""
    return targets_where_vllm(TARGETS)


def live() -> bool:
    from verl_offgrpo.sync.served_weights import RPC_METHOD

    cls = loaded_class(MODULE, CLASS)
    return cls is not None and getattr(cls, RPC_METHOD, None) is worker_method


def install() -> None:
    """In a selecting job's process, a post-import hook on :data:`MODULE`; in any other process nothing."""
    if not job_selected():
        return
    hook_for_job(MODULE, CLASS, install_worker_method)
