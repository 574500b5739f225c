"""Where an error for a config composed from verl's own yaml would be fixed at once: the plugin's yaml.

A user who starts from verl's ``ppo_trainer`` and selects the plugin meets the settings the plugin's
``off_grpo_trainer.yaml`` makes (rollout correction, log-probs, trainer mode, ...) one error at a time;
:func:`shipped_yaml_hint` adds to such an error, when the yaml would change a setting it names, how to
compose from that yaml instead.
"""

from __future__ import annotations

import functools
from pathlib import Path

from .off_grpo import POLICY_LOSS_CONFIG_FQN
from .values import config_value


def composed_from_plugin_yaml(config) -> bool:
    """Whether ``config`` was composed from the plugin's yaml: its ``policy_loss._target_`` is the plugin's
    dataclass (verl's ``ppo_trainer`` names verl's own)."""
    return str(config_value(config, "actor_rollout_ref.actor.policy_loss._target_")) == POLICY_LOSS_CONFIG_FQN


def shipped_yaml_hint(config, message: str) -> str | None:
    """For a config not composed from the plugin's yaml (:func:`composed_from_plugin_yaml`) whose error names a
    setting that yaml would change: where all of them are set at once."""
    if composed_from_plugin_yaml(config):
        return None
    if not any(key in message and config_value(config, key) != value for key, value in _yaml_settings()):
        return None
    return ("(The plugin's yaml sets this: --config-path \"$(python -m verl_offgrpo config-dir)\" "
            "--config-name off_grpo_trainer.)")


@functools.lru_cache(maxsize=1)
def _yaml_settings() -> tuple[tuple[str, object], ...]:
    """(dotted key, value) of what the plugin's yaml sets (``off_grpo_settings.yaml``, which ``off_grpo_trainer.yaml``
    lists after verl's ``ppo_trainer``), its ``algorithm.off_grpo`` knobs aside."""
    from omegaconf import OmegaConf

    yaml = Path(__file__).parent / "off_grpo_settings.yaml"
    node = OmegaConf.to_container(OmegaConf.load(yaml))
    keys = []

    def walk(value, prefix):
        if isinstance(value, dict):
            for name, child in value.items():
                walk(child, f"{prefix}.{name}" if prefix else str(name))
        elif not prefix.startswith("algorithm.off_grpo"):
            keys.append((prefix, value))

    walk(node, "")
    return tuple(keys)
