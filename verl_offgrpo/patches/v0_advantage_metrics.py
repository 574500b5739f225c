"""v0 trainer: ``verl.trainer.ppo.ray_trainer.compute_advantage`` also reports the bound monitor's metrics.

The bound monitor and the zero-variance metric need, per step, the rewards, the ``uid`` groups, the
``response_mask`` *before* the zero-variance mask edits it, and verl's token IS weights
``rollout_is_weights`` (r' = π_k/α, present with the shipped yaml's rollout correction). verl 0.9.1
passes the estimator neither r' nor the mask as it was, so the monitor reads them around the estimator's
call: the V1 mode right after its ``_compute_advantage`` (:mod:`verl_offgrpo.sync.trainer_v1`), the
deprecated v0 trainer (``RayPPOTrainer.fit``, which calls the module function ``compute_advantage``)
through this wrap. For one of the plugin's estimators it keeps a copy of the mask, calls verl's
function, computes the metrics (:func:`verl_offgrpo.sync.bound_monitor_v0.v0_metrics`, the same as
V1's) and hands them to the sink the lagged manager gave :func:`apply`, which logs them with the step
(:mod:`.tracking_merge`). Any other estimator (verl's, under the plugin's loss) runs as verl's ``compute_advantage``
and hands the sink only the r' terms (:func:`~verl_offgrpo.sync.bound_monitor_v0.v0_rprime_metrics`), so the
served-policy guard checks its batches too.

Installed by the lagged manager for the v0 trainer, in the trainer's process, when it is built: only
a job that selects the plugin builds it (``rollout.checkpoint_manager_class`` names it). Nothing at
``import verl``. Written for verl 0.9.1 (:data:`VERL_VERSIONS`): wraps
``compute_advantage(data, adv_estimator, ..., config=...)``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

from verl_offgrpo.patches import VERL_VERSIONS

MODULE = "verl.trainer.ppo.ray_trainer"
TARGETS = (f"{MODULE}.compute_advantage",)
#: verl 0.9.1's ``RayPPOTrainer.fit`` calls the module's ``compute_advantage`` by name, so the wrap is what it calls
#: (:func:`verl_offgrpo.patches.uses_problems`; that it passes ``config=self.config.algorithm``, which
#: :func:`_of_the_selecting_trainer` matches, is not read off its code)
VERL_USES = ((f"{MODULE}.RayPPOTrainer.fit", ("compute_advantage",)),)
#: used by the v0 trainer only: a job on the V1 trainer does not need its target (:func:`~verl_offgrpo.patches.preflight`)
TRAINER = "v0"
WHEN = ("trainer process of a v0 job with the lagged checkpoint manager (a selecting job), from when the manager "
        "is built: the step also logs the bound monitor (for verl's estimators its r' terms) and the served-policy guard "
        "checks it; not installed otherwise")
_WRAPPED = "__off_grpo_wrapped__"


#: where the wrapper hands its metrics (the latest lagged manager built in this process)
_SINK: list[Callable[[dict], None]] = []
#: whether that manager's job guards batches of verl's estimators (:func:`~verl_offgrpo.config.readers.guards_verls_advantage`)
_GUARDS_VERLS: list[bool] = [False]
#: that manager's trainer's ``config.algorithm``, the object verl 0.9.1's ``RayPPOTrainer.fit`` passes as ``config=``:
#: a call with another (a later plain trainer's in this process) is verl's alone (:func:`_of_the_selecting_trainer`)
_ALGORITHM: list[Any] = [None]

__all__ = ["TARGETS", "TRAINER", "VERL_VERSIONS", "WHEN", "apply", "install", "live", "wrap_compute_advantage"]


def wrap_compute_advantage(original: Callable) -> Callable:
    """``original`` (verl's ``compute_advantage``) that also hands the off_grpo metrics to the sink."""
    if getattr(original, _WRAPPED, False):
        return original

    @functools.wraps(original)
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        from verl_offgrpo import ESTIMATOR_NAMES
        from verl_offgrpo.sync.bound_monitor_v0 import v0_metrics, v0_rprime_metrics

        config = kwargs.get("config")
        ours = str(getattr(adv_estimator, "value", adv_estimator)) in ESTIMATOR_NAMES and config is not None
        mask_before = None
        if ours and "response_mask" in data.batch.keys():
            mask_before = data.batch["response_mask"].clone()
        out = original(data, adv_estimator, *args, **kwargs)
        # an error here propagates: the served-policy guard reads these metrics, and a batch it could not read
        # must not train as if it had passed
        if config is not None and _SINK and _of_the_selecting_trainer(config):
            if ours:
                _SINK[-1](v0_metrics(out, out.batch["response_mask"] if mask_before is None else mask_before, config))
            elif _GUARDS_VERLS[-1]:  # verl's estimator under the plugin's loss: the guard applies
                _SINK[-1](v0_rprime_metrics(out, config))
        return out

    setattr(compute_advantage, _WRAPPED, True)
    return compute_advantage


def _of_the_selecting_trainer(config: Any) -> bool:
    """Whether ``config`` is the selecting trainer's ``config.algorithm``, the object itself (verl 0.9.1's
    ``RayPPOTrainer.fit`` passes that object each step); an equal one may be a plain trainer's in this process that
    differs outside ``algorithm`` (its loss), which is verl's alone."""
    return config is _ALGORITHM[-1]


def apply(sink: Callable[[dict], None], algorithm: Any, guards_verls: bool = False) -> None:
    """Wrap ``ray_trainer.compute_advantage`` in this process (once); ``sink`` receives from now on the metrics of
    the calls whose ``config`` is ``algorithm`` (the selecting trainer's ``config.algorithm``), for verl's
    estimators too where ``guards_verls``."""
    from verl.trainer.ppo import ray_trainer

    _SINK[:] = [sink]
    _GUARDS_VERLS[:] = [bool(guards_verls)]
    _ALGORITHM[:] = [algorithm]
    ray_trainer.compute_advantage = wrap_compute_advantage(ray_trainer.compute_advantage)


def live() -> bool:
    """Whether verl's ``ray_trainer.compute_advantage`` carries the wrap in this process."""
    module = sys.modules.get(MODULE)
    return module is not None and getattr(getattr(module, "compute_advantage", None), _WRAPPED, False)


def install() -> None:
    """Nothing at ``import verl``: the lagged manager calls :func:`apply` when it is built for the v0 trainer."""
