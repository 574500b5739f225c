"""Reading values out of a composed config (a DictConfig, a dict or verl's dataclasses), and the plugin's
config error type. No verl, torch or Ray import (hydra's error base only)."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from hydra.errors import CompactHydraException


class OffGRPOConfigError(ValueError, CompactHydraException):
    """A configuration the off-policy GRPO plugin cannot train correctly.

    A ``CompactHydraException``: where it ends a hydra app (``main_ppo``), hydra prints its message on
    one line instead of a traceback (``HYDRA_FULL_ERROR=1`` still shows the stack)."""


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: the composed config the start-up checks are reading (:func:`reading`), where :func:`quoted_number_error` looks
#: up whether a string came from an interpolation
_BEING_READ: ContextVar[Any] = ContextVar("off_grpo_config_being_read", default=None)


@contextmanager
def reading(config: Any):
    """Within it, :func:`quoted_number_error` tells a string that an interpolation of ``config`` resolved to
    (``${oc.env:TF,5}``: oc.env returns a string) from a number quoted by mistake."""
    token = _BEING_READ.set(config)
    try:
        yield
    finally:
        _BEING_READ.reset(token)


def interpolation_at(cfg: Any, dotted: str) -> str | None:
    """The interpolation (``${...}``) ``cfg`` holds at ``dotted`` as written, or None: not one, absent, or ``cfg``
    no DictConfig (a dict or verl's dataclasses hold resolved values)."""
    parent, _, key = dotted.rpartition(".")
    node = config_value(cfg, parent) if parent else cfg
    if not is_dict_config(node):
        return None
    from omegaconf import OmegaConf

    if key not in node or not OmegaConf.is_interpolation(node, key):
        return None
    return str(OmegaConf.to_container(node, resolve=False)[key])  # as written, unresolved


def quoted_number_error(dotted: str, value: Any, what: str = "a number") -> OffGRPOConfigError | None:
    """The error for a number given as a string (``'10'``, ``'0.7'``, ``'inf'``: an override quoted by mistake,
    which hydra keeps a string): "``dotted`` must be ``what`` (got the string '10'): drop the quotes". Where the
    config being read (:func:`reading`) holds an interpolation at ``dotted`` (``${oc.env:TF,5}``, whose value is
    always a string), the way out is ``oc.decode`` around it, not quotes. None for anything else, a string that is
    no number included (the knob's own check names it with its rule)."""
    if not isinstance(value, str):
        return None
    try:
        float(value)
    except ValueError:
        return None
    key = dotted.split(" ", 1)[0]  # a name may say more after the key: "...clip_ratio (ε of the ... window)"
    raw = interpolation_at(_BEING_READ.get(), key) if _BEING_READ.get() is not None else None
    if raw is not None:
        return OffGRPOConfigError(
            f"{dotted} must be {what} (got the string {value!r}: {raw} resolves to a string): wrap it in oc.decode, "
            f"quoted for hydra and the shell alike: '{key}=\"${{oc.decode:{raw}}}\"'."
        )
    return OffGRPOConfigError(f"{dotted} must be {what} (got the string {value!r}): drop the quotes.")


def check_numbers(knobs: Any, prefix: str, ranges: dict[str, str], integers: tuple[str, ...] = ()) -> None:
    """Each knob of the dataclass instance ``knobs`` named in ``ranges`` (its range as said, e.g. "> 0") must be a
    number, those in ``integers`` an integer, before its own range check reads it (which would call a word out of
    range): a quoted number is told to drop the quotes (:func:`quoted_number_error`); anything else (a word, a bool,
    a list, a null) is an :class:`OffGRPOConfigError` "``prefix.knob`` must be a number > 0 (got 'abc'); the
    default is 1.0."."""
    defaults = {f.name: f.default for f in dataclasses.fields(knobs)}
    for name, allowed in ranges.items():
        value, kind = getattr(knobs, name), "an integer" if name in integers else "a number"
        quoted = quoted_number_error(f"{prefix}.{name}", value, kind)
        if quoted is not None:
            raise quoted
        if not (is_int if name in integers else is_number)(value):
            raise OffGRPOConfigError(
                f"{prefix}.{name} must be {kind} {allowed} (got {value!r}); the default is {defaults[name]!r}."
            )


def is_dict_config(value: Any) -> bool:
    try:
        from omegaconf import DictConfig
    except ImportError:  # pragma: no cover - verl depends on omegaconf
        return False
    return isinstance(value, DictConfig)


#: what :func:`written_value` returns, when asked to, for a key that is not written (null is a value there)
ABSENT = object()


def _child(node: Any, key: str) -> Any:
    """``node[key]`` of a DictConfig, dict or dataclass as written (a null stays None); :data:`ABSENT` where the
    key is not there or is ``???``."""
    try:
        value = node.get(key, ABSENT) if hasattr(node, "get") else getattr(node, key, ABSENT)
    except Exception as err:  # noqa: BLE001 - omegaconf's MissingMandatoryValue (``???``)
        if type(err).__name__ != "MissingMandatoryValue":
            raise
        return ABSENT
    return ABSENT if isinstance(value, str) and value == "???" else value


def config_value(cfg: Any, dotted: str, default: Any = None) -> Any:
    """``cfg.a.b.c`` of a DictConfig, dict or dataclass; ``default`` when absent, None or ``???``."""
    node = cfg
    for part in dotted.split("."):
        if node is None or node is ABSENT:
            return default
        node = _child(node, part)
    return default if node is None or node is ABSENT else node


def raw_nodes(config: Any) -> Iterator[tuple[str, Any, Any, Any]]:
    """``(path, parent, key, node)`` for every node of an omegaconf config as it is written (no interpolation
    resolved), depth first: ``a.b`` for a mapping's key, ``a[0]`` for a list's item. It descends into the sections
    that are not null, ``???`` or an interpolation; anything but a DictConfig or ListConfig has no nodes."""
    from omegaconf import DictConfig, ListConfig

    def walk(parent: Any, prefix: str) -> Iterator[tuple[str, Any, Any, Any]]:
        mapping = isinstance(parent, DictConfig)
        for key in list(parent.keys()) if mapping else range(len(parent)):
            node = parent._get_node(key)
            path = (f"{prefix}.{key}" if prefix else str(key)) if mapping else f"{prefix}[{key}]"
            yield path, parent, key, node
            if isinstance(node, (DictConfig, ListConfig)) and not (
                node._is_none() or node._is_missing() or node._is_interpolation()
            ):
                yield from walk(node, path)

    if isinstance(config, (DictConfig, ListConfig)):
        yield from walk(config, "")


def written_value(cfg: Any, dotted: str, absent: Any = None) -> Any:
    """``cfg.a.b.c`` as the config holds it: an explicit null stays None (which :func:`config_value` reads as
    absent, i.e. as the caller's default, where verl reads it as null); ``absent`` where the key, or a section
    above it, is not there or is ``???``."""
    parent, _, key = dotted.rpartition(".")
    node = config_value(cfg, parent) if parent else cfg
    value = ABSENT if node is None else _child(node, key)
    return absent if value is ABSENT else value


def knobs_from_mapping(cls: type, node: Any, prefix: str, example: str, elsewhere: Mapping | None = None) -> Any:
    """``cls(**node)`` for a dataclass of knobs, from a DictConfig, dict, an instance or None (the defaults);
    a node that is not a mapping, or an unknown key, is an :class:`OffGRPOConfigError` naming ``prefix``
    (``example``: one knob set as ``prefix.example``, for the message; ``elsewhere``: key → the section it belongs
    in, for a knob of another of the plugin's sections written here)."""
    if node is None:
        return cls()
    if isinstance(node, cls):
        return node
    if not isinstance(node, Mapping) and not is_dict_config(node):
        raise OffGRPOConfigError(
            f"{prefix} must be a mapping of knobs (got {type(node).__name__} {node!r}): set single knobs instead, "
            f"e.g. {prefix}.{example}."
        )
    values = {str(key): node[key] for key in node}
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        homes = {key: (elsewhere or {})[key] for key in unknown if key in (elsewhere or {})}
        hints = "".join(f" {key!r} belongs under {home}: {home}.<knob>=..." if key == home.rpartition(".")[2]
                        else f" {key!r} belongs under {home}: {home}.{key}=..." for key, home in homes.items())
        hints += "".join(f" {key!r}: did you mean {close!r}?" for key in unknown
                         if key not in homes and (close := closest_knob(key, cls)))
        raise OffGRPOConfigError(f"Unknown key(s) under {prefix}: {unknown}.{hints} Known keys: {sorted(known)}.")
    return cls(**values)


def closest_knob(name: str, cls: type) -> str | None:
    """The field of the knob dataclass ``cls`` closest to ``name`` (a typo), or None."""
    close = difflib.get_close_matches(name, [f.name for f in dataclasses.fields(cls)], n=1)
    return close[0] if close else None


def target_fields(target: Any) -> list[str] | None:
    """The field names of the dataclass that a hydra ``_target_`` names (imported by hydra's ``get_class``); None
    where it names none, or cannot be imported here."""
    if not isinstance(target, str):
        return None
    try:
        from hydra.utils import get_class

        cls = get_class(target)
    except Exception:  # noqa: BLE001 - an unimportable target: no fields known
        return None
    return [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else None

