"""Reading values out of a composed config (a DictConfig, a dict or verl's dataclasses), and the plugin's
config error type. Pure Python: no verl, torch or Ray import."""

from __future__ import annotations

from typing import Any


class OffGRPOConfigError(ValueError):
    """A configuration the off-policy GRPO plugin cannot train correctly."""


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_dict_config(value: Any) -> bool:
    try:
        from omegaconf import DictConfig
    except ImportError:  # pragma: no cover - verl depends on omegaconf
        return False
    return isinstance(value, DictConfig)


def config_value(cfg: Any, dotted: str, default: Any = None) -> Any:
    """``cfg.a.b.c`` of a DictConfig, dict or dataclass; ``default`` when absent, None or ``???``."""
    node = cfg
    for part in dotted.split("."):
        if node is None:
            return default
        try:
            node = node.get(part, None) if hasattr(node, "get") else getattr(node, part, None)
        except Exception as err:  # noqa: BLE001 - omegaconf's MissingMandatoryValue (``???``)
            if type(err).__name__ != "MissingMandatoryValue":
                raise
            return default
    return default if node is None else node
