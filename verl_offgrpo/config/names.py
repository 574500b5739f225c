"""The estimator and loss a config names must be registered: a typo fails at startup, not after the first rollout.

verl looks ``algorithm.adv_estimator`` up (``core_algos.get_adv_estimator_fn``) at the first advantage and
``actor_rollout_ref.actor.policy_loss.loss_mode`` (``get_policy_loss_fn``) at the first actor update, after
Ray, the model load and the first rollout. :func:`check_registered_names` compares them with the names
registered in the driver (the caller reads verl's registries; nothing here imports verl):

* not registered, but close to a registered name (``off-grpo`` for ``off_grpo``): an error naming it;
* not registered and close to nothing: a warning, since a custom estimator or loss may be registered only in
  the processes that use it.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable
from typing import Any

from .values import OffGRPOConfigError, config_value

logger = logging.getLogger(__name__)

#: (config key, what verl does with it, when verl looks it up)
NAMED = (
    ("algorithm.adv_estimator", "advantage estimator", "the first advantage"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode", "policy loss", "the first actor update"),
)


def check_registered_names(config: Any, estimators: Iterable[str], losses: Iterable[str]) -> None:
    """Raise :class:`OffGRPOConfigError` for a misspelt estimator or loss name; warn for an unknown one."""
    for (key, what, when), known in zip(NAMED, (estimators, losses)):
        name = config_value(config, key)
        name = getattr(name, "value", name)  # verl's AdvantageEstimator enum
        known = sorted(str(k) for k in known)
        if name is None or name in known:
            continue
        close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.8)  # a typo, not a guess
        if close:
            raise OffGRPOConfigError(
                f"{key}={name!r} is not a registered {what}: did you mean {key}={close[0]}? "
                f"(verl would fail at {when}, after the first rollout)"
            )
        logger.warning(
            "%s=%r is not a registered %s in this process; verl looks it up at %s and fails there unless it is "
            "registered in the trainer's processes by then. Registered: %s.", key, name, what, when, ", ".join(known),
        )
