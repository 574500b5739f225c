"""The bound monitor and zero-variance metric of a v0 ``DataProto`` (the deprecated v0 trainer, ``RayPPOTrainer``).

The V1 mode computes them right after its ``_compute_advantage`` (:func:`verl_offgrpo.sync.advantage_v1.
after_advantage_v1`). In v0, the patch :mod:`verl_offgrpo.patches.v0_advantage_metrics` wraps verl's
``ray_trainer.compute_advantage`` and calls :func:`v0_metrics` on its output, with the ``response_mask``
from before the zero-variance mask edited it; the metrics
(:func:`verl_offgrpo.zero_var_mask.advantage_step_metrics`, the same as V1's) are logged with the step.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def v0_metrics(data: Any, mask_before: Any, algorithm_cfg: Any) -> dict[str, float]:
    """Bound-monitor metrics of a v0 ``DataProto`` (after the advantage; ``mask_before`` = pre-mask)."""
    from verl_offgrpo.bound_monitor import rprime_from_log_probs
    from verl_offgrpo.config import OffGRPOConfig
    from verl_offgrpo.zero_var_mask import advantage_step_metrics

    from verl_offgrpo import RED_DROP_ESTIMATOR_NAME

    scores = data.batch["token_level_rewards"].sum(-1)
    index = np.asarray(data.non_tensor_batch["uid"], dtype=object)
    knobs = OffGRPOConfig.from_algorithm(algorithm_cfg)
    keys = set(data.batch.keys())
    rprime = data.batch["rollout_is_weights"] if "rollout_is_weights" in keys else None
    if rprime is not None and knobs.allow_truncated_rprime and {"old_log_probs", "rollout_log_probs"} <= keys:
        # verl's weights may be truncated or normalised: the guard reads π_k/α off the log-probs
        rprime = rprime_from_log_probs(data.batch["old_log_probs"], data.batch["rollout_log_probs"])
    red_drop = str(algorithm_cfg.get("adv_estimator")) == RED_DROP_ESTIMATOR_NAME
    metrics, _rows = advantage_step_metrics(scores, index, mask_before, rprime, knobs, red_drop=red_drop)
    return metrics


def v0_rprime_metrics(data: Any) -> dict[str, float]:
    """The r' terms of the bound monitor (the served-policy guard's statistic included) of a v0 ``DataProto``
    whose advantage came from an estimator not the plugin's (verl's do not edit ``response_mask``); {} without r'."""
    from verl_offgrpo.bound_monitor import tv_estimates

    if "rollout_is_weights" not in data.batch.keys():
        return {}
    return tv_estimates(data.batch["rollout_is_weights"], data.batch["response_mask"])
