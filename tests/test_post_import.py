"""``verl_offgrpo.patches.post_import.on_import``: callbacks run right after a module is executed."""

from __future__ import annotations

import importlib.machinery
import sys

import pytest

from verl_offgrpo.patches import post_import


@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    """A module on sys.path that nobody has imported yet."""
    name = "offgrpo_post_import_probe"
    (tmp_path / f"{name}.py").write_text("READY = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    yield name
    for hook in post_import.installed_hooks(name):
        hook.remove()
    sys.modules.pop(name, None)


def test_several_callbacks_on_one_module_all_run_once_in_order(fresh_module):
    calls = []

    def first(module):
        calls.append(("first", module.READY))

    def second(module):
        calls.append(("second", module.READY))

    post_import.on_import(fresh_module, "READY", first)
    post_import.on_import(fresh_module, "READY", second)
    post_import.on_import(fresh_module, "READY", first)  # again: a no-op, not a second run
    assert len(post_import.installed_hooks(fresh_module)) == 2
    module = __import__(fresh_module)
    assert calls == [("first", True), ("second", True)]
    assert post_import.installed_hooks(fresh_module) == []  # one-shot
    # the real loader is back on the module, not a wrapper (importlib.reload, resources)
    assert isinstance(module.__loader__, importlib.machinery.SourceFileLoader)
    assert module.__spec__.loader is module.__loader__


def test_a_callback_on_an_imported_module_runs_now(fresh_module):
    module = __import__(fresh_module)
    seen = []
    post_import.on_import(fresh_module, "READY", seen.append)
    assert seen == [module] and post_import.installed_hooks(fresh_module) == []
