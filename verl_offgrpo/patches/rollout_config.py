"""verl's ``RolloutConfig`` checks, run in the driver: verl 0.9.1's ``validate_config`` does not build
``actor_rollout_ref.rollout`` into a dataclass; its workers do (``engine_workers.ActorRolloutRefWorker``:
``omega_conf_to_dataclass(self.config.rollout)``), after Ray and the model started, and its ``__post_init__``
(``mode=sync`` removed, the expert-parallel size, ...) stops the job there. The ``validate_config`` wrap
(:mod:`.validate_config`) builds it for a job that selects the plugin; ``compose``/``check`` for any config."""

from __future__ import annotations

from hydra.errors import CompactHydraException

#: what this module relies on in verl 0.9.1 (:func:`verl_offgrpo.patches.preflight` checks them for a selecting job)
VERL_INTERNALS = ("verl.utils.config.omega_conf_to_dataclass", "verl.workers.config.rollout.RolloutConfig")
#: the section verl 0.9.1 builds into ``verl.workers.config.RolloutConfig`` only in its workers
WORKER_BUILT = "actor_rollout_ref.rollout"
#: how :class:`RolloutConfigError` and ``compose`` introduce verl's line
SAID_AS = "verl's RolloutConfig, which its workers build after Ray started"


class RolloutConfigError(ValueError, CompactHydraException):
    """verl's ``RolloutConfig`` refuses the rollout section (one line in ``main_ppo``'s output); ``line`` is
    verl's own message."""

    def __init__(self, line: str):
        super().__init__(f"{SAID_AS}: {line} ({WORKER_BUILT})")
        self.line = line


def rollout_config_error(config) -> str | None:
    """The one line of verl's ``RolloutConfig`` checks for :data:`WORKER_BUILT`; None where it builds (or the
    config has no such section)."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    section = OmegaConf.select(config, WORKER_BUILT, default=None)
    if section is None:
        return None
    try:
        omega_conf_to_dataclass(section)
    except Exception as err:  # noqa: BLE001 - hydra wraps the dataclass's own error: say the cause
        cause = err.__cause__ if err.__cause__ is not None else err
        return " ".join(str(cause).split()) or type(cause).__name__
    return None
