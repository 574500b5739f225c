"""Exact check that vLLM serves α on every wake without a sync (``algorithm.off_grpo.verify_served_weights``).

Between syncs the engine must serve exactly the weights of the last sync: vLLM's level-1 sleep copies
them to host memory and restores them bit for bit. So instead of a threshold on r' statistics (which
must be loose enough for honest drift and is then too loose for a broken engine: a forced level-2
sleep can serve garbage at a mean |log r'| under the lagged limit), the lagged
checkpoint manager compares the served parameters themselves, with tolerance 0:

* **Fingerprint** (:func:`fingerprint`): for every parameter tensor of vLLM's model, on its own device,
  an exact integer checksum of its raw bits. The tensor's bytes are read as 16-bit words x_i (8-bit
  for 1-byte dtypes such as fp8), in chunks of :data:`CHUNK` words; per chunk c the plain sum Σ x_i and
  two weighted sums Σ w_i·x_i and Σ w'_i·x_i (w_i, w'_i two independent fixed pseudo-random weights in
  [1, 2¹⁵] per position, so moved or swapped elements show too, and two changes that cancel in one sum
  do not in the other: both pairs of weights must coincide, 1 pair in 2³⁰) are taken in int64 on the
  device, then combined on the host as (Σ_c s0_c, Σ_c (c+1)·s1_c, Σ_c (c+1)·s2_c) in Python integers. A fourth
  sum is free of positions: s3 = Σ_i h(x_i), h a fixed pseudo-random value in [1, 2¹⁵] of each word's bits (a table
  of the 2¹⁶ word values, read through a histogram of the chunk), so the parts of a tensor that TP ranks hold in any
  layout add up to the whole's s3 (:mod:`.served_cast`), and changes that cancel in s0 do not in s3.
  Integer sums are exact and independent of the reduction order, so the same weights give the same numbers
  on every call, and any change of any single element changes them. One device→host copy per call. Cost: a
  few reads of the weights at memory bandwidth (~36 bytes of traffic per bf16 element), in parallel on each
  tensor-parallel rank; logged as ``timing_s/off_grpo_verify_weights``.
* **Where it runs**: inside each vLLM worker process (every TP rank of every replica), as a method
  of verl's worker extension ``vLLMColocateWorkerExtension`` (:data:`RPC_METHOD`, installed by the
  patch :mod:`verl_offgrpo.patches.served_weights_worker` in the processes of a selecting job: vLLM's
  workers import that class, hence verl and the plugin). The manager reaches it exactly as verl's
  weight sync does (``vLLMHttpServer.collective_rpc`` on each replica's leader server → vLLM's
  ``collective_rpc`` → every TP worker). Each rank keeps its own record and compares locally: no
  tensor or checksum crosses a process.
* **When**: ``record`` right after every real sync (the weights just loaded are α); ``check`` on every
  wake without a sync (skipped slots and the repeated wake of a validation step), after vLLM woke.
  ``record`` also returns whether the rank's weights changed since its previous record, which
  :mod:`.sync_reached` (the check that each sync reached vLLM) reads from every rank's answer (verl's
  ``collective_rpc`` returns the answers in a selecting job: :mod:`verl_offgrpo.patches.rpc_results`).
  A rank whose weights differ raises; verl's ``collective_rpc`` passes the error's text on (vLLM
  wraps it), and the manager turns it into a
  :class:`~verl_offgrpo.sync.alpha_guard.ServedPolicyError` that names the step whose rollout would
  have used the weights, the replica, the rank and the first differing tensors — before any batch
  is sampled from them. A windowed rollout (``rollout_schedule=window``) wakes vLLM only inside a
  real sync, so it checks nothing; it records at each real sync for :mod:`.sync_reached` and :mod:`.served_cast`.

Limits: the check covers ``model_runner.model``'s parameters (not an MTP drafter, not buffers, which
vLLM itself saves and restores across sleep); with vLLM data parallelism inside one replica the plugin
counts only the leader's data-parallel shard as checked: vLLM 0.24's load-balancing client
(``DPLBAsyncMPClient.call_utility_async``) sends the call to every engine and raises the first error, but
returns engine 0's answers only.

This module never imports vllm; torch only inside the functions that run in vLLM's workers.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any, Iterable, Optional

#: the worker-extension method the manager calls through ``collective_rpc``
RPC_METHOD = "off_grpo_served_weights"
#: attribute of a vLLM worker holding its record (fingerprint of α and the step it was synced after)
RECORD_ATTR = "_off_grpo_alpha_record"
#: words per chunk: bounds the temporary device memory at 4 × 4 B × CHUNK = 64 MiB (the chunk as int32, one product
#: and the two position-weight vectors: one pair per call and device, as long as the furthest position in a chunk
#: seen so far, doubled as it grows; a segment takes its positions' slice)
CHUNK = 1 << 22
#: positions per piece while the weights are computed (their int64 temporaries stay at a few × 8 MiB)
PIECE = 1 << 20
#: the machine-readable part of a worker's error: ``<PAYLOAD_TAG>{json}<PAYLOAD_END>``
PAYLOAD_TAG = "[off-grpo-served-weights]"
PAYLOAD_END = "[/off-grpo-served-weights]"
#: how many differing tensors a message lists
MAX_LISTED = 3


class ServedWeightsMismatch(RuntimeError):
    """Raised inside a vLLM worker whose served weights are not the ones recorded at the last sync."""


# ----------------------------------------------------------------------------- fingerprint (worker side)
_MASK32 = 0xFFFFFFFF


def _mul32(x: Any, k: int) -> Any:
    """x·k mod 2³² for int64 x ∈ [0, 2³²), in two 16-bit halves of k: no product reaches 2⁶³."""
    return (x * (k & 0xFFFF) + (((x * (k >> 16)) & 0xFFFF) << 16)) & _MASK32


#: the second weights' offset (w'_i = the formula at i + SECOND): the golden-ratio constant of MurmurHash's family
SECOND = 0x9E3779B9
#: the value hashes' offset (h(v) = the formula at the word value v + THIRD): MurmurHash3's 32-bit seed constant c1
THIRD = 0xCC9E2D51
#: word values a histogram counts: every 16-bit word (a 1-byte dtype's words use the first 256)
WORD_VALUES = 1 << 16


def _position_weights(n: int, device, offset: int = 0) -> Any:
    """w_i ∈ [1, 32768] (int32), the top 15 bits of MurmurHash3's 32-bit finaliser of the position i < n (plus
    ``offset``, mod 2³²: :data:`SECOND` gives w'_i), plus 1:

        h = i + offset;  h ^= h >> 16;  h *= 0x85EBCA6B;  h ^= h >> 13;  h *= 0xC2B2AE35;  h ^= h >> 16   (mod 2³²)
        w_i = (h >> 17) + 1

    Non-linear in i, so no distance d makes w_{i+d} = w_i for most i (a multiplicative hash alone did, at
    d = 50 549 for 96 % of positions): a swap of two elements goes unseen only if their weights coincide.
    Computed in pieces of :data:`PIECE` positions (int64 temporaries of 8 B × PIECE each)."""
    import torch

    pieces = []
    for start in range(0, n, PIECE):
        h = (torch.arange(start, min(n, start + PIECE), dtype=torch.int64, device=device) + offset) & _MASK32
        h = _mul32(h ^ (h >> 16), 0x85EBCA6B)
        h = _mul32(h ^ (h >> 13), 0xC2B2AE35)
        pieces.append((((h ^ (h >> 16)) >> 17) + 1).to(torch.int32))
    return torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.int32, device=device)


def _words(tensor) -> Any:
    """The tensor's bytes as a flat integer tensor: int16 words, or uint8 for 1-byte dtypes / odd sizes."""
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    if flat.element_size() >= 2 and (flat.numel() * flat.element_size()) % 2 == 0:
        return flat.view(torch.int16)
    return flat.view(torch.uint8)


def fingerprint(named_tensors: Iterable[tuple[str, Any]]) -> dict[str, list]:
    """``{name: [numel, dtype, s0, s1, s2, s3]}``: exact integer checksums of each tensor's bits (module docstring)."""
    return fingerprint_placed((name, tensor, 0) for name, tensor in named_tensors)


def fingerprint_placed(placed: Iterable[tuple[str, Any, int]]) -> dict[str, list]:
    """:func:`fingerprint` of pieces of larger tensors: ``(name, piece, start)`` with the piece's first element at
    position ``start`` of the flattened whole, so each word counts with the chunk and weight of its position in the
    whole. The sums are linear in the words, so pieces that tile a tensor add up (``numel``, s0, s1, s2, s3 each) to
    the whole tensor's :func:`fingerprint` exactly (:func:`.served_cast.composed_fingerprints`); s0 and s3 do wherever
    the pieces sit."""
    import torch

    entries, parts, weights, hashes = [], [], {}, {}
    for name, tensor, start in placed:
        words = _words(tensor)
        n = words.numel()
        per_element = n // tensor.numel() if tensor.numel() else 1
        position, segments = int(start) * per_element, []
        for begin in _segment_starts(position, n):
            chunk_index, at = divmod(position + begin, CHUNK)
            chunk = words[begin : begin + min(CHUNK - at, n - begin)]
            end = at + chunk.numel()
            pair = weights.get(chunk.device)
            if pair is None or pair[0].numel() < end:  # one pair per device, grown to the furthest position (doubled)
                size = min(CHUNK, max(end, 2 * pair[0].numel() if pair is not None else end))
                pair = weights[chunk.device] = (_position_weights(size, chunk.device),
                                                _position_weights(size, chunk.device, SECOND))
            w, w2 = (v[at:end] for v in pair)  # w_i depends on i alone: a slice is the positions' weights
            s0 = chunk.sum(dtype=torch.int64)
            x = chunk.to(torch.int32)
            table = hashes.get(chunk.device)
            if table is None:
                table = hashes[chunk.device] = _position_weights(WORD_VALUES, chunk.device, THIRD).to(torch.int64)
            values_seen = torch.bincount(x & (WORD_VALUES - 1), minlength=WORD_VALUES)  # a word's bits, as 0..65535
            s3 = (values_seen * table).sum()  # ≤ CHUNK · 2^15: no overflow
            s1 = torch.mul(x, w).sum(dtype=torch.int64)  # |w·x| <= 2^30: no overflow
            s2 = x.mul_(w2).sum(dtype=torch.int64)
            segments.append((chunk_index, len(parts)))
            parts.extend((s0, s1, s2, s3))
        entries.append((name, int(tensor.numel()), str(tensor.dtype).replace("torch.", ""), segments))
    # one device→host copy (a model's parameters share one device; any other is moved first)
    values = torch.stack([p.to(parts[0].device) for p in parts]).cpu().tolist() if parts else []
    out = {}
    for name, numel, dtype, segments in entries:
        s0 = sum(values[i] for _, i in segments)
        s1 = sum((c + 1) * values[i + 1] for c, i in segments)
        s2 = sum((c + 1) * values[i + 2] for c, i in segments)
        out[name] = [numel, dtype, s0, s1, s2, sum(values[i + 3] for _, i in segments)]
    return out


def _segment_starts(position: int, n: int) -> list[int]:
    """Where the piece's segments begin: 0, and each offset in the piece (of ``n`` words, starting at word
    ``position`` of its whole) where a chunk of the whole begins; none for an empty piece."""
    return ([0] + list(range(-position % CHUNK or CHUNK, n, CHUNK))) if n else []


def digest(fp: dict[str, list]) -> str:
    """A short hex digest of a whole fingerprint (for messages and logs)."""
    return hashlib.sha1(json.dumps(sorted(fp.items())).encode()).hexdigest()[:12]


def compare(recorded: dict[str, list], current: dict[str, list]) -> list[dict]:
    """The tensors whose fingerprint differs (or that appear in only one), in model order."""
    diffs = []
    for name in list(recorded) + [n for n in current if n not in recorded]:
        old, new = recorded.get(name), current.get(name)
        if old != new:
            diff = {"name": name, "recorded": old, "served": new}
            if old is not None and new is not None:
                diff["delta_sum"] = new[2] - old[2]
            diffs.append(diff)
    return diffs


def _model_parameters(worker) -> Iterable[tuple[str, Any]]:
    model = worker.model_runner.model
    return model.named_parameters()


def served_weights_rpc(worker, action: str, step: Optional[int] = None, replica: Optional[int] = None) -> dict:
    """Runs inside a vLLM worker (one TP rank): ``record`` the served weights as α, or ``check`` them.

    Returns ``{"rank", "tensors", "elements", "digest", "seconds"}``, and for ``record`` also ``"changed"``:
    whether the fingerprint differs from the rank's previous record (None at its first), ``"changed_tensors"``:
    the names of the tensors that differ (None at its first), ``"fingerprints"`` and ``"ndims"`` (each tensor's, by
    name) and ``"packed"``: the model's ``packed_modules_mapping`` (vLLM's fused tensor → the checkpoint's tensors
    it loads, e.g. ``qkv_proj`` ← ``q_proj, k_proj, v_proj``), read by :mod:`.sync_reached` to match the trainer's
    tensors; a ``check`` whose
    weights differ from the record (or that finds no record: a worker restarted since the sync) raises
    :class:`ServedWeightsMismatch` with a human-readable message and a JSON payload (:func:`parse_payload`).
    """
    if action not in ("record", "check"):
        raise ValueError(f"verl-offgrpo: served-weights action must be 'record' or 'check', got {action!r}")
    start = time.perf_counter()
    current = fingerprint(_model_parameters(worker))
    rank = getattr(worker, "rank", None)
    summary = {
        "rank": rank,
        "tensors": len(current),
        "elements": sum(v[0] for v in current.values()),
        "digest": digest(current),
    }
    if action == "record":
        previous = getattr(worker, RECORD_ATTR, None)
        changed_tensors = None if previous is None else [d["name"] for d in compare(previous["fp"], current)]
        changed = None if changed_tensors is None else bool(changed_tensors)
        setattr(worker, RECORD_ATTR, {"step": step, "fp": current, "digest": summary["digest"], "changed": changed,
                                      "previous_step": None if previous is None else previous["step"]})
        packed = getattr(worker.model_runner.model, "packed_modules_mapping", None) or {}
        ndims = {name: param.dim() for name, param in _model_parameters(worker)}
        return {**summary, "changed": changed, "changed_tensors": changed_tensors, "fingerprints": current, "ndims": ndims,
                "packed": {str(k): [str(v) for v in vs] for k, vs in dict(packed).items()},
                "seconds": time.perf_counter() - start}
    record = getattr(worker, RECORD_ATTR, None)
    if record is None:
        payload = {"rank": rank, "replica": replica, "step": step, "recorded_step": None, "tensors": len(current),
                   "differing": None, "first": [], "reason": "no record"}  # fmt: skip
        raise ServedWeightsMismatch(
            f"verl-offgrpo: vLLM worker rank {rank} has no record of α (its process was restarted since the last "
            f"sync?) {PAYLOAD_TAG}{json.dumps(payload)}{PAYLOAD_END}"
        )
    diffs = compare(record["fp"], current)
    if diffs:
        listed = "; ".join(_describe(d) for d in diffs[:MAX_LISTED])
        payload = {"rank": rank, "replica": replica, "step": step, "recorded_step": record["step"],
                   "tensors": len(current), "differing": len(diffs), "first": diffs[:MAX_LISTED],
                   "recorded_digest": record["digest"], "served_digest": summary["digest"]}  # fmt: skip
        raise ServedWeightsMismatch(
            f"verl-offgrpo: vLLM worker rank {rank}: {len(diffs)} of {len(current)} parameter tensors differ from "
            f"α recorded at the sync of step {record['step']} (digest {record['digest']} -> {summary['digest']}): "
            f"{listed} {PAYLOAD_TAG}{json.dumps(payload)}{PAYLOAD_END}"
        )
    return {**summary, "seconds": time.perf_counter() - start}


def _describe(diff: dict) -> str:
    if diff["recorded"] is None:
        return f"{diff['name']} (not in the record)"
    if diff["served"] is None:
        return f"{diff['name']} (no longer served)"
    old, new = diff["recorded"], diff["served"]
    return f"{diff['name']} (bit-sum {old[2]} -> {new[2]}, weighted {old[3:5]} -> {new[3:5]})"


# ----------------------------------------------------------------------------- driver side
_PAYLOAD = re.compile(re.escape(PAYLOAD_TAG) + r"(\{.*?\})" + re.escape(PAYLOAD_END), re.S)


def parse_payload(error: BaseException | str) -> Optional[dict]:
    """The JSON payload of a worker's :class:`ServedWeightsMismatch` inside whatever error text vLLM,
    verl and Ray wrapped it in; None if there is none."""
    match = _PAYLOAD.search(str(error))
    if not match:
        return None
    try:
        return json.loads(match.group(1))
    except json.JSONDecodeError:
        return None


async def call_replicas(replicas, action: str, step: Optional[int]) -> list[Any]:
    """``action`` on every TP worker of every replica (verl's ``vLLMHttpServer.collective_rpc``, as its
    weight sync uses); per replica, in order, the workers' answers (a list, one per TP rank; None where verl's
    ``collective_rpc`` returns none, i.e. without :mod:`verl_offgrpo.patches.rpc_results`) or the error."""
    import asyncio

    from .vllm_sleep import replica_servers

    refs = [
        server.collective_rpc.remote(RPC_METHOD, kwargs={"action": action, "step": step, "replica": index})
        for index, server in enumerate(replica_servers(replicas, leaders_only=True))
    ]
    return list(await asyncio.gather(*refs, return_exceptions=True))


def failures(answers: list[Any]) -> list[tuple[int, BaseException]]:
    """The replicas whose call failed, as ``(replica index, error)``."""
    return [(index, answer) for index, answer in enumerate(answers) if isinstance(answer, BaseException)]


def mismatch_message(failures: list[tuple[int, BaseException]], slot_step: int, repeat: bool, num_replicas: int) -> str:
    """The :class:`ServedPolicyError` text for failed checks after the slot of step ``slot_step``."""
    index, error = failures[0]
    payload = parse_payload(error)
    served = (
        f"the repeated wake of step {slot_step} (validation)" if repeat else f"step {slot_step + 1}'s rollout"
    )
    where = f"replica {index}" + (f" of {num_replicas}" if num_replicas > 1 else "")
    others = f" ({len(failures)} of {num_replicas} replicas failed the check)" if len(failures) > 1 else ""
    if payload is None:
        text = " ".join(str(error).split())
        return (
            f"verl-offgrpo: step {slot_step + (0 if repeat else 1)}: the served-weights check could not confirm that "
            f"vLLM serves α for {served} on {where}{others}: {text[:1500]}"
        )
    if payload.get("reason") == "no record":
        detail = "the worker has no record of α (restarted since the last sync?)"
    else:
        first = payload.get("first") or []
        listed = "; ".join(_describe(d) for d in first)
        detail = (
            f"{payload.get('differing')} of {payload.get('tensors')} parameter tensors differ from α as loaded at the "
            f"sync of step {payload.get('recorded_step')} (digest {payload.get('recorded_digest')} -> "
            f"{payload.get('served_digest')}; first: {listed})"
        )
    return (
        f"verl-offgrpo: step {slot_step + (0 if repeat else 1)}: vLLM does not serve α after its wake without a weight "
        f"sync, for {served}: {where}, TP rank {payload.get('rank')}: {detail}{others}. vLLM's level-1 sleep restores "
        "the weights bit for bit, so the engine lost or changed them (e.g. it slept at level 2, which discards them: "
        "check algorithm.off_grpo.keep_weights and anything that changes vLLM's sleep level). Stopped before any "
        "batch was sampled from these weights. algorithm.off_grpo.verify_served_weights=false turns the check off."
    )
