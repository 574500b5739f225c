"""The bound monitor and zero-variance metric of a v0 ``DataProto`` (the deprecated v0 trainer, ``RayPPOTrainer``).

The V1 mode computes them right after its ``_compute_advantage`` (:func:`verl_offgrpo.sync.advantage_v1.
after_advantage_v1`). In v0, the patch :mod:`verl_offgrpo.patches.v0_advantage_metrics` wraps verl's
``ray_trainer.compute_advantage`` and calls :func:`v0_metrics` on its output, with the ``response_mask``
from before the zero-variance mask edited it; the metrics
(:func:`verl_offgrpo.zero_var_mask.advantage_step_metrics`, the same as V1's) are logged with the step.

Written for verl 0.9.1's v0 ``DataProto`` after ``compute_advantage``: ``batch["token_level_rewards"]``,
``batch["response_mask"]``, ``non_tensor_batch["uid"]`` and r' from ``batch["rollout_is_weights"]`` (or
``old_log_probs`` / ``rollout_log_probs``: :func:`verl_offgrpo.bound_monitor.rprime_fields`).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def v0_metrics(data: Any, mask_before: Any, algorithm_cfg: Any) -> dict[str, float]:
    """Bound-monitor metrics of a v0 ``DataProto`` (after the advantage; ``mask_before`` = pre-mask)."""
    from verl_offgrpo.bound_monitor import rprime_fields, rprime_of
    from verl_offgrpo.config import OffGRPOConfig
    from verl_offgrpo.zero_var_mask import advantage_step_metrics

    from verl_offgrpo import RED_DROP_ESTIMATOR_NAME

    scores = data.batch["token_level_rewards"].sum(-1)
    index = np.asarray(data.non_tensor_batch["uid"], dtype=object)
    knobs = OffGRPOConfig.from_algorithm(algorithm_cfg)
    rprime = rprime_of(data.batch.__getitem__, rprime_fields(data.batch.keys(), knobs.allow_truncated_rprime))
    red_drop = str(algorithm_cfg.get("adv_estimator")) == RED_DROP_ESTIMATOR_NAME
    metrics, _rows = advantage_step_metrics(scores, index, mask_before, rprime, knobs, red_drop=red_drop)
    return metrics


def v0_rprime_metrics(data: Any, algorithm_cfg: Any) -> dict[str, float]:
    """The r' terms of the bound monitor (the served-policy guard's statistic included) of a v0 ``DataProto``
    whose advantage came from an estimator not the plugin's (verl's do not edit ``response_mask``), r' read as the
    plugin's estimators read it (:func:`~verl_offgrpo.bound_monitor.rprime_fields`); {} without r'."""
    from verl_offgrpo.bound_monitor import rprime_fields, rprime_of, tv_estimates
    from verl_offgrpo.config import OffGRPOConfig

    knobs = OffGRPOConfig.from_algorithm(algorithm_cfg)
    rprime = rprime_of(data.batch.__getitem__, rprime_fields(data.batch.keys(), knobs.allow_truncated_rprime))
    return {} if rprime is None else tv_estimates(rprime, data.batch["response_mask"])
