"""Exact rule at each real sync: vLLM holds the trainer's tensors cast to vLLM's dtype, bit for bit.

Part of the check that each sync reached vLLM (:mod:`.sync_reached`, ``algorithm.off_grpo.verify_served_weights``,
v > 1). The rules there ask whether vLLM's weights *changed* when the trainer's did; after a level-2 sleep (the
windowed rollout's, between windows) a wake rewrites the weights' memory, so "changed" holds whether the sync arrived
or not. This rule asks what the sync must leave behind instead::

    served(V) = Σ over the actor ranks' pieces of the trainer tensors that vLLM's tensor V loads     (as fingerprints)
    V held whole by a vLLM rank             ⇒  that rank's fingerprint of V = served(V)
    V split over a replica's TP ranks       ⇒  Σ over the ranks of their parts' (s0, s3) = served(V)'s (s0, s3)

A fingerprint (:func:`.served_weights.fingerprint`) is a set of sums over the tensor's 16-bit words: s1, s2 weight
each word by its position; the trainer counts each word of its shard at its position in V
(:func:`.sync_reached.block_starts`: a fused ``qkv_proj`` at TP = 1 is [q_proj; k_proj; v_proj]), so the ranks'
sums add up to V's exactly (:func:`composed_fingerprints`). "Whole": the rank's element count of V equals the
trainer's (every tensor at TP = 1; norms at TP > 1; not vLLM's padded vocabulary). A tensor the TP ranks slice (a
column- or row-parallel layer) is compared by the sums free of positions, s0 = Σ words and s3 = Σ h(word), whatever
vLLM's layout, where the ranks' element counts add up to the trainer's (not with key/value heads copied over ranks,
nor a padded vocabulary): a slice the sync left stale on one rank shows there. Each whole tensor compared is then α
exactly (up to a 2⁻³⁰ chance that two tensors share a fingerprint), in every rollout schedule; a sliced one is
α's up to a permutation of its words inside the replica.

An honest engine may store something other than the cast for some tensors (a model's own loader, a tensor vLLM
keeps in float32). Two syncs are read as the engine's layout, not judged (:func:`calibrates`): the first a process
checks, whose trainer weights usually sit on the rollout dtype's grid (loaded from a bf16 checkpoint), and the first
after the trainer's weights changed, whose values are off it (a loader that rounds otherwise than torch's cast shows
there). The tensors unlike the trainer's at those two are left out for the run (a warning names them), unless another
replica holds them exactly as the cast: every replica gets the same weights through the same loader, so that one is
stopped (:func:`unlike_where_another_replica_is_alike`); at any other
sync a compared tensor unlike the trainer's stops the run: one whose weights did not change since a sync where they
matched, or any after the calibration. A first sync that did not arrive at all is stopped by the r' monitor's lag-0
limit (``max_log_rprime_after_sync``) at the first batch.
"""

from __future__ import annotations

from typing import Any, Optional

from .sync_reached import listed, served_name, tp_ranks, where

#: metric: tensors compared bit for bit with the trainer's cast at the sync, summed over vLLM workers
COMPARED = "off_grpo/sync_tensors_exact"


def calibrates(armed: bool, trainer_changed: Optional[bool]) -> bool:
    """Whether this sync is read as the engine's layout (its unlike tensors left out) instead of judged: until
    ``armed``, the first checked sync (``trainer_changed`` None: nothing to compare with) and the first whose trainer
    weights changed; a sync between them with the trainer unchanged is judged (the same inputs as a sync that
    matched)."""
    return not armed and trainer_changed is not False


def composed_fingerprints(tensors: list[dict], unplaced: set[str], packed: dict[str, list[str]]) -> dict[str, list]:
    """``{vLLM name: [numel, dtype, s0, s1, s2, s3]}``: per vLLM tensor (:func:`.sync_reached.served_name`), the sum
    of the fingerprints of the actor ranks' pieces that it loads (each rank's
    :func:`.sync_reached.actor_tensor_fingerprints` ``"tensors"``, placed in it). s1, s2 are None for a vLLM tensor
    fed by a piece of ``unplaced`` (position unknown: its s0, s3 still add up); a tensor fed by pieces of two dtypes is
    left out."""
    sums: dict[str, list] = {}
    placed_nowhere = {served_name(name, packed) for name in unplaced}
    mixed = set()
    for rank in tensors:
        for name, (numel, dtype, *words) in rank.items():
            served = served_name(name, packed)
            total = sums.setdefault(served, [0, dtype, 0, 0, 0, 0])
            if total[1] != dtype:
                mixed.add(served)
            total[0] += int(numel)
            for position, value in enumerate(words, start=2):
                total[position] += int(value)
    for name in placed_nowhere & set(sums):
        sums[name][3] = sums[name][4] = None
    return {name: total for name, total in sums.items() if name not in mixed}


Pair = tuple[int, str]  # (replica, vLLM tensor name)
#: the fields of a fingerprint that do not depend on where its words sit: numel, dtype, s0, s3
POSITION_FREE = (0, 1, 2, 5)


def _as_fingerprint(fp: list) -> list:
    return [int(fp[0]), str(fp[1])] + [int(v) for v in fp[2:]]


def _alike(served: list, trainer: list) -> bool:
    """A vLLM rank's whole copy against the trainer's: every sum where the trainer's are placed, else all but the
    positional s1, s2."""
    if trainer[3] is None:
        return [served[i] for i in POSITION_FREE] == [trainer[i] for i in POSITION_FREE]
    return served == trainer


def compare_with_trainer(answers: list[Any], composed: dict[str, list], trusted: Optional[set[Pair]],
                         left_out: frozenset | set = frozenset()) -> tuple[list[tuple[int, list]], set[Pair], int]:
    """vLLM's tensors compared with :func:`composed_fingerprints` (the ranks' ``record`` answers' ``fingerprints``):
    each whole copy (its element count = the trainer's) on its own, and a tensor every TP rank of a replica holds part
    of, the parts' counts adding up to the trainer's, by the sums of their (s0, s3). Returns per replica the unlike
    tensors, as ``[(replica, [(name, [the ranks that hold an unlike copy, or all the ranks for parts])])]``; the
    ``(replica, name)`` pairs found alike; and how many (tensor, rank) copies or parts were compared.
    Only the pairs of ``trusted`` are compared (None: every comparable one but those ``left_out``, at a calibrating
    sync)."""
    unlike, alike, compared = [], set(), 0
    for index, ranks in enumerate(answers):
        held: dict[str, list] = {}
        ranks = [rank for rank in (ranks if isinstance(ranks, (list, tuple)) else ()) if isinstance(rank, dict)]
        for position, rank in enumerate(ranks):
            for name, fp in (rank.get("fingerprints") or {}).items():
                held.setdefault(name, []).append((rank.get("rank", position), _as_fingerprint(fp)))
        differ: dict[str, list] = {}
        for name, copies in held.items():
            trainer, pair = composed.get(name), (index, name)
            if trainer is None or pair in left_out or (trusted is not None and pair not in trusted):
                continue
            whole = [(rank, fp) for rank, fp in copies if fp[0] == trainer[0]]
            if whole:
                compared += len(whole)
                odd = [rank for rank, fp in whole if not _alike(fp, trainer)]
            elif len(copies) == len(ranks) > 1 and sum(fp[0] for _, fp in copies) == trainer[0]:
                compared += len(copies)
                parts = [trainer[0], trainer[1]] + [sum(fp[i] for _, fp in copies) for i in POSITION_FREE[2:]]
                same_dtype = all(fp[1] == trainer[1] for _, fp in copies)
                odd = [] if same_dtype and parts == [trainer[i] for i in POSITION_FREE] else [r for r, _ in copies]
            else:
                continue
            if odd:
                differ[name] = odd
            else:
                alike.add(pair)
        if differ:
            unlike.append((index, sorted(differ.items())))
    return unlike, alike, compared


def pairs_of(unlike: list[tuple[int, list]]) -> set[Pair]:
    """The ``(replica, name)`` pairs of :func:`compare_with_trainer`'s unlike tensors."""
    return {(index, name) for index, tensors in unlike for name, _ in tensors}


def copies_of(unlike: list[tuple[int, list]]) -> int:
    """How many (tensor, rank) copies or parts :func:`compare_with_trainer` found unlike."""
    return sum(len(ranks) for _, tensors in unlike for _, ranks in tensors)


def unlike_where_another_replica_is_alike(unlike: list[tuple[int, list]], alike: set[Pair]) -> list[tuple[int, list]]:
    """Of :func:`compare_with_trainer`'s unlike tensors, those another replica holds exactly as the trainer's cast.
    Every replica receives the same weights through the same loader, so there the cast is the engine's layout and the
    unlike replica does not serve α: not a calibrating sync's to leave out."""
    alike_names = {name for _, name in alike}
    odd = [(index, [(name, ranks) for name, ranks in tensors if name in alike_names]) for index, tensors in unlike]
    return [(index, tensors) for index, tensors in odd if tensors]


def replicas_disagree_message(odd: list[tuple[int, list]], step: int, dtype: str, num_replicas: int) -> str:
    """The :class:`~.alpha_guard.ServedPolicyError` text for :func:`unlike_where_another_replica_is_alike`."""
    return _unlike_text(odd, step, dtype, num_replicas, "which another replica serves exactly: every replica receives "
                        "the same weights, so its")


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
    return _unlike_text(unlike, step, dtype, num_replicas, f"which it matched at the sync of step {matched_step}: its")


def _unlike_text(unlike: list[tuple[int, list]], step: int, dtype: str, num_replicas: int, because: str) -> str:
    """The stop message of the cast rule for the first replica of ``unlike``; ``because`` says why its copy cannot be
    the engine's layout, and leads into "next rollout"."""
    index, tensors = unlike[0]
    replica, others, _ = where(index, len(unlike), num_replicas, None)
    named = [f"{name} ({tp_ranks(ranks)})" for name, ranks in tensors]
    return (
        f"verl-offgrpo: step {step}: after the weight sync vLLM's {replica}{others} serves {listed(named)} unlike the "
        f"trainer's weights cast to {dtype}, {because} next rollout would not sample from α = the policy of step "
        f"{step}. Stopped before any batch was sampled from it. Check the weight-sync path (verl's checkpoint engine, "
        "vLLM's loader and sleep/wake); algorithm.off_grpo.verify_served_weights=false turns the check off."
    )


__all__ = ["COMPARED", "calibrates", "compare_with_trainer", "composed_fingerprints", "copies_of", "left_out_warning",
           "nothing_compared_warning", "pairs_of", "replicas_disagree_message", "unlike_message",
           "unlike_where_another_replica_is_alike"]
