"""vLLM returns each rollout request's final output only (``algorithm.off_grpo.final_outputs_only``).

verl 0.9.1's ``vLLMHttpServer.generate`` (module :data:`MODULE`) builds
``SamplingParams(max_tokens=…, **sampling_params)`` with vLLM's default ``output_kind=CUMULATIVE``
and iterates the request's output stream to its end, keeping only the last output. vLLM then builds
and queues one cumulative output per generated token for every request, and detokenizes every token,
on the server's CPU: a per-decode-step cost that grows with the number of sequences in flight (a
rollout window puts v batches in flight at once). Adding to the request's sampling parameters

    output_kind = RequestOutputKind.FINAL_ONLY    (one output, when the request finishes or is aborted)
    detokenize  = False                            (verl reads token ids; kept when stop strings are set)

leaves the last output — token ids, log-probs, finish reason — as it was, so the samples are the same.
A caller's explicit ``output_kind`` or ``detokenize`` wins.

One trade: verl counts a request as admitted at its first output (``_admitting``), which now comes
when it finishes, so a pause for a weight sync with requests in flight (``abort_all_requests``) would
wait for them up to verl's admission barrier timeout before aborting them. Synchronous trainers pause
only between rollouts, so ``true`` is refused with verl's asynchronous trainer modes and the default ``auto``
leaves it off there (:func:`verl_offgrpo.config.validate_off_grpo_config`). verl's teacher servers are ``vLLMHttpServer`` too
and get the same parameters (their requests already skip detokenization).

Installed, as a post-import hook on :data:`MODULE`, only in the processes of a selecting job whose
config turns the knob on (resolved from ``auto`` by the driver): the driver's ``validate_config`` adds :data:`~verl_offgrpo.patches.FINAL_OUTPUTS_ENV`
to the job's Ray runtime env (:mod:`.job_env`), and the vLLM server actors read it. Written for verl 0.9.1
(:data:`VERL_VERSIONS`): wraps ``vLLMHttpServer.generate``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os

from verl_offgrpo.patches import (FINAL_OUTPUTS_ENV, VERL_VERSIONS, _truthy, complain, hook_for_job, job_selected,
                                  loaded_class, targets_where_vllm)

MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"
CLASS = "vLLMHttpServer"
TARGETS = (f"{MODULE}.{CLASS}.generate",)
WHEN = ("vLLM server actors of a selecting job with algorithm.off_grpo.final_outputs_only on (true, or the default "
        f"auto with a synchronous trainer; {FINAL_OUTPUTS_ENV}=1): requests ask vLLM for their final output only; "
        "not installed otherwise")
#: the argument of ``generate`` that holds the request's sampling parameters (a dict)
ARGUMENT = "sampling_params"
_WRAPPED = "__off_grpo_final_outputs__"

logger = logging.getLogger(__name__)

__all__ = ["TARGETS", "VERL_VERSIONS", "WHEN", "final_only_params", "install", "live", "wrap_generate",
           "wrap_sampling_params"]


def final_only_params(sampling_params: dict, final_only) -> dict:
    """A copy of verl's ``sampling_params`` dict asking for the final output only (``final_only`` is vLLM's
    ``RequestOutputKind.FINAL_ONLY``) and, without stop strings, no detokenization; explicit values win."""
    params = dict(sampling_params)
    params.setdefault("output_kind", final_only)
    if not params.get("stop"):  # vLLM needs the text to match stop strings
        params.setdefault("detokenize", False)
    return params


def wrap_generate(cls: type, final_only) -> None:
    """Wrap ``cls.generate`` (verl's ``vLLMHttpServer.generate``) so that its ``sampling_params`` argument
    goes through :func:`final_only_params`; idempotent."""
    wrap_sampling_params(cls, lambda params: final_only_params(params, final_only), _WRAPPED, "final_outputs_only")


def wrap_sampling_params(cls: type, transform, marker: str, what: str) -> None:
    """Wrap ``cls.generate`` (verl 0.9.1's ``vLLMHttpServer.generate``, a coroutine) so that its
    ``sampling_params`` dict is replaced by ``transform(sampling_params)`` on every request; the wrapper
    carries the attribute ``marker``, and a second call with the same marker does nothing. ``what`` names
    the caller in the :class:`~verl_offgrpo.patches.PatchError` for a ``generate`` of another shape."""
    original = getattr(cls, "generate", None)
    if getattr(original, marker, False):
        return
    signature = inspect.signature(original) if inspect.iscoroutinefunction(original) else None
    if signature is None or ARGUMENT not in signature.parameters:
        from verl_offgrpo.patches import PatchError

        problem = "is not a coroutine function" if signature is None else f"takes no {ARGUMENT!r} argument"
        raise PatchError(f"verl-offgrpo: {cls.__qualname__}.generate {problem}; "
                         f"{what} was written for verl 0.9.1's vLLMHttpServer.generate.")

    @functools.wraps(original)
    async def generate(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments[ARGUMENT] = transform(bound.arguments[ARGUMENT])
        return await original(*bound.args, **bound.kwargs)

    setattr(generate, marker, True)
    cls.generate = generate


def _apply(module) -> None:
    cls = getattr(module, CLASS, None)
    if not isinstance(cls, type):
        complain(f"verl-offgrpo: {MODULE} lacks {CLASS}; final_outputs_only was written for verl 0.9.1.", True)
        return
    from vllm.sampling_params import RequestOutputKind

    wrap_generate(cls, RequestOutputKind.FINAL_ONLY)
    logger.info("verl-offgrpo: vLLM returns each rollout request's final output only (final_outputs_only)")


def preflight_targets() -> tuple[str, ...]:
    """verl's module imports vllm: check it only where vllm is installed."""
    return targets_where_vllm(TARGETS)


def live() -> bool:
    cls = loaded_class(MODULE, CLASS)
    return cls is not None and getattr(getattr(cls, "generate", None), _WRAPPED, False)


def install(environ=os.environ) -> None:
    """In a selecting job's process with :data:`FINAL_OUTPUTS_ENV`, a post-import hook on :data:`MODULE`."""
    if not (job_selected(environ) and _truthy(environ.get(FINAL_OUTPUTS_ENV))):
        return
    hook_for_job(MODULE, CLASS, _apply)
