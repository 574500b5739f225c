"""verl's ``PolicyLossConfig`` plus the plugin's loss knobs, so they reach the actor workers.

verl builds ``actor_rollout_ref.actor`` into an ``ActorConfig`` in each actor worker (hydra
``instantiate`` through the ``_target_`` of every section) and hands it to the policy loss as
``config``; ``policy_loss`` is a closed dataclass, so extra knobs need a subclass that its
``_target_`` names. The shipped yaml names :class:`OffGRPOPolicyLossConfig`; with verl's own
``PolicyLossConfig`` the ``rec`` loss runs with its defaults. Written for verl 0.9.1's
``verl.workers.config.PolicyLossConfig`` (a frozen ``BaseConfig`` dataclass; its ``__post_init__``, if any, runs first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from verl.workers.config import PolicyLossConfig

from verl_offgrpo.config.rec import RECConfig


@dataclass
class OffGRPOPolicyLossConfig(PolicyLossConfig):
    """verl's ``PolicyLossConfig`` with ``rec`` (:class:`~verl_offgrpo.config.rec.RECConfig`, checked here).

    Args:
        rec (RECConfig | mapping | None, default None): the ``rec`` loss's knobs; None means RECConfig's
            defaults. Read into a :class:`~verl_offgrpo.config.rec.RECConfig` once, here.
        pi_k_from_forward (bool, default false): not a knob: the V1 trainer mode sets it from
            ``algorithm.off_grpo.skip_old_log_prob``; a batch without ``rollout_is_weights`` then carries α's
            log-probs as ``old_log_probs`` (:func:`verl_offgrpo.policy_loss.pi_k_and_log_rprime`).
    """

    rec: Optional[Any] = None
    pi_k_from_forward: bool = False

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        object.__setattr__(self, "rec", RECConfig.from_mapping(self.rec))  # frozen once set (verl's BaseConfig)
