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
keeps in float32). Two syncs are read as the engine's layout, not judged (:func:`calibrates`): the first a process
checks, whose trainer weights usually sit on the rollout dtype's grid (loaded from a bf16 checkpoint), and the first
after the trainer's weights changed, whose values are off it (a loader that rounds otherwise than torch's cast shows
there). The tensors unlike the trainer's at those two are left out for the run (a warning names them); at any other
sync a compared tensor unlike the trainer's stops the run: one whose weights did not change since a sync where they
matched, or any after the calibration. A first sync that did not arrive at all is stopped by the r' monitor's lag-0
limit (``max_log_rprime_after_sync``) at the first batch.
"""

from __future__ import annotations

from typing import Any, Optional

from .sync_reached import listed, served_name, where

#: metric: tensors compared bit for bit with the trainer's cast at the sync, summed over vLLM workers
COMPARED = "off_grpo/sync_tensors_exact"


def calibrates(armed: bool, trainer_changed: Optional[bool]) -> bool:
    """Whether this sync is read as the engine's layout (its unlike tensors left out) instead of judged: until
    ``armed``, the first checked sync (``trainer_changed`` None: nothing to compare with) and the first whose trainer
    weights changed; a sync between them with the trainer unchanged is judged (the same inputs as a sync that
    matched)."""
    return not armed and trainer_changed is not False


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


Pair = tuple[int, str]  # (replica, vLLM tensor name)


def compare_with_trainer(answers: list[Any], composed: dict[str, list], trusted: Optional[set[Pair]],
                         left_out: frozenset | set = frozenset()) -> tuple[list[tuple[int, list]], set[Pair], int]:
    """The vLLM tensors some TP rank holds whole (its element count = the trainer's) compared with
    :func:`composed_fingerprints` (the ranks' ``record`` answers' ``fingerprints``): per replica the unlike ones, as
    ``[(replica, [(name, [the ranks that differ])])]``; the ``(replica, name)`` pairs alike on every rank that holds
    them whole; and how many (tensor, rank) copies were compared. Only the pairs of ``trusted`` are compared (None:
    every comparable one but those ``left_out``, at a calibrating sync)."""
    unlike, alike, compared = [], set(), 0
    for index, ranks in enumerate(answers):
        differ: dict[str, list] = {}
        seen: set[str] = set()
        for position, rank in enumerate(ranks if isinstance(ranks, (list, tuple)) else ()):
            for name, fp in ((rank.get("fingerprints") or {}) if isinstance(rank, dict) else {}).items():
                trainer = composed.get(name)
                pair = (index, name)
                if (trainer is None or int(fp[0]) != trainer[0] or pair in left_out
                        or (trusted is not None and pair not in trusted)):
                    continue
                compared += 1
                seen.add(name)
                if [int(fp[0]), str(fp[1])] + [int(v) for v in fp[2:]] != trainer:
                    differ.setdefault(name, []).append(rank.get("rank", position))
        alike |= {(index, name) for name in seen - set(differ)}
        if differ:
            unlike.append((index, sorted(differ.items())))
    return unlike, alike, compared


def pairs_of(unlike: list[tuple[int, list]]) -> set[Pair]:
    """The ``(replica, name)`` pairs of :func:`compare_with_trainer`'s unlike tensors."""
    return {(index, name) for index, tensors in unlike for name, _ in tensors}


def copies_of(unlike: list[tuple[int, list]]) -> int:
    """How many (tensor, rank) copies :func:`compare_with_trainer` found unlike."""
    return sum(len(ranks) for _, tensors in unlike for _, ranks in tensors)


def left_out_warning(unlike: list[tuple[int, list]], compared: int, dtype: str, step: int) -> str:
    """The warning for the tensors a calibrating sync (:func:`calibrates`) leaves out of the rule."""
    names = sorted({name for _, name in pairs_of(unlike)})
    return (
        f"verl-offgrpo: at the sync of step {step} vLLM holds {len(names)} tensor(s) unlike the trainer's cast to "
        f"{dtype} ({listed(names, ', ', ' and')}): its loader stores something else for them, or the sync did not "
        f"reach them; the exact check of each sync leaves them out for this run ({compared} tensor copies still compared)."
    )


def nothing_compared_warning() -> str:
    """The warning when the first checked sync compares no tensor with the trainer's cast."""
    return (
        "verl-offgrpo: the check that each sync leaves vLLM the trainer's cast compares no tensor in this run: no "
        "tensor a vLLM worker holds whole has a trainer tensor of its name and size at a known position (another "
        "naming, or shards the plugin cannot place: FSDP1 with use_orig_params, a 2-D device mesh); the other sync "
        "rules stay on."
    )


def unlike_message(unlike: list[tuple[int, list]], step: int, dtype: str, num_replicas: int, matched_step: int) -> str:
    """The :class:`~.alpha_guard.ServedPolicyError` text for :func:`compare_with_trainer`'s unlike tensors."""
    index, tensors = unlike[0]
    replica, others, _ = where(index, len(unlike), num_replicas, None)
    named = [f"{name} (TP rank{'s' if len(ranks) > 1 else ''} {', '.join(str(r) for r in ranks)})"
             for name, ranks in tensors]
    return (
        f"verl-offgrpo: step {step}: after the weight sync vLLM's {replica}{others} serves {listed(named)} unlike the "
        f"trainer's weights cast to {dtype}, which it matched at the sync of step {matched_step}: its next rollout "
        f"would not sample from α = the policy of step {step}. Stopped before any batch was sampled from it. Check the "
        "weight-sync path (verl's checkpoint engine, vLLM's loader and sleep/wake); "
        "algorithm.off_grpo.verify_served_weights=false turns the check off."
    )


__all__ = ["COMPARED", "calibrates", "compare_with_trainer", "composed_fingerprints", "copies_of", "left_out_warning",
           "nothing_compared_warning", "pairs_of", "unlike_message"]
