"""verl's log-probs without its per-token Python loop, in every job of a lab run (plain-verl ones too).

Without flash-attn (the GPU image carries none) verl 0.9.1's ``logprobs_from_logits`` falls back to
``verl.utils.torch_functional.logprobs_from_logits_v2``, a Python loop over rows (NOTEBOOK §11). The
package now replaces it in a selecting job's processes for bf16/fp16 logits
(``verl_offgrpo.patches.chunked_logprobs``, the same per-token formula on chunks of rows). This lab
module replaces it with the package's :func:`logprobs_chunked` in **every** job where
``OFFGRPO_VECTOR_LOGPROBS=1``, fp32 logits included (a chunk-wise logsumexp, equal to the loop's within
rounding), so that plain-verl jobs beside the plugin's (``bigbatch``) compute alike and print
``[vector-logprobs]`` for ``learning.py``'s ``logprobs`` field.

Loaded in every verl process of a job through ``VERL_USE_EXTERNAL_MODULES=benchmarks.diag.vector_logprobs``
(the repo root is on the jobs' ``PYTHONPATH``).
"""

from __future__ import annotations

import os

from verl_offgrpo.patches.chunked_logprobs import CHUNK_ROWS, logprobs_chunked

ENV = "OFFGRPO_VECTOR_LOGPROBS"
__all__ = ["CHUNK_ROWS", "ENV", "install", "logprobs_chunked"]


def install(environ=os.environ) -> bool:
    """Replace verl's ``logprobs_from_logits_v2`` where ``OFFGRPO_VECTOR_LOGPROBS=1``; True if it did."""
    if environ.get(ENV) != "1":
        return False
    from verl.utils import torch_functional

    torch_functional.logprobs_from_logits_v2 = logprobs_chunked
    print(f"[vector-logprobs] pid {os.getpid()}: verl's logprobs_from_logits_v2 replaced", flush=True)
    return True


install()
