"""Run a callback right after a module is imported, from a process where it may not be yet.

The plugin entry (:mod:`verl_offgrpo.plugin`) runs while ``verl/__init__`` is still executing, and must
not import verl's heavy submodules (every verl process would pay for them) to patch or register there. :func:`on_import` patches one now if it is already
imported, else installs a one-shot ``sys.meta_path`` finder that wraps the module's real loader, runs
it, puts the real loader back and calls the callback with the executed module.

The finder stays on ``sys.meta_path`` until the module has executed: a ``find_spec`` alone
(``importlib.util.find_spec``, which never executes the module) or an import that fails part-way (the
module is dropped from ``sys.modules``, a later import executes it afresh) leaves it there for the next import.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading


class _LoaderWithCallback(importlib.abc.Loader):
    """Wraps the real loader of a module: execute it, then run the callback."""

    def __init__(self, loader, hook):
        inner = loader if isinstance(loader, _LoaderWithCallback) else None  # another hook on this module
        self._loader = inner._loader if inner else loader
        self._hooks = [*(inner._hooks if inner else ()), hook]

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)  # raises: the hooks stay for the next import
        for hook in self._hooks:  # executed: one-shot, whatever the callbacks do
            hook.remove()
        # Put the real loader back before the callbacks run (importlib.reload, resources, …).
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        for hook in self._hooks:
            hook.callback(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImportHook(importlib.abc.MetaPathFinder):
    """One-shot ``sys.meta_path`` finder: runs ``callback(module)`` after ``fullname`` is executed, and
    leaves ``sys.meta_path`` then (not when a spec is merely found)."""

    def __init__(self, fullname, callback):
        self.fullname = fullname
        self.callback = callback
        self._finding = threading.local()

    def find_spec(self, fullname, path, target=None):
        if fullname != self.fullname or getattr(self._finding, "active", False):
            return None  # not ours, or our own search below reaching this finder
        self._finding.active = True
        try:
            for finder in list(sys.meta_path):
                find_spec = getattr(finder, "find_spec", None)
                if finder is self or find_spec is None:
                    continue
                spec = find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None:
                        spec.loader = _LoaderWithCallback(spec.loader, self)
                    return spec
            return None
        finally:
            self._finding.active = False

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def installed_hooks(fullname: str) -> list:
    """The pending hooks on ``fullname``, first to run last (each wraps the loader the next one found)."""
    return [f for f in sys.meta_path if isinstance(f, _PostImportHook) and f.fullname == fullname]


def installed_hook(fullname: str):
    hooks = installed_hooks(fullname)
    return hooks[0] if hooks else None


def on_import(fullname: str, ready_attr: str, callback) -> None:
    """``callback(module)`` now if ``fullname`` is already imported (``ready_attr`` defined), else once
    it is. Several callbacks on one module all run, in the order they were registered (one that raises
    stops the import, and the later ones do not run); registering an equal callback again is a no-op."""
    module = sys.modules.get(fullname)
    if module is not None and hasattr(module, ready_attr):
        callback(module)
    elif not any(hook.callback == callback for hook in installed_hooks(fullname)):
        sys.meta_path.insert(0, _PostImportHook(fullname, callback))
