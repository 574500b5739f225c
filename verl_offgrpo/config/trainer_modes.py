"""The V1 trainer mode a config names must be registered: a misspelt ``trainer.v1.trainer_mode`` fails at
start-up, not inside Ray.

verl resolves ``trainer.v1.trainer_mode`` (``verl.trainer.ppo.v1.get_trainer_cls``, a lookup in its
``TRAINER_REGISTRY``) only in the remote TaskRunner, after Ray has started. :func:`check_trainer_mode`
compares it with the registered modes first, so that an unknown mode is the first error a config gets
(before any check of what the mode does, e.g. the zero-variance mask's write-back). The caller reads the
registry (:func:`verl_offgrpo.sync.registered_v1_modes`); nothing here imports verl.

Suggestions: the registered modes of which the name is a ``_``-separated word (``async`` →
``colocate_async``, ``separate_async``), then difflib's close matches (ratio ≥ 0.6), at most three.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any

from verl_offgrpo import TRAINER_MODE

from .readers import uses_v1, v1_mode
from .values import OffGRPOConfigError, config_value

KEY = "trainer.v1.trainer_mode"


def check_trainer_mode(config: Any, registered: Callable[[], Iterable[str]]) -> None:
    """Raise :class:`OffGRPOConfigError` for a V1 trainer mode that is not registered. ``registered`` returns
    the registered modes; it is called only for a config on the V1 trainer (``trainer.use_v1``)."""
    if not uses_v1(config):
        return
    mode = _mode_as_written(config)
    if mode is _UNSET:
        return  # ``???``: the caller's missing-value check names it
    known = sorted(str(name) for name in registered())
    if mode in known:
        return
    close = suggestions(str(mode), known)
    others = f" (or {', '.join(close[1:])})" if len(close) > 1 else ""
    guess = f": did you mean {KEY}={close[0]}{others}?" if close else ""
    raise OffGRPOConfigError(
        f"{KEY}={mode!r} is not a registered V1 trainer mode{guess} (registered: {', '.join(known)}; "
        f"{TRAINER_MODE} is the plugin's, which its yaml sets); verl would look it up only in Ray's TaskRunner "
        "(get_trainer_cls) and fail there."
    )


_UNSET = object()


def _mode_as_written(config: Any) -> Any:
    """``trainer.v1.trainer_mode`` as the config holds it: an explicit null stays None (verl would look None up
    in Ray's TaskRunner and fail there), an absent key is verl's default (:func:`.readers.v1_mode`), ``???``
    is :data:`_UNSET`."""
    v1 = config_value(config, "trainer.v1")
    if v1 is None or not hasattr(v1, "get"):
        return v1_mode(config)
    try:
        return v1.get("trainer_mode", v1_mode(config))
    except Exception as err:  # noqa: BLE001 - omegaconf's MissingMandatoryValue (``???``)
        if type(err).__name__ != "MissingMandatoryValue":
            raise
        return _UNSET


def suggestions(name: str, known: list[str]) -> list[str]:
    """Up to three registered modes ``name`` may have meant: those with ``name`` as a ``_``-separated word,
    then difflib's close matches."""
    words = [k for k in known if name in k.split("_")]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    return list(dict.fromkeys(words + close))[:3]
