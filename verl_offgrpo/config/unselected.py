"""Knobs set in a config that does not select the plugin: they do nothing there, so say so.

``algorithm.off_grpo.*`` and the rec loss's ``actor_rollout_ref.actor.policy_loss.rec.*`` are read only by the
plugin's estimators, losses and trainer mode, which run only in a job that selects the plugin
(:func:`verl_offgrpo.patches.selection.config_selects`). So ``+algorithm.off_grpo.zero_var_mask=true`` or
``policy_loss.rec.clip_mode=ring`` on verl's ``grpo`` estimator and ``vanilla`` loss passes verl's checks and
trains plain GRPO. :func:`unselected_knobs_message` names such knobs for one warning line.
In a config composed from the plugin's yaml (which sets every knob) only knobs away from their defaults are
named; in any other (verl's own yaml plus ``+algorithm.off_grpo...``) every knob is. ``final_outputs_only=false``
never is (off is what a job that does not select the plugin gets). A key that is no knob is named with the
knob it may misspell (difflib, :func:`~.values.closest_knob`), as the checks of a selecting job name it.
``policy_loss.rec`` knobs on verl's own ``PolicyLossConfig`` (verl's yaml) are not ignored but refused, by verl:
the line says so rather than that the job trains plain verl.
Nothing here imports verl.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .loss_estimator_checks import is_plugin_policy_loss_config
from .off_grpo import PREFIX, OffGRPOConfig
from .rec import PREFIX as REC_PREFIX
from .rec import RECConfig
from .values import closest_knob, config_value, is_dict_config
from .yaml_hint import composed_from_plugin_yaml

__all__ = ["knobs_without_effect", "unselected_knobs_message"]

#: (where the knobs sit, their dataclass)
SECTIONS = ((PREFIX, OffGRPOConfig), (REC_PREFIX, RECConfig))


def knobs_without_effect(config: Any) -> list[str]:
    """``<section>.<knob>=<value>`` for each knob the config sets under ``algorithm.off_grpo`` and
    ``policy_loss.rec`` (from the plugin's yaml: away from its default), unknown keys too, each with the
    knob it may misspell."""
    plugin_yaml = composed_from_plugin_yaml(config)
    named = []
    for prefix, cls in SECTIONS:
        node = config_value(config, prefix)
        if node is None or not (isinstance(node, dict) or is_dict_config(node)):
            continue
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for key in node:
            value = node[key]
            if cls is OffGRPOConfig and key == "final_outputs_only" and value is False:
                continue
            if plugin_yaml and key in defaults and value == defaults[key]:
                continue
            named.append(f"{prefix}.{key}={value}" + _misspelling(str(key), cls, prefix, defaults))
    return named


def _misspelling(key: str, cls: type, prefix: str, defaults: dict) -> str:
    """" (did you mean <prefix>.<knob>?)" for a key that is no knob of ``cls``; "" for a knob."""
    if key in defaults:
        return ""
    knob = closest_knob(key, cls)
    return f" (did you mean {prefix}.{knob}?)" if knob else " (no such knob)"


def unselected_knobs_message(config: Any) -> str | None:
    """One line for a config that does not select the plugin but sets its knobs, or None."""
    named = knobs_without_effect(config)
    if not named:
        return None
    estimator = config_value(config, "algorithm.adv_estimator")
    loss = config_value(config, "actor_rollout_ref.actor.policy_loss.loss_mode")
    rec = any(knob.startswith(REC_PREFIX + ".") for knob in named)
    # verl's own PolicyLossConfig (its ppo_trainer's policy_loss._target_) has no rec field: verl refuses the job
    target = config_value(config, "actor_rollout_ref.actor.policy_loss._target_")
    refused = rec and target is not None and not is_plugin_policy_loss_config(target)
    outcome = ("verl's own PolicyLossConfig (policy_loss._target_) has no rec field, so verl refuses the job"
               if refused else "trains plain verl")
    return (
        f"verl-offgrpo: {', '.join(named)} has no effect: this job does not select the plugin "
        f"(algorithm.adv_estimator={getattr(estimator, 'value', estimator)}, "
        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss}) and {outcome}. To use it, set "
        "algorithm.adv_estimator=off_grpo and actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo "
        + ("(loss_mode=rec for the policy_loss.rec knobs) " if rec else "")
        + "(or start from the plugin's off_grpo_trainer yaml; docs/verl-changes.md)."
    )
