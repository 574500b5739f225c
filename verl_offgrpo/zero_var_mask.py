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
the actor update sees. The V1 trainer keeps the batch in the TransferQueue and only writes back
``advantages`` (and ``response_mask`` when rollout correction is on); its actor reads ``loss_mask``
for the denominator. :func:`after_advantage_v1` puts both masks back.
"""

from __future__ import annotations

import numpy as np
import torch

from verl_offgrpo.bound_monitor import bound_metrics, tv_estimates
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


def _real_rows(batch, n: int) -> np.ndarray:
    """Indices of the rows that are samples: verl's ``_balance_batch`` appends rows tagged ``is_padding``
    (one shared uid, reward 0, no loss token) to make the batch divisible."""
    tags = getattr(batch, "tags", None) or [{}] * n
    return np.flatnonzero(np.array([not tag.get("is_padding", False) for tag in tags], dtype=bool))


def rprime_metrics_v1(tq, batch) -> dict[str, float]:
    """V1 trainer, after verl's ``_compute_advantage`` with an estimator not the plugin's (e.g. ``grpo`` under the
    ``off_grpo`` loss): the r' terms of the bound monitor (:func:`~verl_offgrpo.bound_monitor.tv_estimates`,
    the served-policy guard's statistic included) over the loss tokens of the real rows; {} without r'."""
    if batch.fields is None or "rollout_is_weights" not in batch.fields:
        return {}
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                           select_fields=["loss_mask", "rollout_is_weights"])
    rprime, loss_mask = padded(data["rollout_is_weights"]), padded(data["loss_mask"])
    picked = torch.as_tensor(_real_rows(batch, len(batch.keys)), device=rprime.device)
    return tv_estimates(rprime[picked], loss_mask[picked])


def after_advantage_v1(tq, batch, algorithm_cfg) -> dict[str, float]:
    """V1 trainer, right after verl's ``_compute_advantage``: rows leaving the loss, and the bound monitor.

    Zeroes ``response_mask`` and ``loss_mask`` in the TransferQueue for zero-variance groups (when
    ``algorithm.off_grpo.zero_var_mask``) and RED-Drop's dropped rows (``adv_estimator=red_drop``), and
    returns the masked and dropped fractions plus the bound-monitor metrics
    (:mod:`verl_offgrpo.bound_monitor`). ``tq`` is the ``transfer_queue`` module, ``batch``
    the trainer's ``KVBatchMeta``. The rewards are those the estimator summed: ``rm_scores``, or
    ``token_level_rewards`` with ``algorithm.use_kl_in_reward``. Rows tagged ``is_padding`` (verl's
    filler to a divisible batch size) are left out of the groups and the metrics.
    """
    from tensordict import TensorDict

    from verl_offgrpo import RED_DROP_ESTIMATOR_NAME
    from verl_offgrpo.config import OffGRPOConfig

    knobs = OffGRPOConfig.from_algorithm(algorithm_cfg)
    red_drop = algorithm_cfg.get("adv_estimator", None) == RED_DROP_ESTIMATOR_NAME
    reward_field = "token_level_rewards" if algorithm_cfg.get("use_kl_in_reward", False) else "rm_scores"
    fields = ["uid", reward_field, "response_mask", "loss_mask"]
    has_rprime = batch.fields is not None and "rollout_is_weights" in batch.fields
    if has_rprime:
        fields.append("rollout_is_weights")
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    uid = data["uid"]  # a tensordict LinkedList/NonTensorStack of strings
    index = np.array(uid.tolist() if hasattr(uid, "tolist") else list(uid), dtype=object)
    scores = padded(data[reward_field]).sum(-1)
    rprime = padded(data["rollout_is_weights"]) if has_rprime else None
    loss_mask = padded(data["loss_mask"])
    # the rows verl's _balance_batch appended to make the batch divisible (one shared uid, reward 0, no
    # loss token) are not samples: they would count as a zero-variance group in the metrics
    real = _real_rows(batch, len(index))
    picked = torch.as_tensor(real, device=scores.device)
    metrics, real_rows = advantage_step_metrics(
        scores[picked], index[real], loss_mask[picked], rprime[picked] if rprime is not None else None, knobs,
        red_drop=red_drop,
    )
    rows = torch.zeros(len(index), dtype=torch.bool, device=scores.device)
    rows[picked] = real_rows
    if bool(rows.any()):
        fields = TensorDict(
            {
                "response_mask": zero_rows_nested(data["response_mask"], rows),
                "loss_mask": zero_rows_nested(data["loss_mask"], rows),
            },
            batch_size=len(batch),
        )
        tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
    return metrics
