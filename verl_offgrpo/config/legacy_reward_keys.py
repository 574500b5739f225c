"""verl's legacy reward keys, which its ``main_ppo`` reads nowhere: a value set there would be dropped silently.

verl 0.9.1 keeps the old top-level sections ``custom_reward_function``, ``reward_model`` and ``sandbox_fusion``
in its yaml (``legacy_reward_impl.yaml``, every value null) and moves them under ``reward.`` only in its
fully-async trainer (``verl.experimental.reward_loop.migrate_legacy_reward_impl``); ``main_ppo`` reads
``reward.*`` alone. So a script written for an older verl that sets ``custom_reward_function.path`` trains with
verl's built-in scorer instead of its own, without a word. In a selecting job, the first such value that is not null
is refused in one line naming the key verl reads (the mapping of ``migrate_legacy_reward_impl``).
"""

from __future__ import annotations

from typing import Any, Optional

from .values import OffGRPOConfigError, raw_nodes

#: the top-level sections of ``legacy_reward_impl.yaml``
LEGACY_SECTIONS = ("custom_reward_function", "reward_model", "sandbox_fusion")
#: legacy key (or prefix, ending in ".") → the key verl 0.9.1 reads (``migrate_legacy_reward_impl``)
RENAMED = {
    "reward_model.num_workers": "reward.num_workers",
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.reward_loop_source": "reward.reward_manager.source",
    "reward_model.reward_loop_module_path": "reward.reward_manager.module.path",
    "reward_model.reward_loop_class_name": "reward.reward_manager.module.name",
    "reward_model.model.path": "reward.reward_model.model_path",
    "reward_model.reward_kwargs": "reward.reward_kwargs",
    "reward_model.enable": "reward.reward_model.enable",
    "reward_model.enable_resource_pool": "reward.reward_model.enable_resource_pool",
    "reward_model.n_gpus_per_node": "reward.reward_model.n_gpus_per_node",
    "reward_model.nnodes": "reward.reward_model.nnodes",
    "reward_model.rollout.": "reward.reward_model.rollout.",
    "custom_reward_function.": "reward.custom_reward_function.",
    "sandbox_fusion.": "reward.sandbox_fusion.",
}


#: keys of ``legacy_reward_impl.yaml`` that the migration drops (no counterpart under ``reward.``)
DROPPED = frozenset({"reward_model.model.external_lib", "reward_model.model.trust_remote_code"})


def verls_key_for(legacy: str) -> Optional[str]:
    """The key verl 0.9.1 reads for ``legacy`` (:data:`RENAMED`), None where it has none."""
    if legacy in RENAMED:
        return RENAMED[legacy]
    prefix = next((p for p in RENAMED if p.endswith(".") and legacy.startswith(p)), None)
    return RENAMED[prefix] + legacy[len(prefix):] if prefix else None


def set_legacy_values(config: Any) -> list[str]:
    """The dotted legacy keys of ``config`` (an omegaconf config) holding a value that is not null (sections
    excepted), in the yaml's order: those verl's migration moves (:data:`RENAMED`) or drops (:data:`DROPPED`); a key
    appended there that neither names (``+reward_model.tau``) is not verl's, and left alone."""
    from omegaconf import DictConfig, ListConfig

    found = []
    for path, _parent, _key, node in raw_nodes(config):
        if path.split(".", 1)[0] not in LEGACY_SECTIONS or "[" in path:  # a list's items: the list is the value
            continue
        if path not in DROPPED and verls_key_for(path) is None:
            continue
        if isinstance(node, DictConfig) and not node._is_none():
            if path not in RENAMED or len(node) == 0:  # a section (its leaves are visited), or an empty dict value
                continue
        if not node._is_none() and not node._is_missing() and not (isinstance(node, ListConfig) and len(node) == 0):
            found.append(path)
    return found


def refuse_legacy_reward_keys(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` for the first legacy reward key holding a value (:func:`set_legacy_values`)."""
    found = set_legacy_values(config)
    if not found:
        return
    from omegaconf import OmegaConf

    key = found[0]
    value = OmegaConf.select(config, key, throw_on_resolution_failure=False)
    instead = verls_key_for(key)
    raise OffGRPOConfigError(
        f"{key}={value!r} is one of verl's legacy reward keys, which verl 0.9.1's main_ppo ignores (it would train "
        "without it): " + (f"set {instead} instead." if instead else "it has no counterpart under reward.; drop it.")
        + (f" ({len(found) - 1} more legacy key{'s' if len(found) > 2 else ''} set.)" if len(found) > 1 else "")
    )


__all__ = ["DROPPED", "LEGACY_SECTIONS", "RENAMED", "refuse_legacy_reward_keys", "set_legacy_values", "verls_key_for"]
