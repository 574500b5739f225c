"""Exact check that each weight sync reached vLLM (part of ``algorithm.off_grpo.verify_served_weights``, v > 1).

A sync that silently leaves vLLM on its old weights makes the next window sample from π_p (the last sync's
policy), not α = π_s; the lag-0 limit of the r' monitor sees only the drift since p, which can be small. So at
every real sync after the first, with exact integer fingerprints (:func:`.served_weights.fingerprint`):

    trainer changed  = some actor rank's parameters, as vLLM's dtype, differ from that rank's at the previous sync
    rank changed     = a vLLM worker (one TP rank of a replica) serves weights that differ from its record of the
                       previous sync
    each TP rank:      trainer changed ⇒ rank changed;  trainer unchanged ⇒ rank unchanged (where vLLM keeps its
                       weights across sleep: per_step's level 1 or ``no_sleep``)

* **Trainer side** (:func:`actor_tensor_fingerprints`, in each actor worker through Ray's ``__ray_call__``): the
  fingerprint of the rank's local FSDP shards cast to ``actor_rollout_ref.rollout.dtype``, the bits vLLM stores
  (verl's naive sync sends the full tensors in the training dtype and vLLM's loader casts them). A zero
  learning rate, an update below that dtype's resolution or an update skipped by the zero-variance mask leave
  it unchanged, and then vLLM must be unchanged too: no false alarm from a policy that did not move.
* **vLLM side**: every worker's served-weights ``record`` right after the sync answers whether its fingerprint
  changed since its previous record (verl's ``collective_rpc`` returns the answers in a selecting job:
  :mod:`verl_offgrpo.patches.rpc_results`). Each TP rank must change when the trainer did: a rank holds a shard of
  every layer, and an optimizer step that moved the trainer's bits moves some of every shard's (a sync that reached
  rank 0 but not rank 1 leaves rank 1 on the old policy, which the r' monitor would see only as drift). With a
  level-2 sleep between syncs (the window) a weight the sync does not rewrite may come back different, so "trainer
  unchanged ⇒ unchanged" is asked only where vLLM keeps its weights. After a level-2 sleep "rank changed" holds
  whether the sync arrived or not (the wake rewrites the weights' memory); a sync that did not arrive then serves
  memory nothing loaded, which the r' monitor's lag-0 limit (``max_log_rprime_after_sync``) stops at the window's
  first batch, and a wake that restored the old weights bit for bit reads "unchanged" here.
* Every TP rank answers; with vLLM data parallelism inside one replica ``collective_rpc`` returns the answers of
  one data-parallel shard only, so the check runs where rollout DP = 1 (elsewhere an info line says it is off).

* **Per tensor** (a sync that reached every rank with some tensors only): each tensor the trainer changed must
  have changed in vLLM, on some TP rank of each replica (the ranks' slices of a tensor cover it, so a change anywhere
  in it reaches one of them)::

      trainer tensor t changed (on some actor rank)  ⇒  some TP rank's vLLM tensor V(t) changed

  V(t) is t's name with a packed shard replaced by the fused tensor that loads it (vLLM's
  ``packed_modules_mapping``: ``…q_proj…`` → ``…qkv_proj…``). A name vLLM does not serve under V(t) (another
  naming) is not checked; ``off_grpo/sync_tensors_checked`` counts the tensors that were. FSDP1's flat parameters
  are split into the original parameters they pack (:data:`FLAT_PARAMETER_ATTRIBUTES`).
  A small tensor (a norm) often changes in two or three elements a sync; two changes that cancel in one weighted
  sum of the fingerprint do not in the other (:mod:`.served_weights`), so it still reads as changed. Off where
  verl's delta sync decides in bf16 for a finer rollout dtype, and for quantized rollouts (:func:`tensors_checkable`).

* **Copies across TP ranks**: a 1-D tensor every rank holds whole (its element count on each rank equals the
  trainer's, :func:`trainer_numels`: a norm) is loaded from the same bytes on every rank, so::

      1-D t held whole on every TP rank of a replica  ⇒  the ranks' fingerprints of t are equal

  (:func:`replicas_with_unequal_copies`): a sync that reached rank 0 with a norm and rank 1 without it is stopped,
  though each rank changed something and some rank changed the norm. Off where the per-tensor rule is.

* **The trainer's cast, exactly** (:mod:`.served_cast`): a tensor a vLLM rank holds whole must be the trainer's
  tensor cast to vLLM's dtype, bit for bit; the actor ranks fingerprint their shards at their positions in vLLM's
  tensors (:func:`block_starts`, :func:`actor_tensor_fingerprints`), so the ranks' sums are comparable with vLLM's.

A replica that breaks the rule stops the run with :class:`.alpha_guard.ServedPolicyError` before any batch is
sampled from it. Not covered: quantized rollouts; a loader that stores something other than the changed input as
changed (the per-tensor rule would stop an honest sync there, naming the tensor; the exact rule reads such tensors at
its calibrating syncs and leaves them out); per tensor, "unchanged ⇒ unchanged" (asked of whole ranks
above); here, a tensor the ranks hold slices of that reached some TP ranks but not others, where those others changed
elsewhere (a slice may honestly keep its bits, so per-rank slices would be false alarms): :mod:`.served_cast`
compares the sums of its parts with the trainer's tensor instead.

Written for verl 0.9.1: reads the actor worker as :mod:`verl_offgrpo.ref_reset.worker` does (``worker_dict`` /
``fused_worker_dict`` → ``ActorRolloutRefWorker.actor.engine.module``, the FSDP module whose parameters verl's
naive sync gathers and sends).
"""

from __future__ import annotations

import time
from typing import Any, Optional

from .served_weights import fingerprint_placed

#: the rollout dtypes whose values are the actor's cast exactly (``actor_rollout_ref.rollout.dtype``)
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
          "float32": "float32", "fp32": "float32", "float": "float32"}  # fmt: skip


def find_actor(obj: Any) -> Any:
    """The actor ``TrainingWorker`` held by a verl actor worker (``ActorRolloutRefWorker`` inside the colocated
    ``WorkerDict`` / ``FusedWorker``; :func:`verl_offgrpo.ref_reset.worker.find_actor_and_ref` reads the same)."""
    from verl_offgrpo.ref_reset.worker import worker_roles

    actor = next((c.actor for c in worker_roles(obj) if getattr(c, "actor", None) is not None), None)
    if actor is None or getattr(getattr(actor, "engine", None), "module", None) is None:
        raise RuntimeError(f"verl-offgrpo: no actor model (actor.engine.module) in worker {type(obj).__name__}")
    return actor


#: the name segments torch's wrappers add to a parameter's name (FSDP1, activation checkpointing, torch.compile)
WRAPPER_SEGMENTS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


def checkpoint_name(name: str) -> str:
    """A parameter's name as the checkpoint (and vLLM's loader) spell it: without :data:`WRAPPER_SEGMENTS`."""
    return ".".join(part for part in name.split(".") if part not in WRAPPER_SEGMENTS)


#: Written for torch 2.11's FSDP1 (verl 0.9.1's default ``strategy=fsdp``, ``use_orig_params=false``): the attributes
#: of a ``FlatParameter`` that map the rank's local shard of it to the original parameters it packs
#: (``_fqns``: their names below the wrapped module; ``_shard_param_infos``: each one's ``in_shard``,
#: ``offset_in_shard``, ``numel_in_shard`` and ``intra_param_start_idx``, the piece's start in the whole parameter;
#: ``_numels``: the whole parameters' sizes). verl reads this shard as ``flat_param.data`` (its FSDP1 offload).
#: FSDP1 with ``use_orig_params=true`` (``FullyShardedDataParallel._use_orig_params``) exposes plain views of the
#: shard instead, whose positions are not read here (:func:`_shard_start`: unplaced).
FLAT_PARAMETER_ATTRIBUTES = ("_fqns", "_shard_param_infos", "_numels")
ORIG_PARAMS_ATTRIBUTE = "_use_orig_params"
FLAT_PARAMETER_NAME = "_flat_param"


def _flat_parameter_prefix(name: str, tensor: Any) -> Optional[str]:
    """The module prefix of an FSDP1 flat parameter (``name`` as :func:`checkpoint_name` gives it, ending in
    :data:`FLAT_PARAMETER_NAME`, ``tensor`` carrying :data:`FLAT_PARAMETER_ATTRIBUTES`), or None for any other tensor."""
    if not name.endswith(FLAT_PARAMETER_NAME) or any(getattr(tensor, a, None) is None for a in FLAT_PARAMETER_ATTRIBUTES):
        return None
    return name[: -len(FLAT_PARAMETER_NAME)]


def _original_pieces(name: str, local: Any, start: Optional[int]):
    """``(name, piece, start)`` of the rank's shard of one parameter, ``start`` being the piece's first element's
    position in the whole flattened parameter (None where not known): an FSDP1 flat parameter split into the original
    parameters' pieces it holds (named as the checkpoint names them: the flat parameter's module + ``_fqns``; each
    piece's start its ``intra_param_start_idx``); any other tensor whole, at ``start``."""
    prefix = _flat_parameter_prefix(name, local)
    if prefix is None:
        yield name, local, start
        return
    fqns, infos = local._fqns, local._shard_param_infos
    flat = local.detach().reshape(-1)
    for fqn, info in zip(fqns, infos):
        if info.in_shard and info.numel_in_shard:
            piece = flat[info.offset_in_shard : info.offset_in_shard + info.numel_in_shard]
            yield checkpoint_name(prefix + fqn), piece, info.intra_param_start_idx


def _shard_start(param: Any) -> Optional[int]:
    """Where a DTensor's local part starts in the whole flattened tensor: FSDP2's ``Shard(0)`` on a 1-D mesh gives
    rank r the rows ``[r·⌈d₀/W⌉, (r+1)·⌈d₀/W⌉)`` (torch 2.11's ``_chunk_with_empty``, ``torch.chunk``'s split), a
    contiguous run; None for any other placement (copies over a mesh dimension, another dimension sharded). A plain
    tensor starts at 0."""
    if not hasattr(param, "to_local"):
        return 0
    from torch.distributed.tensor import Shard

    placements = tuple(getattr(param, "placements", ()))
    if len(placements) != 1 or type(placements[0]) is not Shard or placements[0].dim != 0 or param.dim() == 0:
        return None
    rows, world = param.shape[0], param.device_mesh.size()
    return min(param.device_mesh.get_local_rank() * -(-rows // world), rows) * (param.numel() // max(rows, 1))


def _whole_numels(module: Any) -> dict[str, int]:
    """Each parameter's whole element count, by checkpoint name (FSDP1: ``_numels`` beside ``_fqns``)."""
    numels = {}
    for name, param in module.named_parameters():
        prefix = _flat_parameter_prefix(checkpoint_name(name), param)
        if prefix is not None:
            numels.update((checkpoint_name(prefix + fqn), int(size)) for fqn, size in zip(param._fqns, param._numels))
        else:
            numels[checkpoint_name(name)] = int(param.numel())
    return numels


def block_starts(numels: dict[str, int], packed: dict[str, list[str]]) -> dict[str, Optional[int]]:
    """Where each trainer tensor's block starts in the vLLM tensor that loads it (:func:`served_name`): 0 for a tensor
    loaded alone; in a fused tensor of ``packed`` (at TP = 1 the shards' concatenation along dim 0, in the mapping's
    order: ``qkv_proj`` = [q_proj; k_proj; v_proj]) the sum of the element counts of the shards before it; None where
    one of those is not a trainer tensor."""
    fused = {shard: shards for shards in packed.values() for shard in shards}
    starts: dict[str, Optional[int]] = {}
    for name in numels:
        parts = name.split(".")
        hits = [index for index, part in enumerate(parts) if part in fused]
        if not hits:
            starts[name] = 0
            continue
        index = hits[0]
        shards = fused[parts[index]]
        preceding = shards[: shards.index(parts[index])]
        before = [".".join(parts[:index] + [shard] + parts[index + 1 :]) for shard in preceding]
        starts[name] = (sum(numels[other] for other in before)
                        if len(hits) == 1 and all(other in numels for other in before) else None)
    return starts


def _local_shards_as(module: Any, dtype: Any, starts: dict[str, Optional[int]]):
    """``(name, the rank's local shard cast to dtype, its start in the vLLM tensor that loads it or None)``: a
    DTensor's local part (FSDP2), an FSDP1 flat parameter's pieces of each original parameter
    (:func:`_original_pieces`), else the tensor; cast on the device when there is one (an offloaded shard is copied
    there, then freed); names as :func:`checkpoint_name` gives them, starts from :func:`block_starts` plus the
    piece's own."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    orig_params = any(getattr(sub, ORIG_PARAMS_ATTRIBUTE, False) for sub in module.modules())
    for name, param in module.named_parameters():
        local = param.to_local() if hasattr(param, "to_local") else param
        for piece_name, piece, start in _original_pieces(checkpoint_name(name), local, _shard_start(param)):
            piece = piece.detach()
            if device is not None and piece.device.type == "cpu":
                piece = piece.to(device, non_blocking=False)
            block = starts.get(piece_name)
            yield piece_name, piece.to(dtype), None if start is None or block is None or orig_params else block + start


def actor_tensor_fingerprints(worker: Any, dtype_name: str, packed: Optional[dict[str, list[str]]] = None) -> dict:
    """Run inside an actor worker (``worker.__ray_call__.remote(actor_tensor_fingerprints, dtype, packed)``): the
    fingerprint of each of its local parameter shards as ``dtype_name`` (one tensor cast at a time), each word counted
    at its position in the vLLM tensor that loads it (:func:`.served_weights.fingerprint_placed`, vLLM's
    ``packed_modules_mapping`` ``packed``), so the ranks' pieces add up to that tensor's fingerprint
    (:func:`.served_cast.composed_fingerprints`). ``{"tensors": {name: fingerprint}, "unplaced": [the names of
    pieces whose position is not known, fingerprinted as if at 0], "seconds"}``."""
    import torch

    start = time.perf_counter()
    module = find_actor(worker).engine.module
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # verl's offload copies are non_blocking: read the shards once written
    starts = block_starts(_whole_numels(module), packed or {})
    unplaced: list[str] = []

    def placed():
        for name, piece, at in _local_shards_as(module, getattr(torch, DTYPES[dtype_name]), starts):
            if at is None:
                unplaced.append(name)
            yield name, piece, at or 0

    fp = fingerprint_placed(placed())
    return {"tensors": fp, "unplaced": unplaced, "seconds": time.perf_counter() - start}


def trainer_changed_tensors(previous: Optional[list[dict]], current: list[dict]) -> Optional[set[str]]:
    """The names of the tensors whose fingerprint differs from the previous sync's on some actor rank (each rank's
    ``actor_tensor_fingerprints(...)["tensors"]``); None without a previous one. The trainer changed where it is
    not empty."""
    if previous is None or len(previous) != len(current):
        return None
    return {name for old, new in zip(previous, current)
            for name in set(old) | set(new) if old.get(name) != new.get(name)}


def tensors_checkable(checkpoint_backend: Any, rollout_dtype: Optional[str], quantization: Any = None) -> bool:
    """Whether the per-tensor rule applies: not with a quantized rollout (``quantization``, as
    :func:`verl_offgrpo.config.readers.vllm_quantization` reads it: a tensor whose few changed elements round to the
    same quantized values honestly keeps its bits), nor where verl's delta sync
    (``rollout.checkpoint_engine.backend`` ``delta_sharded``) decides what changed in bf16 (verl 0.9.1's
    ``get_per_tensor_param_shard``) while vLLM holds a finer dtype: a change below bf16's resolution is not sent."""
    return quantization is None and not (checkpoint_backend == "delta_sharded" and rollout_dtype != "bfloat16")


def served_name(name: str, packed: dict[str, list[str]]) -> str:
    """The vLLM tensor that loads the checkpoint's tensor ``name``: a name segment that is a shard of a fused module
    of ``packed`` (vLLM's ``packed_modules_mapping``) replaced by the fused one (``layers.0.self_attn.k_proj.weight``
    → ``layers.0.self_attn.qkv_proj.weight``); else ``name``."""
    fused = {shard: module for module, shards in packed.items() for shard in shards}
    return ".".join(fused.get(part, part) for part in name.split("."))


def tensors_that_did_not_arrive(answers: list[Any], changed: set[str]) -> tuple[list[tuple[int, list]], int, int]:
    """Per replica, the vLLM tensors fed by a trainer tensor in ``changed`` that no TP rank changed at the sync (from
    the ranks' ``record`` answers: ``changed_tensors``, ``fingerprints``, ``packed``), as ``[(replica, [(vLLM name,
    [the trainer's changed tensors it loads])])]``; how many tensors were checked, summed over replicas; and how many
    replicas were. A replica some rank of which has no previous record is skipped (the rank rule says so)."""
    missing, checked, replicas = [], 0, 0
    for index, ranks in enumerate(answers):
        if any(rank.get("changed_tensors") is None for rank in ranks):
            continue
        replicas += 1
        served = {name for rank in ranks for name in rank.get("fingerprints") or {}}
        moved = {name for rank in ranks for name in rank["changed_tensors"]}
        packed = packed_of([ranks])
        sources: dict[str, list[str]] = {}
        for name in sorted(changed):
            loaded_by = served_name(name, packed)
            if loaded_by in served:
                sources.setdefault(loaded_by, []).append(name)
        checked += len(sources)
        lost = [(name, sources[name]) for name in sorted(sources) if name not in moved]
        if lost:
            missing.append((index, lost))
    return missing, checked, replicas


def packed_of(answers: list[Any]) -> dict[str, list[str]]:
    """vLLM's ``packed_modules_mapping`` from the ranks' ``record`` answers (the first that has one; {} if none)."""
    return next((rank["packed"] for ranks in answers if isinstance(ranks, (list, tuple))
                 for rank in ranks if isinstance(rank, dict) and rank.get("packed")), {})


def trainer_numels(tensors: list[dict]) -> dict[str, int]:
    """Each trainer tensor's element count: the sum over the actor ranks of their shards' (each rank's
    :func:`actor_tensor_fingerprints` ``"tensors"``; a fingerprint starts with its element count). FSDP shards a
    tensor over the ranks, so this is the whole tensor's; where ranks hold copies (hybrid sharding) it is a multiple,
    which no vLLM rank matches: those tensors are then not checked by :func:`replicas_with_unequal_copies`."""
    numels: dict[str, int] = {}
    for rank in tensors:
        for name, fp in rank.items():
            numels[name] = numels.get(name, 0) + int(fp[0])
    return numels


def replicas_with_unequal_copies(answers: list[Any], numels: dict[str, int]) -> tuple[list[tuple[int, list]], int, int]:
    """Per replica of two or more TP ranks, the 1-D tensors every rank holds whole that are not bit for bit alike on
    all of them, from the ranks' ``record`` answers (``fingerprints``, ``ndims``), as ``[(replica, [(name, [the ranks
    whose copy differs from the first rank's])])]``; how many tensors were compared, summed over replicas; and how many
    replicas of two or more ranks answered.

        a 1-D tensor t held whole on every rank (its element count there = the trainer's, :func:`trainer_numels`)
            ⇒  every TP rank's fingerprint of t is the same

    vLLM 0.24 loads such a tensor (a norm, Qwen3's q_norm/k_norm, a row-parallel layer's bias) from the same bytes on
    every rank, so copies that differ mean a sync that reached some ranks with it and not others, which the rank rule
    (each rank changed something) and the per-tensor rule (some rank changed it) let through. Not compared: a tensor a
    rank holds a slice of, one whose name the trainer does not have, and tensors of two or more dimensions (a tiny
    vocabulary's padded embedding slice can have the whole count and hold zeros on all but the first rank; an MoE
    bias vLLM zeroes on all but rank 0, such as GPT-OSS's ``w2_bias``)."""
    unequal, compared, replicas = [], 0, 0
    for index, ranks in enumerate(answers):
        if not isinstance(ranks, (list, tuple)) or not all(isinstance(rank, dict) for rank in ranks):
            continue  # no per-rank answers: :func:`replicas_breaking_the_rule` says so where it is asked
        fps, ndims = [rank.get("fingerprints") for rank in ranks], [rank.get("ndims") or {} for rank in ranks]
        if len(fps) < 2 or not all(fps):
            continue
        replicas += 1
        differ = []
        for name in sorted(set(fps[0]).intersection(*fps[1:])):
            if any(fp[name][0] != numels.get(name) for fp in fps) or any(nd.get(name) != 1 for nd in ndims):
                continue
            compared += 1
            odd = [rank.get("rank", position) for position, (rank, fp) in enumerate(zip(ranks, fps))
                   if fp[name] != fps[0][name]]
            if odd:
                differ.append((name, odd))
        if differ:
            unequal.append((index, differ))
    return unequal, compared, replicas


def unequal_copies_message(unequal: list[tuple[int, list]], step: int, num_replicas: int) -> str:
    """The :class:`~.alpha_guard.ServedPolicyError` text for :func:`replicas_with_unequal_copies`'s result."""
    index, differ = unequal[0]
    replica, others, _ = where(index, len(unequal), num_replicas, None)
    name, odd = differ[0]
    more = f" (and {len(differ) - 1} more such tensors)" if len(differ) > 1 else ""
    ranks = tp_ranks(odd)
    return (
        f"verl-offgrpo: step {step}: the weight sync reached vLLM's TP ranks unequally: every rank of {replica}{others} "
        f"holds {name} whole, but {ranks} serve{'s' if len(odd) == 1 else ''} a copy unlike the first rank's{more}, "
        "so the sync reached some of them with it and not others, and the replica's next rollout would mix two "
        "policies. Stopped before any batch was sampled from it. Check the weight-sync path (verl's checkpoint engine, each rank's loader); "
        "algorithm.off_grpo.verify_served_weights=false turns the check off."
    )


def tp_ranks(ranks: list) -> str:
    """``TP rank 1`` / ``TP ranks 0, 1`` for a message."""
    return f"TP rank{'s' if len(ranks) > 1 else ''} {', '.join(str(r) for r in ranks)}"


def listed(named: list[str], sep: str = "; ", last: str = "; and", most: int = 3) -> str:
    """The first ``most`` of ``named`` for a message, and how many more."""
    return sep.join(named[:most]) + (f"{last} {len(named) - most} more" if len(named) > most else "")


def where(index: int, alike: int, num_replicas: int, previous_step: Optional[int]) -> tuple[str, str, str]:
    """The parts both stop messages share: the first breaking replica, how many more break alike, and the sync since
    which the trainer's weights are compared."""
    replica = f"replica {index}" + (f" of {num_replicas}" if num_replicas > 1 else "")
    others = f" ({alike} of {num_replicas} replicas alike)" if alike > 1 else ""
    since = f"the sync of step {previous_step}" if previous_step is not None else "the previous sync"
    return replica, others, since


def tensors_message(missing: list[tuple[int, list]], step: int, previous_step: Optional[int],
                    num_replicas: int) -> str:
    """The :class:`~.alpha_guard.ServedPolicyError` text for :func:`tensors_that_did_not_arrive`'s result: the
    trainer's tensors, with the vLLM tensor that loads them where its name differs (a fused one)."""
    index, lost = missing[0]
    replica, others, since = where(index, len(missing), num_replicas, previous_step)
    named = [", ".join(sources) if sources == [served] else f"{', '.join(sources)} (vLLM's {served})"
             for served, sources in lost]
    return (
        f"verl-offgrpo: step {step}: the weight sync reached vLLM only in part: the trainer changed {listed(named)} "
        f"since {since}, but no vLLM worker of {replica}{others} serves a changed copy, so its next rollout would mix the "
        f"policy of {since} into α = the policy of step {step}. Stopped before any batch was sampled from it. Check "
        "the weight-sync path (verl's checkpoint engine, the names vLLM's loader takes); "
        "algorithm.off_grpo.verify_served_weights=false turns the check off."
    )


def replicas_breaking_the_rule(answers: list[Any], changed: bool) -> list[tuple[int, dict]]:
    """The replicas some of whose TP ranks' served weights did not change as the trainer's did (``changed``), from
    each replica's answers to the ``record`` after the sync (:func:`.served_weights.call_replicas`: one dict per TP
    rank with ``"changed"``), as ``(replica index, {"changed": not changed, "ranks": [the ranks that broke it]})``;
    a rank without a previous record (None) tells nothing. Raises RuntimeError if a replica gave no per-rank answers
    (verl's ``collective_rpc`` unpatched) or none of its ranks has a previous record (its workers restarted since
    the last sync: nothing to compare)."""
    breaking = []
    for index, ranks in enumerate(answers):
        if not isinstance(ranks, (list, tuple)) or not all(isinstance(rank, dict) for rank in ranks):
            raise RuntimeError(
                f"rollout replica {index} answered {ranks!r:.200} instead of one record per vLLM worker (verl's "
                "vLLMHttpServer.collective_rpc returns no results without verl_offgrpo.patches.rpc_results)"
            )
        known = [(position, rank) for position, rank in enumerate(ranks) if rank.get("changed") is not None]
        if not known:
            raise RuntimeError(f"no vLLM worker of rollout replica {index} has a record of the previous sync to compare "
                               "with (restarted since?)")
        broke = [rank.get("rank", position) for position, rank in known if bool(rank["changed"]) != changed]
        if broke:
            breaking.append((index, {"changed": not changed, "ranks": broke}))
    return breaking


def rule_broken_message(breaking: list[tuple[int, dict]], changed: bool, step: int, previous_step: Optional[int],
                        num_replicas: int) -> str:
    """The :class:`~.alpha_guard.ServedPolicyError` text for :func:`replicas_breaking_the_rule`'s result."""
    index, payload = breaking[0]
    ranks = payload["ranks"]
    replica, others, since = where(index, len(breaking), num_replicas, previous_step)
    named = tp_ranks(ranks)
    if changed:
        return (
            f"verl-offgrpo: step {step}: the weight sync did not reach vLLM: the trainer's weights changed since "
            f"{since}, but the vLLM workers of {replica} ({named}){others} serve the same weights as after it, so "
            f"its next rollout would sample from the policy of {since}, not α = the policy of step {step}. Stopped "
            "before any batch was sampled from them. Check the weight-sync path (verl's checkpoint engine, vLLM's "
            "sleep/wake); algorithm.off_grpo.verify_served_weights=false turns the check off."
        )
    return (
        f"verl-offgrpo: step {step}: vLLM's weights changed at the sync although the trainer's did not since {since} "
        f"({replica}, {named}){others}: the engine serves weights the trainer never had. Stopped before any "
        "batch was sampled from them. algorithm.off_grpo.verify_served_weights=false turns the check off."
    )


__all__ = ["actor_tensor_fingerprints", "block_starts", "checkpoint_name", "find_actor", "listed", "packed_of",
           "replicas_breaking_the_rule", "replicas_with_unequal_copies", "rule_broken_message", "served_name",
           "tensors_checkable", "tensors_message", "tensors_that_did_not_arrive", "trainer_changed_tensors",
           "tp_ranks", "trainer_numels", "unequal_copies_message", "where"]
