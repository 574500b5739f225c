"""The estimator and loss a config names must be registered: a misspelling fails at startup, not after the
first rollout.

verl looks ``algorithm.adv_estimator`` up (``core_algos.get_adv_estimator_fn``) at the first advantage and
``actor_rollout_ref.actor.policy_loss.loss_mode`` (``get_policy_loss_fn``) at the first actor update, after
Ray, the model load and the first rollout. :func:`check_registered_names` compares them with the names
registered in the driver (the caller reads verl's registries; nothing here imports verl):

* not registered, but the same as a registered name up to case, ``-`` and ``_`` (``off-grpo``, ``offgrpo``
  for ``off_grpo``): an error naming it;
* a name of Yao et al.'s methods that this plugin builds from the ``rec`` loss's knobs (``red_weight``,
  ``rec_oneside_nois``, ...): an error saying which knobs (:func:`rec_variant_hint`);
* a misspelling of one of the plugin's own names (``redrop``, ``off_grop``: :func:`plugin_near_miss`; not a
  changed letter, ``off_gspo``, nor a name built on the plugin's, ``off_grpo_v2``): an error naming it, as the
  plugin's names register with the plugin itself (in a config that selects nothing else, only the slips of case,
  ``-`` and ``_``: :func:`plugin_name_slip`);
* a null (not an absent key): an error, as verl would look None up after the first rollout;
* any other unregistered name: a warning (with the closest registered name, if any), since a custom estimator
  or loss may be registered only in the processes that use it (e.g. ``actor_rollout_ref.model.external_lib``
  is imported by the workers, after this check).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable
from typing import Any

from verl_offgrpo import ESTIMATOR_NAMES, LOSS_NAMES

from .values import OffGRPOConfigError, config_value, written_value

logger = logging.getLogger(__name__)

#: (config key, what verl does with it, when verl looks it up, the plugin's names of that kind)
NAMED = (
    ("algorithm.adv_estimator", "advantage estimator", "the first advantage", ESTIMATOR_NAMES),
    ("actor_rollout_ref.actor.policy_loss.loss_mode", "policy loss", "the first actor update", LOSS_NAMES),
)
#: difflib ratio at or above which a name is a near miss of a registered one
CLOSE = 0.8


def spelling(name: str) -> str:
    """``name`` without case, ``-`` and ``_``: two names with the same spelling differ only by a slip."""
    return "".join(c for c in name.lower() if c not in "-_ ")


def check_registered_names(config: Any, estimators: Iterable[str], losses: Iterable[str]) -> None:
    """Raise :class:`OffGRPOConfigError` for a misspelt estimator or loss name; warn for an unknown one."""
    for (key, what, when, plugin_names), known in zip(NAMED, (estimators, losses)):
        name = configured_name(config, key)
        known = sorted(str(k) for k in known)
        if name is None and written_value(config, key, "") is None:  # null, not absent: verl looks None up
            raise OffGRPOConfigError(
                f"{key} is null, which is no {what}: set it (the plugin's: {', '.join(plugin_names)}); verl would "
                f"fail at {when}, after the first rollout."
            )
        if name is None or name in known:
            continue
        line = misspelt_name_line(key, what, when, plugin_names, name, known)
        if line:
            raise OffGRPOConfigError(line)
        close = difflib.get_close_matches(str(name), known, n=1, cutoff=CLOSE)
        logger.warning(
            "%s=%r is not a registered %s in this process%s; verl looks it up at %s and fails there unless it is "
            "registered in the trainer's processes by then. Registered: %s.", key, name, what,
            f" (did you mean {close[0]}?)" if close else "", when, ", ".join(known),
        )


def misspelt_name_line(key: str, what: str, when: str, plugin_names: Iterable[str], name: Any,
                       known: Iterable[str]) -> str | None:
    """The error line for an unregistered ``name`` that slips on a registered one (case, ``-``, ``_``), names one of
    Yao et al.'s methods (:func:`rec_variant_hint`) or misspells one of the plugin's (:func:`plugin_near_miss`);
    None for any other name."""
    same = [k for k in known if spelling(k) == spelling(str(name))]
    if same:
        return (f"{key}={name!r} is not a registered {what}: did you mean {key}={same[0]}? "
                f"(verl would fail at {when}, after the first rollout)")
    hint = rec_variant_hint(str(name))
    if hint:
        return f"{key}={name!r} is not a registered {what}: {hint}"
    meant = plugin_near_miss(str(name), plugin_names)
    if meant:
        return (f"{key}={name!r} is not a registered {what}: did you mean {key}={meant}? (the plugin's; verl would "
                f"fail at {when}, after the first rollout)")
    return None


def plugin_name_slip(config: Any, estimators: Iterable[str], losses: Iterable[str]) -> str | None:
    """For a config that does not select the plugin: the error line where its estimator or loss is no registered name
    but one of the plugin's spelt with another case, ``-`` or ``_`` (``offgrpo``, ``Off-GRPO``, ``red-drop``), else
    None. Such a job selects nothing and verl fails at its lookup after the first rollout. Left to verl: any other
    name (a custom one may be registered only where it runs), every name of a job that may register one after this
    check (``actor_rollout_ref.model.external_lib``, imported in verl's TaskRunner and workers), and a job that never
    looks the names up (``trainer.val_only`` with ``val_before_train``, read as verl reads them: validates and stops)."""
    if config_value(config, "actor_rollout_ref.model.external_lib"):
        return None
    if config_value(config, "trainer.val_before_train", True) and config_value(config, "trainer.val_only", False):
        return None
    for (key, what, when, plugin_names), known in zip(NAMED, (estimators, losses)):
        name = configured_name(config, key)
        known = sorted(str(k) for k in known)
        if not isinstance(name, str) or name in known:
            continue
        if any(spelling(plugin) == spelling(name) for plugin in plugin_names):
            return misspelt_name_line(key, what, when, plugin_names, name, known)
    return None


def configured_name(config: Any, key: str) -> Any:
    """The estimator or loss name at ``key`` (verl's ``AdvantageEstimator`` enum read as its value), or None."""
    name = config_value(config, key)
    return getattr(name, "value", name)


def is_plugins(fn: Any) -> bool:
    """Whether a function in verl's estimator or loss registry is one of this package's."""
    return str(getattr(fn, "__module__", "")).split(".")[0] == "verl_offgrpo"


def qualified_name(fn: Any) -> str:
    """``module.qualname`` of a registered function, for the messages that name another package's."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def foreign_owner(registry: dict, name: Any) -> str | None:
    """The qualified name of another package's function registered under ``name``, or None."""
    fn = registry.get(name)
    return None if fn is None or is_plugins(fn) else qualified_name(fn)


def check_names_are_the_plugins(config: Any, estimators: dict, losses: dict) -> None:
    """Raise where a plugin name the config uses is registered (in this process) to another package's function:
    verl keeps the last registration of a loss, so the job would run that one under the plugin's checks."""
    for (key, what, _, plugin_names), registry in zip(NAMED, (estimators, losses)):
        name = configured_name(config, key)
        owner = foreign_owner(registry, name) if name in plugin_names else None
        if owner is not None:
            raise OffGRPOConfigError(
                f"{key}={name} is registered in verl by {owner}, not by "
                f"verl-offgrpo (two packages register the {what} {name!r}; verl keeps the last): rename theirs, "
                "or uninstall one of them."
            )


def plugin_near_miss(name: str, plugin_names: Iterable[str]) -> str | None:
    """The plugin's name that ``name`` misspells, or None. A misspelling is the same name but for case and
    ``_``/``-`` (``offgrpo``, ``Off-GRPO``), or, for names of five letters or more, that and one letter left out,
    added or swapped with its neighbour (``redrop``, ``off_grop``, ``red_dropp``). A changed letter is not one (``off_gspo``,
    ``off_ppo`` may be custom losses registered only in the workers): those only warn."""
    for known in plugin_names:
        if known == name:
            continue
        if spelling(known) == spelling(name) or (len(known) >= 5 and _one_slip(spelling(name), spelling(known))):
            return known
    return None


def _one_slip(a: str, b: str) -> bool:
    """``a`` is ``b`` with one character deleted or inserted, or two neighbours swapped."""
    if abs(len(a) - len(b)) == 1:
        short, long_ = sorted((a, b), key=len)
        return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
    return False


#: spellings (:func:`spelling`) of the paper's method names that start the plugin's REC variants
REC_VARIANT_PREFIXES = ("reconeside", "rectwoside", "recring")
_REC_LOSS = "actor_rollout_ref.actor.policy_loss"


def rec_variant_hint(name: str) -> str | None:
    """For a paper method name used as an estimator or loss (RED-Weight, REC-OneSide-NoIS, ...): the knobs
    that select it here; None for any other name."""
    spelt = spelling(name)
    if spelt == "redweight":
        return (f"RED-Weight is a weight of the rec loss: set {_REC_LOSS}.loss_mode=rec "
                f"{_REC_LOSS}.rec.weight=red_weight (README 'Which loss when').")
    if spelt.startswith(REC_VARIANT_PREFIXES):
        return (f"the REC variants are the rec loss's knobs: set {_REC_LOSS}.loss_mode=rec and choose "
                f"{_REC_LOSS}.rec.clip_mode (one-side, two-side, ring) and {_REC_LOSS}.rec.weight (none, is, "
                "red_weight) (README 'Which loss when').")
    return None
