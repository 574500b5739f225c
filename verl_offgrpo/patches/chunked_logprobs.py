"""verl's per-row log-prob loop, run on chunks of rows, in the processes of a selecting job.

Without flash-attn's cross-entropy (and off Ascend NPUs) verl 0.9.1's ``logprobs_from_logits`` (module
:data:`MODULE`) calls ``logprobs_from_logits_v2``, which walks the logits' first dimension in Python:
for bf16 / fp16 logits one ``log_softmax`` + ``gather`` per row, forward and backward, in every
``old_log_prob`` and ``update_actor`` (with ``use_remove_padding`` a row is one token: ≈ 10⁵ small
kernels and autograd nodes a pass). :func:`logprobs_chunked` computes the same per-token formula on
:data:`CHUNK_ROWS` rows of the flattened (tokens, vocabulary) logits at a time:

    log p(y_t) = log_softmax(x_t)[y_t]            each token's own reduction over its row, as in the loop

fp32 / fp64 logits, where verl's loop computes x_t[y_t] − logsumexp(x_t), go to verl's loop unchanged
(a chunked logsumexp differs from it in the last bits). Memory is the loop's: autograd keeps every
row's ``log_softmax`` output either way. The first chunked call on rank 0 prints :data:`LIVE_MESSAGE` to the
console (once a process), so a run's log says which computation it used.

Installed, as a post-import hook on :data:`MODULE`, only in the processes of a selecting job
(``VERL_OFFGRPO_JOB=1``, :mod:`.job_env`), unless :data:`LOOP_ENV` ``=1`` keeps verl's loop (set it
where the job's Ray workers see it, like verl's own ``VERL_DISABLE_FLASH_ATTN_CE``). Where verl uses a
fused cross-entropy it never calls ``logprobs_from_logits_v2``, and this changes nothing. Written for
verl 0.9.1 (:data:`VERL_VERSIONS`): replaces ``verl.utils.torch_functional.logprobs_from_logits_v2``.
"""

from __future__ import annotations

import functools
import os
import sys

from verl_offgrpo.patches import VERL_VERSIONS, complain, first_rank, hook_for_job, job_selected, _truthy

MODULE = "verl.utils.torch_functional"
FUNCTION = "logprobs_from_logits_v2"
TARGETS = (f"{MODULE}.{FUNCTION}",)
#: ``VERL_OFFGRPO_LOGPROBS_LOOP=1``: keep verl's per-row loop in a selecting job.
LOOP_ENV = "VERL_OFFGRPO_LOGPROBS_LOOP"
WHEN = (f"every process of a selecting job (VERL_OFFGRPO_JOB=1) unless {LOOP_ENV}=1: verl's per-row log-prob "
        "loop (no fused cross-entropy) runs on chunks of rows for bf16/fp16 logits; not installed otherwise")
#: rows per chunk: the transient ``log_softmax`` output of one chunk without autograd (4 096 rows of a
#: 152 k vocabulary: 1.2 GB in bf16)
CHUNK_ROWS = 4096
_WRAPPED = "__off_grpo_chunked_logprobs__"
#: printed by rank 0 at its first chunked call
LIVE_MESSAGE = (f"[verl-offgrpo] bf16/fp16 log-probs on chunks of {CHUNK_ROWS} rows, not verl's per-row loop "
                f"({LOOP_ENV}=1 keeps the loop)")
_said = False

__all__ = ["LIVE_MESSAGE", "LOOP_ENV", "TARGETS", "VERL_VERSIONS", "WHEN", "chunked_v2", "install", "live", "logprobs_chunked"]


def logprobs_chunked(logits, labels, chunk_rows: int = CHUNK_ROWS):
    """log p(labels) = ``log_softmax(x_t)[y_t]`` from bf16/fp16 ``logits`` (…, vocabulary), verl's per-row formula,
    about ``chunk_rows`` rows at a time. Padded (batch, sequence, vocabulary) logits go by whole sequences, each
    group flattened (a copy of one group at most, where verl hands over a slice). Shape of ``labels``."""
    import torch

    if logits.dim() <= 2:
        return _rows(logits, labels, chunk_rows)
    per_sequence = max(1, labels[0].numel()) if len(labels) else 1
    step = max(1, chunk_rows // per_sequence)
    parts = [_rows(group.reshape(-1, group.shape[-1]), lab.reshape(-1), chunk_rows)
             for group, lab in zip(logits.split(step), labels.split(step), strict=True)]
    return torch.cat(parts).reshape(labels.shape)


def _rows(logits, labels, chunk_rows: int):
    """:func:`logprobs_chunked` of (rows, vocabulary) logits."""
    import torch
    import torch.nn.functional as F

    return torch.cat([F.log_softmax(chunk, dim=-1).gather(dim=-1, index=lab.unsqueeze(-1)).squeeze(-1)
                      for chunk, lab in zip(logits.split(chunk_rows), labels.split(chunk_rows), strict=True)])


def chunked_v2(original):
    """verl's ``logprobs_from_logits_v2`` with bf16/fp16 logits computed by :func:`logprobs_chunked`; fp32/fp64
    logits still go to ``original`` (verl's loop)."""

    @functools.wraps(original)
    def logprobs_from_logits_v2(logits, labels):
        import torch

        global _said
        if logits.dtype in (torch.float32, torch.float64):
            return original(logits, labels)
        if not _said:
            _said = True
            if first_rank():
                print(LIVE_MESSAGE, flush=True)
        return logprobs_chunked(logits, labels, CHUNK_ROWS)

    setattr(logprobs_from_logits_v2, _WRAPPED, True)
    return logprobs_from_logits_v2


def replace_loop(module) -> None:
    """Post-import hook of :data:`MODULE`: its ``logprobs_from_logits_v2`` becomes :func:`chunked_v2` of it
    (``logprobs_from_logits`` looks the name up at each call); idempotent."""
    original = getattr(module, FUNCTION, None)
    if not callable(original):
        complain(f"verl-offgrpo: {MODULE} lacks {FUNCTION}; the chunked log-probs were written for verl 0.9.1 "
                 f"(set {LOOP_ENV}=1 to run without them).", True)
    if not getattr(original, _WRAPPED, False):
        setattr(module, FUNCTION, chunked_v2(original))


def live() -> bool:
    """Whether verl's ``logprobs_from_logits_v2`` is the chunked one in this process."""
    module = sys.modules.get(MODULE)
    return module is not None and getattr(getattr(module, FUNCTION, None), _WRAPPED, False)


def install(environ=os.environ) -> None:
    """In a selecting job's process without :data:`LOOP_ENV`, a post-import hook on :data:`MODULE`; else nothing."""
    if not job_selected(environ) or _truthy(environ.get(LOOP_ENV)):
        return
    hook_for_job(MODULE, FUNCTION, replace_loop)
