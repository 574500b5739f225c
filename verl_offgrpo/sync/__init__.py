"""Lagged weight sync (paper §3: vLLM serves α = π_{k−v}, synced every v = ``sync_period`` steps).

Modules (each imports verl lazily, none imports vllm):

* :mod:`.schedule` — the pure schedule (which slots sync, lag bookkeeping, resume).
  (The configurations that cannot keep α are rejected by :func:`verl_offgrpo.config.check_sync_config`.)
* :mod:`.vllm_sleep` — keeping α across verl's sleep/wake (sleep level 1 inside the server actors).
* :mod:`.checkpoint_manager_v0` — ``LaggedCheckpointManager`` (v0 trainer's manager class; V1 uses it too).
* :mod:`.trainer_v1` — the V1 trainer mode ``off_grpo_sync``.
* :mod:`.ipc_socket` — one weight-transfer socket per Ray cluster (jobs side by side on one host).
* :mod:`.served_weights` — the exact check that vLLM serves α after a wake without a sync.

:func:`register_sync_hooks` is called by the plugin entry in every verl process while
``verl/__init__`` is still executing, so it imports nothing from verl: it installs one-shot
post-import hooks that register the V1 trainer mode as soon as ``verl.trainer.ppo.v1`` has been
imported (in practice only the TaskRunner imports it) and give verl's weight-transfer socket a
per-cluster name as soon as its module is imported (actor workers and vLLM workers), and give verl's
vLLM worker extension the served-weights check (:mod:`.served_weights`) as soon as vLLM's workers
import it. The v0
manager needs no registration (verl loads it by its dotted path) and the vLLM servers need nothing
else at import (the sleep-level override is sent to them at run time).
"""

from __future__ import annotations

import importlib.util
import threading

from ..post_import import on_import
from .ipc_socket import WEIGHT_TRANSFER_MODULE, make_transfer_sockets_unique
from .served_weights import WORKER_EXTENSION_CLASS, WORKER_EXTENSION_MODULE, install_worker_method

__all__ = [
    "V1_MODULE",
    "WEIGHT_TRANSFER_MODULE",
    "WORKER_EXTENSION_MODULE",
    "register_sync_hooks",
]

#: The module whose import triggers the registration of the V1 trainer mode.
V1_MODULE = "verl.trainer.ppo.v1"

_lock = threading.Lock()


def _register_v1_trainer(module=None) -> None:
    from .trainer_v1 import register

    register()


def register_sync_hooks() -> None:
    """Make ``trainer.v1.trainer_mode=off_grpo_sync`` available, verl's weight-transfer socket
    per-cluster (:mod:`.ipc_socket`) and the served-weights check callable in vLLM's workers
    (:mod:`.served_weights`); cheap, safe during ``import verl``.

    Without the TransferQueue package verl's V1 trainer cannot be imported, so there is no mode to
    register (the v0 manager still works). Errors in the registrations themselves propagate.
    """
    with _lock:
        on_import(WEIGHT_TRANSFER_MODULE, "BucketedWeightReceiver", make_transfer_sockets_unique)
        on_import(WORKER_EXTENSION_MODULE, WORKER_EXTENSION_CLASS, install_worker_method)
        if importlib.util.find_spec("transfer_queue") is not None:
            on_import(V1_MODULE, "get_trainer_cls", _register_v1_trainer)
