"""Whether a job selects the plugin, decided from what each process sees (nothing here imports verl).

* The driver (``main_ppo``'s ``validate_config``) and the trainer see the whole config:
  :func:`config_selects`.
* An actor worker's engine sees its loss function, ``functools.partial(ppo_loss, config=ActorConfig)``:
  :func:`loss_selects` reads ``config.policy_loss.loss_mode``; and :data:`~verl_offgrpo.patches.JOB_ENV`,
  which the driver of a selecting job puts into the job's Ray runtime env (:mod:`.job_env`).
* vLLM's worker processes see only :data:`~verl_offgrpo.patches.JOB_ENV` (inherited from the server actor).
"""

from __future__ import annotations

from typing import Any

from verl_offgrpo import ESTIMATOR_NAMES, LOSS_NAMES, TRAINER_MODE
from verl_offgrpo.config.off_grpo import AUTO
from verl_offgrpo.config.values import config_value as _get


def _sync_period_selects(value: Any) -> bool:
    if value is None:
        return False
    try:
        return int(value) != 1 or str(value).strip() not in {"1", "1.0"}
    except (TypeError, ValueError):
        return True  # not a number: the plugin's checks must see it


def config_selects(config: Any) -> bool:
    """Whether a full training config (``algorithm``, ``actor_rollout_ref``, ``trainer``) selects the
    plugin: one of its estimators (``off_grpo``, ``red_drop``), one of its policy losses (``off_grpo``,
    ``rec``), ``algorithm.off_grpo.sync_period``
    set to anything but 1, ``rollout_schedule`` other than ``per_step`` or ``auto``, ``final_outputs_only`` true, the
    ``off_grpo_sync`` V1 trainer mode, or the lagged v0 checkpoint manager. A key it reads whose ``${...}`` does
    not resolve selects it too: the plugin's checks then say which, in one line."""
    if config is None:
        return False
    from omegaconf.errors import InterpolationResolutionError

    try:
        return _selects(config)
    except InterpolationResolutionError:
        return True


def _selects(config: Any) -> bool:
    if _get(config, "algorithm.adv_estimator") in ESTIMATOR_NAMES:
        return True
    if _get(config, "actor_rollout_ref.actor.policy_loss.loss_mode") in LOSS_NAMES:
        return True
    off_grpo = _get(config, "algorithm.off_grpo")
    if off_grpo is not None and not hasattr(off_grpo, "get"):
        return True  # ``algorithm.off_grpo=5``: the plugin's checks must reject it
    if _sync_period_selects(_get(config, "algorithm.off_grpo.sync_period")):
        return True
    if _get(config, "algorithm.off_grpo.rollout_schedule", "per_step") not in ("per_step", AUTO):
        return True  # the window schedule (or a typo the plugin's checks must reject)
    final_outputs = _get(config, "algorithm.off_grpo.final_outputs_only", False)
    if not (final_outputs is None or final_outputs is False or final_outputs == AUTO):
        return True  # vLLM's final outputs only (or a value, 0 included, the plugin's checks must reject)
    if _get(config, "trainer.v1.trainer_mode") == TRAINER_MODE:
        return True
    manager = _get(config, "actor_rollout_ref.rollout.checkpoint_manager_class")
    return isinstance(manager, str) and manager.startswith("verl_offgrpo.")


def loss_selects(actor_config: Any) -> bool:
    """Whether an actor config (``ActorConfig`` dataclass or DictConfig) uses one of the plugin's losses."""
    return _get(actor_config, "policy_loss.loss_mode") in LOSS_NAMES


def loss_function_selects(loss_function: Any) -> bool:
    """Whether an engine's ``loss_function`` is verl's ``ppo_loss`` (or the distillation loss) bound to
    an actor config with one of the plugin's losses (verl binds it with ``functools.partial(..., config=)``)."""
    keywords = getattr(loss_function, "keywords", None)
    if not isinstance(keywords, dict):
        return False
    return loss_selects(keywords.get("config"))
