"""Probe of what verl's vLLM servers ask vLLM for (lab only, never for training).

Loaded in every verl process of a job through ``VERL_USE_EXTERNAL_MODULES=benchmarks.diag.vllm_outputs``
(the repo root is on the jobs' ``PYTHONPATH``). It acts only where verl's vLLM server module is imported
(the ``vLLMHttpServer`` actors), where it wraps ``vLLMHttpServer.generate`` to:

* print one ``[vllm-outputs]`` line at the server's first request: whether the plugin's
  ``final_outputs_only`` patch is live there, and the sampling parameters this wrap saw. The plugin's own
  line is an info log, which Ray actors drop; this one is a print, which reaches the job's console log.
* with ``OFFGRPO_FLAT_LOGPROBS=1``, add ``flat_logprobs=True`` to every request's sampling parameters: vLLM
  then keeps a request's log-probs in a few flat lists (``vllm.logprobs.FlatLogprobs``) instead of a dict
  and a ``Logprob`` object per generated token, which Python's garbage collector must scan. verl 0.9.1
  reads them the same way (``enumerate(output.logprobs)``, then ``[token_id].logprob``), so the values
  verl gets are the same floats: the A/B candidate after ``final_outputs_only`` (NOTEBOOK "Not measured yet").
"""

from __future__ import annotations

import os

MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"
CLASS = "vLLMHttpServer"
FLAT_ENV = "OFFGRPO_FLAT_LOGPROBS"
SHOWN = ("output_kind", "detokenize", "flat_logprobs", "logprobs")
_MARK = "__vllm_outputs_probe__"


def _say(text: str) -> None:
    print(f"[vllm-outputs] pid {os.getpid()}: {text}", flush=True)


def probe_params(sampling_params: dict, flat: bool) -> dict:
    """verl's ``sampling_params`` dict, with ``flat_logprobs=True`` added when ``flat`` (explicit wins)."""
    params = dict(sampling_params)
    if flat:
        params.setdefault("flat_logprobs", True)
    return params


def wrap(cls: type, flat: bool, say=_say) -> None:
    """Wrap ``cls.generate`` (verl's ``vLLMHttpServer.generate``) through the plugin's own
    :func:`~verl_offgrpo.patches.final_outputs.wrap_sampling_params`; idempotent. ``say`` gets the one line
    told at the first request."""
    from verl_offgrpo.patches import final_outputs

    told = []

    def probe(sampling_params: dict) -> dict:
        params = probe_params(sampling_params, flat)
        if not told:
            told.append(True)
            seen = ", ".join(f"{key}={params.get(key)!r}" for key in SHOWN)
            say(f"final_outputs_only patch live: {final_outputs.live()}; {FLAT_ENV}={int(flat)}; "
                f"sampling params seen by this wrap: {seen}")
        return params

    final_outputs.wrap_sampling_params(cls, probe, _MARK, "the vllm_outputs probe")


def _apply(module) -> None:
    wrap(getattr(module, CLASS), os.environ.get(FLAT_ENV, "").strip() == "1")


def install() -> None:
    from verl_offgrpo.patches.post_import import on_import

    on_import(MODULE, CLASS, _apply)


install()
