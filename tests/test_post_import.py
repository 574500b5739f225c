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


def test_find_spec_alone_leaves_the_hook_for_the_import(fresh_module):
    """``importlib.util.find_spec`` (which executes nothing) must not use up the hook: the import after it runs
    the callback, once."""
    import importlib.util

    seen = []
    post_import.on_import(fresh_module, "READY", seen.append)
    spec = importlib.util.find_spec(fresh_module)
    assert spec is not None and seen == []
    assert len(post_import.installed_hooks(fresh_module)) == 1
    module = __import__(fresh_module)
    assert seen == [module] and post_import.installed_hooks(fresh_module) == []


def test_an_import_that_fails_keeps_the_hook_for_the_next_one(fresh_module, tmp_path):
    """A module whose first import raises (importlib drops it from sys.modules): the callback runs after the
    import that executes it."""
    flag = tmp_path / "fail_once"
    flag.write_text("")
    (tmp_path / f"{fresh_module}.py").write_text(
        "import os\n"
        f"if os.path.exists({str(flag)!r}):\n"
        f"    os.remove({str(flag)!r})\n"
        "    raise RuntimeError('first import fails')\n"
        "READY = True\n"
    )
    seen = []
    post_import.on_import(fresh_module, "READY", seen.append)
    with pytest.raises(RuntimeError, match="first import fails"):
        __import__(fresh_module)
    assert seen == [] and fresh_module not in sys.modules
    module = __import__(fresh_module)
    assert seen == [module] and post_import.installed_hooks(fresh_module) == []


FIND_SPEC_THEN_IMPORT = """
import importlib.util
import verl
assert importlib.util.find_spec("verl.trainer.ppo.core_algos") is not None
from verl.trainer.ppo import core_algos
print(sorted(n for n in core_algos.ADV_ESTIMATOR_REGISTRY if n in ("off_grpo", "red_drop")),
      sorted(n for n in core_algos.POLICY_LOSS_REGISTRY if n in ("off_grpo", "rec")))
"""


@pytest.mark.slow  # a fresh process importing verl; the two tests above cover the hook in process
def test_verls_registries_get_the_plugins_names_after_a_find_spec_of_core_algos():
    """The plugin's post-import hook on ``verl.trainer.ppo.core_algos`` survives a ``find_spec`` before the import,
    in a fresh process (the entry point runs at ``import verl``)."""
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_OFFGRPO_")}
    env["PYTHONPATH"] = os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", FIND_SPEC_THEN_IMPORT], capture_output=True,
                          text=True, env=env, cwd=repo, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "['off_grpo', 'red_drop'] ['off_grpo', 'rec']"
