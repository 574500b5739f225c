"""The bound monitor and zero-variance metric for the deprecated v0 trainer (``RayPPOTrainer``).

The V1 mode computes them right after its ``_compute_advantage`` (:func:`verl_offgrpo.zero_var_mask.
after_advantage_v1`). v0 calls the module function ``verl.trainer.ppo.ray_trainer.compute_advantage``
from ``fit`` in the trainer's process; :func:`install` wraps that function there (once) when the
lagged checkpoint manager is built for v0 with one of the plugin's estimators. Around verl's call the
wrapper reads, from the ``DataProto``: ``token_level_rewards`` (what the estimator sums), ``uid``,
the ``response_mask`` *before* the zero-variance mask edits it, and verl's token IS weights
``rollout_is_weights`` (= r' = π_k/α, present with the shipped yaml's rollout correction). The
metrics (:func:`verl_offgrpo.zero_var_mask.advantage_step_metrics`, the same as V1's)
go to the same per-step channel as the sync metrics, merged into ``Tracking.log`` of that step.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

import numpy as np

from .alpha_guard import ServedPolicyError

logger = logging.getLogger(__name__)


def v0_metrics(data: Any, mask_before: Any, algorithm_cfg: Any) -> dict[str, float]:
    """Bound-monitor metrics of a v0 ``DataProto`` (after the advantage; ``mask_before`` = pre-mask)."""
    from verl_offgrpo.config import OffGRPOConfig
    from verl_offgrpo.zero_var_mask import advantage_step_metrics

    from verl_offgrpo import RED_DROP_ESTIMATOR_NAME

    scores = data.batch["token_level_rewards"].sum(-1)
    index = np.asarray(data.non_tensor_batch["uid"], dtype=object)
    rprime = data.batch["rollout_is_weights"] if "rollout_is_weights" in data.batch.keys() else None
    red_drop = str(algorithm_cfg.get("adv_estimator")) == RED_DROP_ESTIMATOR_NAME
    metrics, _rows = advantage_step_metrics(
        scores, index, mask_before, rprime, OffGRPOConfig.from_algorithm(algorithm_cfg), red_drop=red_drop
    )
    return metrics


#: where the wrapper hands its metrics (the latest lagged manager built in this process)
_SINK: list[Callable[[dict], None]] = []


def wrap_compute_advantage(original: Callable) -> Callable:
    """``original`` (verl's ``compute_advantage``) that also hands the off_grpo metrics to the sink."""
    if getattr(original, "__off_grpo_wrapped__", False):
        return original

    @functools.wraps(original)
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        from verl_offgrpo import ESTIMATOR_NAMES

        config = kwargs.get("config")
        ours = str(getattr(adv_estimator, "value", adv_estimator)) in ESTIMATOR_NAMES and config is not None
        mask_before = None
        if ours and "response_mask" in data.batch.keys():
            mask_before = data.batch["response_mask"].clone()
        out = original(data, adv_estimator, *args, **kwargs)
        if ours and _SINK:
            try:
                if mask_before is None:
                    mask_before = out.batch["response_mask"]
                _SINK[-1](v0_metrics(out, mask_before, config))
            except ServedPolicyError:  # the guard: vLLM does not serve the trainer's weights
                raise
            except Exception as err:  # noqa: BLE001 - a metric must never stop training; say so once
                if not getattr(compute_advantage, "_warned", False):
                    compute_advantage._warned = True
                    logger.warning("verl-offgrpo: bound monitor (v0) failed: %r", err)
        return out

    compute_advantage.__off_grpo_wrapped__ = True
    return compute_advantage


def install(sink: Callable[[dict], None]) -> None:
    """Wrap ``ray_trainer.compute_advantage`` in this process (once); ``sink`` receives from now on."""
    from verl.trainer.ppo import ray_trainer

    _SINK[:] = [sink]
    ray_trainer.compute_advantage = wrap_compute_advantage(ray_trainer.compute_advantage)
