"""Lagged weight sync (paper §3: vLLM serves α = π_{k−v}, synced every v = ``sync_period`` steps).

Modules (each imports verl lazily, none imports vllm):

* :mod:`.schedule` — the pure schedule (which slots sync, lag bookkeeping, resume).
* :mod:`.vllm_sleep` — keeping α across verl's sleep/wake (sleep level 1 inside the server actors).
* :mod:`.lagged_manager` — ``LaggedCheckpointManager``: the v0 trainer's manager class and the V1 mode's
  (:mod:`.checkpoint_manager_v0` keeps its earlier dotted path).
* :mod:`.trainer_v1` — the V1 trainer mode ``off_grpo_sync``.
* :mod:`.window` — the windowed rollout's bookkeeping (``rollout_schedule=window``).
* :mod:`.served_weights` — the exact check that vLLM serves α after a wake without a sync (its worker
  method is added by :mod:`verl_offgrpo.patches.served_weights_worker`).

The per-cluster weight-transfer socket (jobs side by side on one host) is a patch of verl's classes:
:mod:`verl_offgrpo.patches.ipc_socket`.

:func:`register_sync_hooks` is called by the plugin entry in every verl process while
``verl/__init__`` is still executing, so it imports nothing from verl: it installs a one-shot
post-import hook that registers the V1 trainer mode (a name in verl's ``TRAINER_REGISTRY``) as soon
as ``verl.trainer.ppo.v1`` has been imported (in practice only the TaskRunner imports it). The v0
manager needs no registration (verl loads it by its dotted path) and the vLLM servers need nothing
else at import (the sleep-level override is sent to them at run time).
"""

from __future__ import annotations

import importlib.util
import sys
import threading

from ..patches.post_import import on_import

__all__ = [
    "V1_MODULE",
    "VERL_0_9_1_V1_MODES",
    "register_sync_hooks",
    "registered_v1_modes",
]

#: The module whose import triggers the registration of the V1 trainer mode.
V1_MODULE = "verl.trainer.ppo.v1"

_lock = threading.Lock()

#: verl 0.9.1's own V1 trainer modes (``verl/trainer/ppo/v1/trainer_{sync,colocate_async,separate_async}.py``):
#: the answer of :func:`registered_v1_modes` only where verl's registry cannot be imported
VERL_0_9_1_V1_MODES = ("colocate_async", "separate_async", "sync")


def _register_v1_trainer(module=None) -> None:
    """Runs right after ``verl.trainer.ppo.v1`` is imported. A failure is an error in a job that selects
    the plugin (``VERL_OFFGRPO_JOB=1``) and a warning in any other, whose V1 trainer must still import."""
    from ..patches import complain, job_selected

    importing = sys.modules.get(f"{__name__}.trainer_v1")
    if importing is not None and not hasattr(importing, "register"):
        # trainer_v1 is still executing its own imports (its ``register`` comes later): it imported
        # verl's V1 trainer itself and registers the mode at the end of its import
        return
    try:
        from .trainer_v1 import register

        register()
    except Exception as err:  # noqa: BLE001
        complain(f"verl-offgrpo: could not register the V1 trainer mode ({type(err).__name__}: {err})", job_selected())


def register_sync_hooks() -> None:
    """Make ``trainer.v1.trainer_mode=off_grpo_sync`` available; cheap, safe during ``import verl``.

    Without the TransferQueue package verl's V1 trainer cannot be imported, so there is no mode to
    register (the v0 manager still works).
    """
    with _lock:
        if importlib.util.find_spec("transfer_queue") is not None:
            on_import(V1_MODULE, "get_trainer_cls", _register_v1_trainer)


def registered_v1_modes() -> tuple[str, ...]:
    """The names ``trainer.v1.trainer_mode`` may take: verl's ``TRAINER_REGISTRY`` once ``verl.trainer.ppo.v1``
    is imported (which imports verl's modes and, through the hook above, registers the plugin's).

    Where that import fails (no TransferQueue package: the V1 trainer cannot run here anyway, and
    ``python -m verl_offgrpo check`` says so), verl 0.9.1's modes plus the plugin's."""
    from verl_offgrpo import TRAINER_MODE

    try:
        import verl.trainer.ppo.v1  # noqa: F401  (verl's modes register at import; the hook adds the plugin's)
        from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
    except Exception:  # noqa: BLE001 - not importable here: the names of the verl the plugin is written for
        return tuple(sorted((*VERL_0_9_1_V1_MODES, TRAINER_MODE)))
    return tuple(sorted(TRAINER_REGISTRY))
