"""verl's vLLM worker extension gets the served-weights check's RPC method (:mod:`verl_offgrpo.sync.served_weights`).

vLLM mixes ``verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension`` into every worker,
so a method added to that class is callable through verl's ``vLLMHttpServer.collective_rpc`` on every
TP rank: the path verl's own weight sync takes. Only in the processes of a job that selects the plugin
(``VERL_OFFGRPO_JOB=1``, :mod:`.job_env`), where vLLM's workers import the module.

Written for verl 0.9.1 (:data:`VERL_VERSIONS`): adds ``vLLMColocateWorkerExtension.off_grpo_served_weights``.
"""

from __future__ import annotations

import importlib.util
import sys

from verl_offgrpo.patches import VERL_VERSIONS, complain, job_selected, version_problem

MODULE = "verl.workers.rollout.vllm_rollout.utils"
CLASS = "vLLMColocateWorkerExtension"
TARGETS = (f"{MODULE}.{CLASS}",)
WHEN = ("vLLM workers of a selecting job (VERL_OFFGRPO_JOB=1): the worker extension gains the served-weights "
        "check's RPC method; not installed in other jobs")

__all__ = ["TARGETS", "VERL_VERSIONS", "WHEN", "install", "live"]


def preflight_targets() -> tuple[str, ...]:
    """verl's module imports vllm: check it only where vllm is installed."""
    return TARGETS if importlib.util.find_spec("vllm") is not None else ()


def live() -> bool:
    from verl_offgrpo.sync.served_weights import RPC_METHOD, _worker_method

    module = sys.modules.get(MODULE)
    cls = getattr(module, CLASS, None) if module is not None else None
    return cls is not None and getattr(cls, RPC_METHOD, None) is _worker_method


def install() -> None:
    """In a selecting job's process, a post-import hook on :data:`MODULE`; in any other process nothing."""
    if not job_selected():
        return
    problem = version_problem(VERL_VERSIONS)
    if problem is not None:
        complain(problem, True)
    from verl_offgrpo.patches.post_import import on_import
    from verl_offgrpo.sync.served_weights import install_worker_method

    on_import(MODULE, CLASS, install_worker_method)
