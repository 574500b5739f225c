"""A plugin knob appended under a section that is not its own (or flattened into one key,
``+algorithm.off_grpo_sync_period``, or the paper's ``+algorithm.v`` / ``+algorithm.i``): nothing reads it there.

``algorithm.sync_period=10`` fails in hydra with "To append to your config use +algorithm.sync_period=10"; the
appended key then passes verl's checks and the job trains at the knob's default (v = 1). So in a selecting job a
key anywhere in the config that is a knob of ``algorithm.off_grpo`` (or the section ``off_grpo`` itself), or one of
the rec loss's distinctive knobs (``clip_mode``, ``eps_low_prime``, ``eps_high_prime``, or the section ``rec``),
outside its own section is refused, naming the knob's path. None of these names is a verl key (verl 0.9.1's
``ppo_trainer`` has none); the rec knobs with common names (``weight``, ``tau``, ``anchor``) are left alone, and so
is a field of the dataclass a section's ``_target_`` names (imported by hydra's ``get_class``, as verl will build
it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

from .off_grpo import PREFIX, OffGRPOConfig
from .rec import PREFIX as REC_PREFIX
from .values import ABSENT, OffGRPOConfigError, is_dict_config, target_fields, written_value

#: the distinctive rec knobs (``RECConfig`` fields not likely to be any other package's key)
REC_KNOBS = ("clip_mode", "eps_low_prime", "eps_high_prime")


def _homes() -> dict[str, str]:
    """key name → the section it belongs in."""
    homes = {f.name: PREFIX for f in dataclasses.fields(OffGRPOConfig)}
    homes.update({name: REC_PREFIX for name in REC_KNOBS})
    homes[PREFIX.rpartition(".")[2]] = PREFIX.rpartition(".")[0]
    homes[REC_PREFIX.rpartition(".")[2]] = REC_PREFIX.rpartition(".")[0]
    return homes


def _walk(node: Any, path: str) -> Iterator[tuple[str, str, Any]]:
    """``(parent path, key, value)`` for every key of the tree under ``node``, not below the plugin's sections nor
    for a key that is a field of the dataclass its section's ``_target_`` names (another package's own knob)."""
    if isinstance(node, dict):
        fields = target_fields(node.get("_target_")) or ()
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            if key not in fields:
                yield path, str(key), value
            if child not in (PREFIX, REC_PREFIX):
                yield from _walk(value, child)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, f"{path}[{index}]")


def home_of(dotted: str) -> str | None:
    """The section a plugin knob (or section) named by ``dotted``'s last segment belongs in, where ``dotted`` puts it
    elsewhere (``algorithm.sync_period`` → ``algorithm.off_grpo``); else None."""
    parent, _, key = dotted.rpartition(".")
    home = _homes().get(key)
    return home if home is not None and parent != home else None


#: the paper's symbols written as keys of ``algorithm`` (``+algorithm.v=10``): the knobs that are v and i
SYMBOLS = {"v": (PREFIX, "sync_period"), "i": ("actor_rollout_ref.actor", "ppo_epochs")}


def _meant(homes: dict[str, str], parent: str, key: str) -> tuple[str | None, str]:
    """``(home section, knob)`` of a key that names a plugin knob: the knob itself, or, at the top or under
    ``algorithm``, the knob flattened into its section's name (``off_grpo_sync_period``, ``offgrpo-sync-period``) or
    (under ``algorithm``) the paper's ``v`` / ``i`` (:data:`SYMBOLS`); ``(None, key)`` for any other key."""
    if key in homes:
        return homes[key], key
    spelt = key.lower().replace("-", "").replace("_", "")
    if spelt.startswith("offgrpo") and parent in ("", PREFIX.rpartition(".")[0]):  # not in a free-form kwargs map
        knob = next((f.name for f in dataclasses.fields(OffGRPOConfig)
                     if f.name.replace("_", "") == spelt[len("offgrpo"):]), None)
        if knob is not None:
            return PREFIX, knob
    if parent == PREFIX.rpartition(".")[0] and key in SYMBOLS:
        return SYMBOLS[key]
    return None, key


def refuse_misplaced_knobs(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` for the first plugin knob (or section) set outside its own section."""
    if is_dict_config(config):
        from omegaconf import OmegaConf

        config = OmegaConf.to_container(config, resolve=False)
    if not isinstance(config, dict):
        return
    homes = _homes()
    for parent, key, value in _walk(config, ""):
        home, knob = _meant(homes, parent, key)
        if home is None or parent == home:
            continue
        where = f"{parent}.{key}" if parent else key
        if isinstance(value, dict):
            meant = " ".join(f"{home}.{knob}.{k}={v}" for k, v in value.items()) or f"{home}.{knob}.<knob>=..."
        else:
            meant = f"{home}.{knob}={value}"
        there = written_value(config, f"{home}.{knob}", ABSENT) is not ABSENT
        whose = "verl's yaml sets it" if (home, knob) == SYMBOLS["i"] else "the plugin's yaml sets every knob"
        plus = f" (no +: {whose})" if there else ""
        raise OffGRPOConfigError(
            f"{where} is not where the plugin reads it: nothing reads it there, so the job would run as if it were "
            f"unset; set {meant} instead{plus}."
        )


__all__ = ["REC_KNOBS", "SYMBOLS", "home_of", "refuse_misplaced_knobs"]
