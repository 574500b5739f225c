"""Knobs set in a config that does not select the plugin: they do nothing there, so say so.

``algorithm.off_grpo.*`` is read only by the plugin's estimators, losses and trainer mode, which run only
in a job that selects the plugin (:func:`verl_offgrpo.patches.selection.config_selects`). So
``+algorithm.off_grpo.zero_var_mask=true`` on verl's ``grpo`` estimator and ``vanilla`` loss passes verl's
checks and trains plain GRPO. :func:`unselected_knobs_message` names such knobs for one warning line.
In a config composed from the plugin's yaml (which sets every knob) only knobs away from their defaults are
named; in any other (verl's own yaml plus ``+algorithm.off_grpo...``) every knob is. ``final_outputs_only=false``
never is (off is what a job that does not select the plugin gets). Nothing here imports verl.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .off_grpo import PREFIX, OffGRPOConfig
from .values import config_value, is_dict_config
from .yaml_hint import composed_from_plugin_yaml

__all__ = ["knobs_without_effect", "unselected_knobs_message"]


def knobs_without_effect(config: Any) -> list[str]:
    """``algorithm.off_grpo.<knob>=<value>`` for each knob the config sets (from the plugin's yaml: away from its
    default; unknown keys too)."""
    node = config_value(config, PREFIX)
    if node is None or not (isinstance(node, dict) or is_dict_config(node)):
        return []
    defaults = {f.name: f.default for f in dataclasses.fields(OffGRPOConfig)}
    plugin_yaml = composed_from_plugin_yaml(config)
    named = []
    for key in node:
        value = node[key]
        if key == "final_outputs_only" and value is False:
            continue
        if plugin_yaml and key in defaults and value == defaults[key]:
            continue
        named.append(f"{PREFIX}.{key}={value}")
    return named


def unselected_knobs_message(config: Any) -> str | None:
    """One line for a config that does not select the plugin but sets its knobs, or None."""
    named = knobs_without_effect(config)
    if not named:
        return None
    estimator = config_value(config, "algorithm.adv_estimator")
    loss = config_value(config, "actor_rollout_ref.actor.policy_loss.loss_mode")
    return (
        f"verl-offgrpo: {', '.join(named)} has no effect: this job does not select the plugin "
        f"(algorithm.adv_estimator={getattr(estimator, 'value', estimator)}, "
        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss}) and trains plain verl. To use it, set "
        "algorithm.adv_estimator=off_grpo and actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo (or start "
        "from the plugin's off_grpo_trainer yaml; README 'What it changes in verl')."
    )
