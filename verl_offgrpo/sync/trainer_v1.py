"""The V1 trainer mode ``off_grpo_sync``: verl's colocated ``PPOTrainerSync`` with the lagged sync.

Selected by ``trainer.v1.trainer_mode=off_grpo_sync`` (the shipped yaml sets it); registered with
verl's ``register_trainer`` when ``verl.trainer.ppo.v1`` is imported (see :func:`register`).

* It presents itself to verl as ``"sync"``: ``trainer_mode`` is a property that returns "sync" and
  ignores verl's assignment in ``PPOTrainer.__init__`` (the configured name is kept in
  ``configured_trainer_mode``). Every ``self.trainer_mode == "sync"`` test in ``trainer_base`` (replay
  buffer class, exact refill, TransferQueue checkpointing, in-flight re-issue) and the per-mode config
  ``trainer.v1.sync`` behave as in verl's sync mode.
* Construction checks the config (:func:`verl_offgrpo.sync.checks.check_sync_config`, and the
  plugin's own startup checks) before any worker exists; with ``keep_weights=no_sleep`` and
  ``sync_period > 1`` it sets ``rollout.free_cache_engine=false`` itself.
* ``_setup`` swaps verl's ``CheckpointEngineManager`` for :class:`LaggedCheckpointManager` (same
  config, actor group and replicas) right after verl built it, so every ``update_weights`` call —
  ``on_init_end``, ``on_step_end``, the wake inside ``_validate`` — goes through the schedule.
* ``on_step_end`` runs verl's (``update_weights`` timer) and hands the slot's metrics to verl's
  ``_pending_sync_metrics``, which ``fit`` merges into the step's metrics right after ``on_step_end``.
  Validation runs after ``on_step_end``; the manager already synced π in that slot when
  ``sync_before_validate`` is on.
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import open_dict

from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from verl_offgrpo import ESTIMATOR_NAME, TRAINER_MODE

from .checks import _get, check_sync_config
from .checkpoint_manager_v0 import LaggedCheckpointManager

logger = logging.getLogger(__name__)

PRESENTED_MODE = "sync"


def prepare_v1_config(config: Any):
    """Checks (and the one automatic setting) done when the V1 mode is constructed; returns the knobs."""
    from verl_offgrpo.knobs import knobs_from_algorithm

    knobs = knobs_from_algorithm(_get(config, "algorithm"))
    if (
        knobs.sync_period > 1
        and knobs.keep_weights == "no_sleep"
        and bool(_get(config, "actor_rollout_ref.rollout.free_cache_engine", True))
    ):
        with open_dict(config):
            config.actor_rollout_ref.rollout.free_cache_engine = False
        logger.warning("verl-offgrpo: keep_weights=no_sleep: set actor_rollout_ref.rollout.free_cache_engine=False")
    try:
        from verl_offgrpo.validation import validate_off_grpo_config
    except ImportError:  # the plugin's general checks are optional for this module
        validate_off_grpo_config = None
    if validate_off_grpo_config is not None:
        validate_off_grpo_config(config)
    return check_sync_config(config, trainer="v1")


class OffGRPOSyncTrainer(PPOTrainerSync):
    """``PPOTrainerSync`` whose weight sync follows the off-policy lag schedule."""

    def __init__(self, config):
        self.off_grpo_knobs = prepare_v1_config(config)
        super().__init__(config)

    # verl assigns self.trainer_mode = config.trainer.v1.trainer_mode; keep presenting "sync".
    @property
    def trainer_mode(self) -> str:
        return PRESENTED_MODE

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.configured_trainer_mode = value

    def _setup(self):
        super()._setup()
        self.checkpoint_manager = self._make_lagged_manager(self.checkpoint_manager)

    def _make_lagged_manager(self, base) -> LaggedCheckpointManager:
        if isinstance(base, LaggedCheckpointManager):
            return base
        return LaggedCheckpointManager(
            config=base.config, actor_wg=base.actor_wg, replicas=base.replicas, trainer=self, trainer_kind="v1"
        )

    def _compute_advantage(self, batch, metrics: dict):
        """verl's, then the zero-variance mask on ``loss_mask``/``response_mask`` and the bound monitor."""
        import transfer_queue as tq

        from verl_offgrpo.zero_var_mask import after_advantage_v1

        batch = super()._compute_advantage(batch, metrics)
        if self.config.algorithm.adv_estimator == ESTIMATOR_NAME:
            step_metrics = after_advantage_v1(tq, batch, self.config.algorithm)
            metrics.update(step_metrics)
            metrics.update(self.checkpoint_manager.check_served_policy(step_metrics, int(self.global_steps)))
        return batch

    def on_step_end(self):
        super().on_step_end()
        pending = dict(getattr(self, "_pending_sync_metrics", None) or {})
        pending.update(self.checkpoint_manager.step_metrics(self.global_steps))
        self._pending_sync_metrics = pending


def register() -> type:
    """Register :class:`OffGRPOSyncTrainer` as ``off_grpo_sync`` (idempotent; raises on a name clash)."""
    if TRAINER_REGISTRY.get(TRAINER_MODE) is not OffGRPOSyncTrainer:
        register_trainer(TRAINER_MODE)(OffGRPOSyncTrainer)
    return OffGRPOSyncTrainer
