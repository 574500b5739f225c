"""Entry point of the ``verl.plugins`` group: verl imports this in every process at ``import verl``.

Registers the ``off_grpo`` advantage estimator and policy loss, makes verl's driver-side
``validate_config`` also run the plugin's checks, installs the lagged-sync hooks, and makes verl's
engines skip the optimizer step of a mini-batch without loss tokens (:mod:`verl_offgrpo.empty_update`,
once ``verl.workers.engine.base`` is imported). It stays light: no vllm import here (the vLLM pieces
load lazily in the processes that need them).

verl logs a failing plugin at DEBUG only; ``python -m verl_offgrpo check`` imports this module
directly and reports any error.
"""

from __future__ import annotations

import functools

from verl.trainer.ppo import core_algos

from verl_offgrpo import ESTIMATOR_NAME, LOSS_NAME
from verl_offgrpo.advantage import compute_off_grpo_advantage
from verl_offgrpo.policy_loss import compute_policy_loss_off_grpo
from verl_offgrpo.config import validate_off_grpo_config


def _register_algorithms() -> None:
    if core_algos.ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is not compute_off_grpo_advantage:
        core_algos.register_adv_est(ESTIMATOR_NAME)(compute_off_grpo_advantage)
    core_algos.register_policy_loss(LOSS_NAME)(compute_policy_loss_off_grpo)


def _wrap_validate_config() -> None:
    """Run :func:`validate_off_grpo_config` before verl's own ``validate_config`` (driver, before Ray), so a
    config the plugin rejects fails before verl prints its "All configuration checks passed" line."""
    import verl.utils.config as verl_config

    original = verl_config.validate_config
    if getattr(original, "__off_grpo_wrapped__", False):
        return

    @functools.wraps(original)
    def validate_config(config, *args, **kwargs):
        validate_off_grpo_config(config)
        return original(config, *args, **kwargs)

    validate_config.__off_grpo_wrapped__ = True
    verl_config.validate_config = validate_config


def _register_empty_update_skip() -> None:
    from verl_offgrpo.empty_update import BASE_ENGINE_MODULE, skip_empty_updates
    from verl_offgrpo.post_import import on_import

    on_import(BASE_ENGINE_MODULE, "BaseEngine", skip_empty_updates)


def _register_sync_hooks() -> None:
    from verl_offgrpo.sync import register_sync_hooks

    register_sync_hooks()


_register_algorithms()
_wrap_validate_config()
_register_sync_hooks()
_register_empty_update_skip()
