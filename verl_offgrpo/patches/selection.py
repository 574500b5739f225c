"""Whether a job selects the plugin, decided from what each process sees (nothing here imports verl).

* The driver (``main_ppo``'s ``validate_config``) and the trainer see the whole config:
  :func:`config_selects`.
* An actor worker's engine sees its loss function, ``functools.partial(ppo_loss, config=ActorConfig)``:
  :func:`loss_selects` reads ``config.policy_loss.loss_mode``; and :data:`~verl_offgrpo.patches.JOB_ENV`,
  which the driver of a selecting job puts into the job's Ray runtime env (:mod:`.job_env`).
* vLLM's worker processes see only :data:`~verl_offgrpo.patches.JOB_ENV` (inherited from the server actor).

An estimator or loss name counts as the plugin's only while verl's registry in this process holds the plugin's
function under it (:func:`plugins_name`): another package may register ``rec`` after the plugin (verl 0.9.1's
``register_policy_loss`` overwrites silently), and a job naming it then runs that package's loss, not the plugin's.
"""

from __future__ import annotations

import sys
from typing import Any

from verl_offgrpo import ESTIMATOR_NAMES, LOSS_NAMES, TRAINER_MODE
from verl_offgrpo.config.names import is_plugins
from verl_offgrpo.config.off_grpo import AUTO
from verl_offgrpo.config.values import config_value as _get

#: verl's module of the estimator and loss registries (read where already imported, never imported here)
CORE_ALGOS = "verl.trainer.ppo.core_algos"


def plugins_name(name: Any, plugin_names, registry: str) -> bool:
    """Whether ``name`` is one of ``plugin_names`` and verl's ``core_algos.<registry>`` (verl 0.9.1:
    ``ADV_ESTIMATOR_REGISTRY``, ``POLICY_LOSS_REGISTRY``) holds the plugin's function under it. Where ``core_algos``
    is not imported yet, or holds nothing under the name, the plugin registers its own there on import: its."""
    name = getattr(name, "value", name)  # verl's AdvantageEstimator enum
    if name not in plugin_names:
        return False
    core_algos = sys.modules.get(CORE_ALGOS)
    held = (getattr(core_algos, registry, None) or {}).get(name) if core_algos is not None else None
    return held is None or is_plugins(held)


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
    ``rec``) while registered as the plugin's (:func:`plugins_name`), ``algorithm.off_grpo.sync_period``
    set to anything but 1, ``rollout_schedule`` other than ``per_step`` or ``auto``, ``final_outputs_only`` true, the
    ``off_grpo_sync`` V1 trainer mode, or the lagged v0 checkpoint manager. A key it reads whose ``${...}`` does
    not resolve raises (the validate_config wrapper then leaves the config to verl, as plain verl would)."""
    if config is None:
        return False
    if plugins_name(_get(config, "algorithm.adv_estimator"), ESTIMATOR_NAMES, "ADV_ESTIMATOR_REGISTRY"):
        return True
    if plugins_name(_get(config, "actor_rollout_ref.actor.policy_loss.loss_mode"), LOSS_NAMES, "POLICY_LOSS_REGISTRY"):
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
    return plugins_name(_get(actor_config, "policy_loss.loss_mode"), LOSS_NAMES, "POLICY_LOSS_REGISTRY")


def loss_function_selects(loss_function: Any) -> bool:
    """Whether an engine's ``loss_function`` is verl's ``ppo_loss`` (or the distillation loss) bound to
    an actor config with one of the plugin's losses (verl binds it with ``functools.partial(..., config=)``)."""
    keywords = getattr(loss_function, "keywords", None)
    if not isinstance(keywords, dict):
        return False
    return loss_selects(keywords.get("config"))
