"""The plugin's configuration: :class:`OffGRPOConfig` (every ``algorithm.off_grpo.*`` knob, typed and
checked on its own, :mod:`.off_grpo`), :class:`RECConfig` (the ``rec`` loss's
``actor_rollout_ref.actor.policy_loss.rec.*`` knobs, :mod:`.rec`), and the start-up checks of the whole
composed config (:func:`validate_off_grpo_config`, :mod:`.validate`, which runs :mod:`.loss_estimator_checks`,
:mod:`.window_checks`, :mod:`.sync_checks`, :mod:`.ref_reset_checks` and :mod:`.final_outputs_checks`);
the names a config must find registered (:mod:`.names`: estimator and loss; :mod:`.trainer_modes`: the V1
mode), checked against verl's registries that the caller reads; beside them the shipped ``off_grpo_trainer.yaml``. Imports nothing from verl, torch or the rest of the plugin."""

from .rec import ANCHORS, CLIP_MODES, WEIGHTS, RECConfig
from .off_grpo import (
    EMPTY_CACHE_ON_SKIP_MODES,
    KEEP_WEIGHTS_MODES,
    ROLLOUT_SCHEDULES,
    V0_MANAGER_FQN,
    OffGRPOConfig,
    RefResetConfigError,
    SyncConfigError,
)
from .readers import uses_lora
from .ref_reset_checks import check_ref_reset_config
from .sync_checks import check_sync_config
from .validate import advice_after_the_checks, advisories_silenced, validate_off_grpo_config
from .values import OffGRPOConfigError, config_value
from .window_checks import check_window_config, resolve_rollout_schedule

__all__ = [
    "ANCHORS",
    "CLIP_MODES",
    "RECConfig",
    "WEIGHTS",
    "EMPTY_CACHE_ON_SKIP_MODES",
    "KEEP_WEIGHTS_MODES",
    "ROLLOUT_SCHEDULES",
    "V0_MANAGER_FQN",
    "OffGRPOConfig",
    "OffGRPOConfigError",
    "RefResetConfigError",
    "SyncConfigError",
    "advice_after_the_checks",
    "advisories_silenced",
    "check_ref_reset_config",
    "check_sync_config",
    "check_window_config",
    "resolve_rollout_schedule",
    "config_value",
    "uses_lora",
    "validate_off_grpo_config",
]
