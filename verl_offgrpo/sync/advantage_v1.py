"""V1 trainer, right after verl's ``_compute_advantage``: the rows that leave the loss written back to the
TransferQueue, and the bound monitor's metrics (the v0 counterpart: :mod:`.bound_monitor_v0`).

The V1 trainer keeps the batch in the TransferQueue and only writes back ``advantages`` (and
``response_mask`` when rollout correction is on); its actor reads ``loss_mask`` for the denominator.
:func:`after_advantage_v1` zeroes both masks for the rows of :mod:`verl_offgrpo.zero_var_mask`. Written for
verl 0.9.1's V1 trainer: ``KVBatchMeta`` (``keys``, ``partition_id``, ``fields``, ``tags``), the field names
``uid``, ``rm_scores``, ``token_level_rewards``, ``response_mask``, ``loss_mask``, ``rollout_is_weights``,
``old_log_probs``, ``rollout_log_probs``,
the ``is_padding`` tag of ``_balance_batch``'s filler rows, and the keys ``{uid}_{session_id}_{index}`` of
``AgentLoopWorkerTQ`` (``compute_advantage_for_multi_trajectories`` groups sessions for ``grpo`` only).
"""

from __future__ import annotations

import numpy as np
import torch

from verl_offgrpo.bound_monitor import rprime_fields, rprime_of, tv_estimates
from verl_offgrpo.zero_var_mask import advantage_step_metrics, padded, zero_rows_nested


def _real_rows(batch, n: int) -> np.ndarray:
    """Indices of the rows that are samples: verl's ``_balance_batch`` appends rows tagged ``is_padding``
    (one shared uid, reward 0, no loss token) to make the batch divisible."""
    tags = batch.tags or [{}] * n  # KVBatchMeta.tags (TransferQueue's field): a batch built without tags has []
    return np.flatnonzero(np.array([not tag.get("is_padding", False) for tag in tags], dtype=bool))


def sessions_with_several_outputs(keys) -> dict[str, int]:
    """``{session: outputs}`` for the sessions with more than one output among V1 batch keys
    ``{uid}_{session_id}_{index}`` (verl's ``AgentLoopWorkerTQ``: ``index`` counts an agent loop's outputs of one
    session); a key of another form is a session of its own."""
    counts: dict[str, int] = {}
    for key in keys:
        parts = str(key).rsplit("_", 2)
        session = f"{parts[0]}_{parts[1]}" if len(parts) == 3 and parts[2].isdigit() else str(key)
        counts[session] = counts.get(session, 0) + 1
    return {session: n for session, n in counts.items() if n > 1}


def refuse_several_outputs_a_session(batch, estimator: str) -> None:
    """Raise ``RuntimeError`` where an agent loop returned several outputs for one session: verl's ``grpo`` groups
    each session's final output (``compute_advantage_for_multi_trajectories``), while verl hands every output to
    any other estimator, so the plugin's group statistics would count one sample several times."""
    real = _real_rows(batch, len(batch.keys))
    several = sessions_with_several_outputs([batch.keys[i] for i in real])
    if several:
        session, n = next(iter(several.items()))
        raise RuntimeError(
            f"verl-offgrpo: adv_estimator={estimator}: the agent loop returned {n} outputs for session {session} "
            f"({len(several)} such sessions in this batch); the plugin's estimators take one output a sample (verl "
            "groups a session's final output for its grpo only). Return one output a session (verl's "
            "single_turn_agent and tool_agent do), or set algorithm.adv_estimator=grpo under the plugin's loss."
        )


def rprime_metrics_v1(tq, batch, allow_truncated_rprime: bool = False) -> dict[str, float]:
    """V1 trainer, after verl's ``_compute_advantage`` with an estimator not the plugin's (e.g. ``grpo`` under the
    ``off_grpo`` loss): the r' terms of the bound monitor (:func:`~verl_offgrpo.bound_monitor.tv_estimates`,
    the served-policy guard's statistic included) over the loss tokens of the real rows, r' read as the plugin's
    estimators read it (:func:`~verl_offgrpo.bound_monitor.rprime_fields`); {} without r'."""
    read_rprime = rprime_fields(batch.fields, allow_truncated_rprime)
    if not read_rprime:
        return {}
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                           select_fields=["loss_mask", *read_rprime])
    rprime, loss_mask = rprime_of(lambda name: padded(data[name]), read_rprime), padded(data["loss_mask"])
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
    filler to a divisible batch size) are left out of the groups and the metrics. A batch where an agent loop
    returned several outputs for one session is refused (:func:`refuse_several_outputs_a_session`) before any
    update reads its advantages.
    """
    from tensordict import TensorDict

    from verl_offgrpo import RED_DROP_ESTIMATOR_NAME
    from verl_offgrpo.config import OffGRPOConfig

    knobs = OffGRPOConfig.from_algorithm(algorithm_cfg)
    refuse_several_outputs_a_session(batch, algorithm_cfg.get("adv_estimator", None))
    red_drop = algorithm_cfg.get("adv_estimator", None) == RED_DROP_ESTIMATOR_NAME
    reward_field = "token_level_rewards" if algorithm_cfg.get("use_kl_in_reward", False) else "rm_scores"
    fields = ["uid", reward_field, "response_mask", "loss_mask"]
    read_rprime = rprime_fields(batch.fields, knobs.allow_truncated_rprime)
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields + list(read_rprime))
    uid = data["uid"]  # a tensordict LinkedList/NonTensorStack of strings
    index = np.array(uid.tolist() if hasattr(uid, "tolist") else list(uid), dtype=object)
    scores = padded(data[reward_field]).sum(-1)
    rprime = rprime_of(lambda name: padded(data[name]), read_rprime)
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
