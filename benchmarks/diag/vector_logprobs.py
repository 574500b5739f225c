"""verl's log-probs without its per-token Python loop, in every job of a lab run (plain-verl ones too).

Without flash-attn (the GPU image carries none) verl 0.9.1's ``logprobs_from_logits`` falls back to
``verl.utils.torch_functional.logprobs_from_logits_v2``, a Python loop over rows (NOTEBOOK §11). The
package now replaces it in a selecting job's processes for bf16/fp16 logits
(``verl_offgrpo.patches.chunked_logprobs``, the same per-token formula on chunks of rows). This lab
module replaces it with :func:`logprobs_chunked` in **every** job where ``OFFGRPO_VECTOR_LOGPROBS=1``: the
package's function for bf16/fp16 logits, and for fp32 a chunk-wise logsumexp (equal to the loop's within
rounding), so that plain-verl jobs beside the plugin's (``bigbatch``) compute alike and print
``[vector-logprobs]`` for ``learning.py``'s ``logprobs`` field.

Loaded in every verl process of a job through ``VERL_USE_EXTERNAL_MODULES=benchmarks.diag.vector_logprobs``
(the repo root is on the jobs' ``PYTHONPATH``).
"""

from __future__ import annotations

import os

import torch

from verl_offgrpo.patches import chunked_logprobs

CHUNK_ROWS = chunked_logprobs.CHUNK_ROWS
ENV = "OFFGRPO_VECTOR_LOGPROBS"
__all__ = ["CHUNK_ROWS", "ENV", "install", "logprobs_chunked"]


def logprobs_chunked(logits: torch.Tensor, labels: torch.Tensor, chunk_rows: int = CHUNK_ROWS) -> torch.Tensor:
    """The package's chunked log-probs for bf16/fp16 logits; for fp32/fp64 verl's x_t[y_t] − logsumexp(x_t) with
    the logsumexp taken chunk-wise (the package leaves those to verl's loop)."""
    if logits.dtype not in (torch.float32, torch.float64):
        return chunked_logprobs.logprobs_chunked(logits, labels, chunk_rows)
    picked = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.cat([torch.logsumexp(chunk, dim=-1) for chunk in logits.split(chunk_rows)])


def install(environ=os.environ) -> bool:
    """Replace verl's ``logprobs_from_logits_v2`` where ``OFFGRPO_VECTOR_LOGPROBS=1``; True if it did."""
    if environ.get(ENV) != "1":
        return False
    from verl.utils import torch_functional

    torch_functional.logprobs_from_logits_v2 = logprobs_chunked
    print(f"[vector-logprobs] pid {os.getpid()}: verl's logprobs_from_logits_v2 replaced", flush=True)
    return True


install()
