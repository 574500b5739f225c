"""verl's log-probs without its per-token Python loop (lab only; an A/B of the GPU image's step time).

Without flash-attn (the GPU image carries none) verl 0.9.1's ``logprobs_from_logits`` falls back to
``verl.utils.torch_functional.logprobs_from_logits_v2``, which loops over the rows of the flattened
(tokens, vocab) logits in Python: one ``log_softmax`` + ``gather`` per token for bf16 logits, one
``logsumexp`` per token for fp32. With ``use_remove_padding=False`` (the lab's setting, for want of
flash-attn) that is every prompt and response token, forward and backward, in ``old_log_prob`` and
``update_actor``. :func:`logprobs_chunked` computes the same per-row formulas on chunks of rows:

    bf16:  log p(y_t) = log_softmax(x_t)[y_t]           fp32:  log p(y_t) = x_t[y_t] − logsumexp(x_t)

Each row's reduction is the row's own, so the values should equal the loop's; whether they are
bitwise equal on a GPU is what ``logprobs_loop_gpu.py`` measures before any learning run uses this.

Loaded in every verl process of a job through ``VERL_USE_EXTERNAL_MODULES=benchmarks.diag.vector_logprobs``
(the repo root is on the jobs' ``PYTHONPATH``); it replaces ``logprobs_from_logits_v2`` only where
``OFFGRPO_VECTOR_LOGPROBS=1``, in plugin and plain-verl jobs alike.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

ENV = "OFFGRPO_VECTOR_LOGPROBS"
#: rows per chunk: 4 096 × a 152 k vocabulary in fp32 is 2.5 GB of log_softmax output, forward only
CHUNK_ROWS = 4096


def logprobs_chunked(logits: torch.Tensor, labels: torch.Tensor, chunk_rows: int = CHUNK_ROWS) -> torch.Tensor:
    """``logprobs_from_logits_v2(logits, labels)`` (same dtype branches), ``chunk_rows`` rows at a time."""
    if logits.dtype in (torch.float32, torch.float64):
        picked = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
        lse = torch.cat([torch.logsumexp(chunk, dim=-1) for chunk in logits.split(chunk_rows)])
        return picked - lse
    out = [F.log_softmax(chunk, dim=-1).gather(dim=-1, index=lab.unsqueeze(-1)).squeeze(-1)
           for chunk, lab in zip(logits.split(chunk_rows), labels.split(chunk_rows), strict=True)]
    return torch.cat(out)


def install(environ=os.environ) -> bool:
    """Replace verl's ``logprobs_from_logits_v2`` where ``OFFGRPO_VECTOR_LOGPROBS=1``; True if it did."""
    if environ.get(ENV) != "1":
        return False
    from verl.utils import torch_functional

    torch_functional.logprobs_from_logits_v2 = logprobs_chunked
    print(f"[vector-logprobs] pid {os.getpid()}: verl's logprobs_from_logits_v2 replaced", flush=True)
    return True


install()
