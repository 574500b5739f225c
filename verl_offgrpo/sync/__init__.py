"""Lagged weight sync (paper §3: vLLM serves α = π_{k−v}, synced every v = ``sync_period`` steps).

Modules (each imports verl lazily, none imports vllm):

* :mod:`.schedule` — the pure schedule (which slots sync, lag bookkeeping, resume).
* :mod:`.checks` — configurations that cannot keep α, rejected with a clear error.
* :mod:`.vllm_sleep` — keeping α across verl's sleep/wake (sleep level 1 inside the server actors).
* :mod:`.checkpoint_manager_v0` — ``LaggedCheckpointManager`` (v0 trainer's manager class; V1 uses it too).
* :mod:`.trainer_v1` — the V1 trainer mode ``off_grpo_sync``.
* :mod:`.ipc_socket` — one weight-transfer socket per Ray cluster (jobs side by side on one host).

:func:`register_sync_hooks` is called by the plugin entry in every verl process while
``verl/__init__`` is still executing, so it imports nothing from verl: it installs one-shot
post-import hooks that register the V1 trainer mode as soon as ``verl.trainer.ppo.v1`` has been
imported (in practice only the TaskRunner imports it) and give verl's weight-transfer socket a
per-cluster name as soon as its module is imported (actor workers and vLLM workers). The v0
manager needs no registration (verl loads it by its dotted path) and the vLLM servers need nothing
else at import (the sleep-level override is sent to them at run time).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading

from .checks import V0_MANAGER_FQN, SyncConfigError, check_sync_config
from .ipc_socket import WEIGHT_TRANSFER_MODULE, make_transfer_sockets_unique

__all__ = [
    "V0_MANAGER_FQN",
    "V1_MODULE",
    "WEIGHT_TRANSFER_MODULE",
    "SyncConfigError",
    "check_sync_config",
    "register_sync_hooks",
]

#: The module whose import triggers the registration of the V1 trainer mode.
V1_MODULE = "verl.trainer.ppo.v1"

_lock = threading.Lock()


def _register_v1_trainer(module=None) -> None:
    from .trainer_v1 import register

    register()


class _LoaderWithCallback(importlib.abc.Loader):
    """Wraps the real loader of ``V1_MODULE``: execute it, then run the callback."""

    def __init__(self, loader, callback):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        # Put the real loader back before the callback runs (importlib.reload, resources, …).
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._callback(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImportHook(importlib.abc.MetaPathFinder):
    """One-shot ``sys.meta_path`` finder: runs ``callback(module)`` after ``fullname`` is executed."""

    def __init__(self, fullname, callback):
        self.fullname = fullname
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.fullname:
            return None
        self.remove()
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _LoaderWithCallback(spec.loader, self.callback)
                return spec
        return None

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def _installed_hook(fullname: str):
    for finder in sys.meta_path:
        if isinstance(finder, _PostImportHook) and finder.fullname == fullname:
            return finder
    return None


def _on_import(fullname: str, ready_attr: str, callback) -> None:
    """``callback(module)`` now if ``fullname`` is already imported (``ready_attr`` defined), else once
    it is; at most one hook per module."""
    module = sys.modules.get(fullname)
    if module is not None and hasattr(module, ready_attr):
        callback(module)
    elif _installed_hook(fullname) is None:
        sys.meta_path.insert(0, _PostImportHook(fullname, callback))


def register_sync_hooks() -> None:
    """Make ``trainer.v1.trainer_mode=off_grpo_sync`` available and verl's weight-transfer socket
    per-cluster (:mod:`.ipc_socket`); cheap, safe during ``import verl``.

    Without the TransferQueue package verl's V1 trainer cannot be imported, so there is no mode to
    register (the v0 manager still works). Errors in the registrations themselves propagate.
    """
    with _lock:
        _on_import(WEIGHT_TRANSFER_MODULE, "BucketedWeightReceiver", make_transfer_sockets_unique)
        if importlib.util.find_spec("transfer_queue") is not None:
            _on_import(V1_MODULE, "get_trainer_cls", _register_v1_trainer)
