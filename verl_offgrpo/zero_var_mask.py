"""Rows that leave the loss (zero-variance groups; RED-Drop's dropped rows), and how they leave the V1
trainer's loss.

A group G (rows sharing a ``uid``) with N > 1 members is *zero-variance* when max_G r = min_G r
(all rewards equal; exact comparison, so float rewards that only look equal are not masked).
Its advantages are all 0, so it only contributes to the loss's token-mean denominator and the KL
term; the paper masks such groups out entirely (§4). Singleton groups are never masked (their
variance is undefined; verl's ``grpo`` gives them std 1).

RED-Drop (``algorithm.adv_estimator=red_drop``) drops a group's surplus negatives
(:func:`verl_offgrpo.groups.red_drop_rows`); they leave the loss the same way. The draw is a pure
function of the seed, the uids, the rewards and the rows' order, so the rows are recomputed here rather
than handed over.

In the v0 trainer the estimator's in-place edit of ``data.batch["response_mask"]`` is the batch that
the actor update sees (:mod:`verl_offgrpo.sync.bound_monitor_v0` adds the metrics). The V1 trainer keeps
the batch in the TransferQueue; :mod:`verl_offgrpo.sync.advantage_v1` writes the masks back there.
This module is tensors only: no trainer, no TransferQueue.
"""

from __future__ import annotations

import torch

from verl_offgrpo.bound_monitor import bound_metrics
from verl_offgrpo.groups import red_drop_rows, zero_variance_rows


def zero_rows_nested(nested: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """A jagged nested tensor (or a padded one) with the given rows set to 0."""
    if not nested.is_nested:
        out = nested.clone()
        out[rows.to(out.device)] = 0
        return out
    pieces = [torch.zeros_like(t) if bool(drop) else t for t, drop in zip(nested.unbind(), rows.tolist(), strict=True)]
    return torch.nested.as_nested_tensor(pieces, layout=torch.jagged)


def padded(tensor: torch.Tensor) -> torch.Tensor:
    """(bs, L) zero-padded view of a jagged nested tensor (a padded tensor is returned as is)."""
    return tensor.to_padded_tensor(0.0) if tensor.is_nested else tensor


def advantage_step_metrics(
    scores, index, mask_before, rprime, knobs, red_drop: bool = False
) -> tuple[dict[str, float], torch.Tensor]:
    """The step's bound-monitor metrics, ``off_grpo/zero_var_masked_frac`` and ``off_grpo/red_drop/dropped_frac``,
    and the rows that leave the loss (bool (bs,)).

    Shared by both trainers, right after the advantage: ``scores`` (bs,) summed rewards, ``index``
    the group ids, ``mask_before`` the response/loss mask *before* rows left it, ``rprime`` verl's token
    IS weights (or ``None``), ``knobs`` the :class:`~verl_offgrpo.config.OffGRPOConfig`, ``red_drop``
    whether the estimator is RED-Drop.
    """
    zero_var = zero_variance_rows(scores, index) if knobs.zero_var_mask else torch.zeros_like(scores, dtype=torch.bool)
    dropped = red_drop_rows(scores, index, knobs.red_drop_seed) if red_drop else torch.zeros_like(zero_var)
    metrics = bound_metrics(scores, index, mask_before, rprime, std_eps=knobs.std_eps, std_unbiased=knobs.std_unbiased)
    metrics["off_grpo/zero_var_masked_frac"] = float(zero_var.float().mean()) if len(zero_var) else 0.0
    metrics["off_grpo/red_drop/dropped_frac"] = float(dropped.float().mean()) if len(dropped) else 0.0
    return metrics, zero_var | dropped
