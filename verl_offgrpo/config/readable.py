"""Whether a composed config can be read at all, before any check reads it.

A ``${...}`` that does not resolve (``${oc.env:V}`` with ``V`` unset and no default, ``${algorithm.nope}``) stops
the first reader of its key with omegaconf's ``InterpolationResolutionError`` traceback, and a section of verl's
config set to null or to a value (``actor_rollout_ref=null``) stops verl's ``need_reference_policy`` with an
``AttributeError``, or reads as unset to the plugin's checks, which then name another cause. Each is one line
here, :class:`UnreadableConfigError` (``compose``'s exit 5). Reads omegaconf's nodes; no verl import.
"""

from __future__ import annotations

import re
from typing import Any

from .values import ABSENT, OffGRPOConfigError, is_dict_config, raw_nodes, written_value

#: sections of verl 0.9.1's ``ppo_trainer`` (top level, and the actor/rollout/ref/model of ``actor_rollout_ref``) that
#: verl's driver and trainer read as sections, unconditionally (``config.<section>.<key>``)
SECTIONS = (
    "actor_rollout_ref", "data", "critic", "custom_reward_function", "reward_model", "sandbox_fusion", "reward",
    "algorithm", "distillation", "transfer_queue", "trainer", "global_profiler", "skip", "ray_kwargs",
    "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref", "actor_rollout_ref.model",
)
#: sections the V1 trainer (``trainer.use_v1``, verl's default) reads as sections: ``main_ppo`` picks its trainer class
#: by ``config.trainer.v1.trainer_mode``
V1_SECTIONS = ("trainer.v1",)
#: the plugin's own sections (where a config has them: the shipped yaml's), read key by key as verl's are; set to null
#: they would drop every knob written before them and run on the defaults (v = 1) without a word
PLUGIN_SECTIONS = ("algorithm.off_grpo", "actor_rollout_ref.actor.policy_loss.rec")


class UnreadableConfigError(OffGRPOConfigError):
    """A composed config that cannot be read: a ``${...}`` that does not resolve, a section set to null or a value."""


def check_readable(config: Any) -> None:
    """Raise :class:`UnreadableConfigError` for the first section of :data:`SECTIONS` that is null or a value, else
    for the first interpolation that does not resolve (one that reaches a ``???`` is left to the missing values)."""
    _check_sections(config, SECTIONS)
    _check_sections(config, PLUGIN_SECTIONS, owner="the plugin's")
    found = unresolved_interpolation(config)
    if found is not None:
        raise UnreadableConfigError(found)
    if _reads_v1(config):
        _check_sections(config, V1_SECTIONS)


def _check_sections(config: Any, sections: tuple[str, ...], owner: str = "verl's") -> None:
    for dotted in sections:
        value = written_value(config, dotted, ABSENT)
        if value is not ABSENT and not (isinstance(value, dict) or is_dict_config(value)):
            raise UnreadableConfigError(section_set_to_a_value(dotted, value, owner))


def _reads_v1(config: Any) -> bool:
    """Whether the V1 trainer runs; a ``trainer.use_v1`` that is not a flag (or a ``???`` behind it) is left to its
    own check."""
    from omegaconf.errors import OmegaConfBaseException

    from .readers import uses_v1

    try:
        return uses_v1(config)
    except (OffGRPOConfigError, OmegaConfBaseException):
        return False


def section_set_to_a_value(dotted: str, value: Any, owner: str = "verl's") -> str:
    """The line for a section of verl's (or the plugin's) config that an override set to null or a value."""
    written = "null" if value is None else repr(value)
    return (f"{dotted}={written} replaces a section of {owner} config, which its trainer reads key by key: drop that "
            f"override and set single keys instead ({dotted}.<key>=...).")


def unresolved_interpolation(config: Any) -> str | None:
    """The line for a ``${...}`` of ``config`` (a DictConfig) that does not resolve, or None: the first whose own
    expression fails, not one of verl's that only refers to it (``${oc.select:actor_rollout_ref.model.path,null}``
    fails with a ``model.path`` that does)."""
    from omegaconf.errors import InterpolationResolutionError, InterpolationToMissingValueError

    failed: list[tuple[str, str, Exception]] = []
    for path, parent, key, node in raw_nodes(config):
        if not node._is_interpolation():
            continue
        try:
            parent[key]  # resolves it
        except InterpolationToMissingValueError:
            continue  # a ??? behind it: said as a missing value
        except InterpolationResolutionError as err:
            failed.append((path, str(node._value()), err))
    paths = [path for path, _, _ in failed]
    own = [f for f in failed if not any(re.search(rf"[:{{,]\s*{re.escape(p)}\s*[,}}]", f[1]) for p in paths if p != f[0])]
    for path, raw, err in own or failed:
        return f"{path}={raw} does not resolve: {_reason(err)}."
    return None


def _reason(err: Exception) -> str:
    """omegaconf's cause, in words a user acts on: the environment variable to export, the key that is not there."""
    text = " ".join(str(getattr(err, "msg", None) or err).split())
    env = re.search(r"Environment variable '([^']+)' not found", text)
    if env:
        name = env.group(1)
        return f"the environment variable {name} is not set: export it, or give oc.env a default (${{oc.env:{name},<value>}})"
    key = re.search(r"Interpolation key '([^']+)' not found", text)
    if key:
        return f"{key.group(1)} is not a key of the config"
    return text
