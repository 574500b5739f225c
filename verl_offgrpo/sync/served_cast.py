"""Exact rule at each real sync: a tensor vLLM holds whole is the trainer's tensor cast to vLLM's dtype, bit for bit.

Part of the check that each sync reached vLLM (:mod:`.sync_reached`, ``algorithm.off_grpo.verify_served_weights``,
v > 1). The rules there ask whether vLLM's weights *changed* when the trainer's did; after a level-2 sleep (the
windowed rollout's, between windows) a wake rewrites the weights' memory, so "changed" holds whether the sync arrived
or not. This rule asks what the sync must leave behind instead::

    served(V) = Σ over the actor ranks' pieces of the trainer tensors that vLLM's tensor V loads     (as fingerprints)
    V held whole by a vLLM rank  ⇒  that rank's fingerprint of V = served(V)

A fingerprint (:func:`.served_weights.fingerprint`) is a sum over the tensor's 16-bit words, each weighted by its
position; the trainer counts each word of its shard at its position in V (:func:`.sync_reached.block_starts`: a
fused ``qkv_proj`` at TP = 1 is [q_proj; k_proj; v_proj]), so the ranks' sums add up to V's exactly
(:func:`composed_fingerprints`). "Whole": the rank's element count of V equals the trainer's (every tensor at TP = 1;
norms at TP > 1; not vLLM's padded vocabulary). Each compared tensor then is α exactly, in every rollout schedule.

An honest engine may store something other than the cast for some tensors (a model's own loader, a tensor vLLM
keeps in float32): those differ at the first sync already, so the first sync a process checks is read as the
engine's layout, not judged: the tensors unlike the trainer's there are left out for the run (one warning names
them), and from the next sync on any compared tensor unlike the trainer's stops the run. A first sync that did not
arrive at all is stopped by the r' monitor's lag-0 limit (``max_log_rprime_after_sync``) at the first batch.
"""

from __future__ import annotations

from typing import Any, Optional

from .sync_reached import served_name

#: metric: tensors compared bit for bit with the trainer's cast at the sync, summed over vLLM workers
COMPARED = "off_grpo/sync_tensors_exact"


def composed_fingerprints(tensors: list[dict], unplaced: set[str], packed: dict[str, list[str]]) -> dict[str, list]:
    """``{vLLM name: [numel, dtype, s0, s1, s2]}``: per vLLM tensor (:func:`.sync_reached.served_name`), the sum of
    the fingerprints of the actor ranks' pieces that it loads (each rank's
    :func:`.sync_reached.actor_tensor_fingerprints` ``"tensors"``, placed in it). Left out: a vLLM tensor fed by a
    piece of ``unplaced`` (position unknown) or by pieces of two dtypes."""
    sums: dict[str, list] = {}
    poisoned = {served_name(name, packed) for name in unplaced}
    for rank in tensors:
        for name, (numel, dtype, s0, s1, s2) in rank.items():
            served = served_name(name, packed)
            total = sums.setdefault(served, [0, dtype, 0, 0, 0])
            if total[1] != dtype:
                poisoned.add(served)
            for position, value in ((0, numel), (2, s0), (3, s1), (4, s2)):
                total[position] += int(value)
    return {name: total for name, total in sums.items() if name not in poisoned}


def tensors_unlike_trainer(answers: list[Any], composed: dict[str, list], left_out: set[str]
                           ) -> tuple[list[tuple[int, list]], int]:
    """Per replica, the vLLM tensors some TP rank holds whole (its element count = the trainer's) whose fingerprint
    differs from :func:`composed_fingerprints`' (the ranks' ``record`` answers' ``fingerprints``), as
    ``[(replica, [(name, [the ranks that differ])])]``, and how many (tensor, rank) pairs were compared. Tensors of
    ``left_out`` are not compared."""
    unlike, compared = [], 0
    for index, ranks in enumerate(answers):
        differ: dict[str, list] = {}
        for position, rank in enumerate(ranks if isinstance(ranks, (list, tuple)) else ()):
            for name, fp in ((rank.get("fingerprints") or {}) if isinstance(rank, dict) else {}).items():
                trainer = composed.get(name)
                if trainer is None or name in left_out or int(fp[0]) != trainer[0]:
                    continue
                compared += 1
                if [int(fp[0]), str(fp[1])] + [int(v) for v in fp[2:]] != trainer:
                    differ.setdefault(name, []).append(rank.get("rank", position))
        if differ:
            unlike.append((index, sorted(differ.items())))
    return unlike, compared


def names_of(unlike: list[tuple[int, list]]) -> set[str]:
    """The tensor names in :func:`tensors_unlike_trainer`'s result."""
    return {name for _, tensors in unlike for name, _ in tensors}


def left_out_warning(left_out: set[str], compared: int, dtype: str) -> str:
    """The warning for the tensors the first checked sync leaves out of the rule."""
    listed = ", ".join(sorted(left_out)[:3]) + (f" and {len(left_out) - 3} more" if len(left_out) > 3 else "")
    return (
        f"verl-offgrpo: at the first checked sync vLLM holds {len(left_out)} tensor(s) unlike the trainer's cast to "
        f"{dtype} ({listed}): its loader stores something else for them, or the sync did not reach them; the exact "
        f"check of each sync leaves them out for this run ({compared} compared)."
    )


def unlike_message(unlike: list[tuple[int, list]], step: int, dtype: str, num_replicas: int,
                   previous_step: Optional[int]) -> str:
    """The :class:`~.alpha_guard.ServedPolicyError` text for :func:`tensors_unlike_trainer`'s result."""
    index, tensors = unlike[0]
    replica = f"replica {index}" + (f" of {num_replicas}" if num_replicas > 1 else "")
    others = f" ({len(unlike)} of {num_replicas} replicas alike)" if len(unlike) > 1 else ""
    named = [f"{name} (TP rank{'s' if len(ranks) > 1 else ''} {', '.join(str(r) for r in ranks)})"
             for name, ranks in tensors]
    listed = "; ".join(named[:3]) + (f"; and {len(named) - 3} more" if len(named) > 3 else "")
    since = f"at the sync of step {previous_step}" if previous_step is not None else "at the first checked sync"
    return (
        f"verl-offgrpo: step {step}: after the weight sync vLLM's {replica}{others} serves {listed} unlike the "
        f"trainer's weights cast to {dtype}, which it matched {since}: its next rollout would not sample from "
        f"α = the policy of step {step}. Stopped before any batch was sampled from it. Check the weight-sync path "
        "(verl's checkpoint engine, vLLM's loader and sleep/wake); algorithm.off_grpo.verify_served_weights=false "
        "turns the check off."
    )


__all__ = ["COMPARED", "composed_fingerprints", "left_out_warning", "names_of", "tensors_unlike_trainer",
           "unlike_message"]
