"""``verl_offgrpo.patches.rpc_results``: verl's ``vLLMHttpServer.collective_rpc`` returns vLLM's per-worker answers.

vllm is not installed on the CPU, so verl's ``vllm_async_server`` cannot be imported here; its
``collective_rpc`` is read from verl 0.9.1's source and compiled into a stand-in class, so the patch is
checked against verl's own body: unpatched it drops the engine's answer, patched it returns it.
"""

from __future__ import annotations

import ast
import asyncio
import sys
import textwrap
import types
from pathlib import Path

import pytest
import verl

from verl_offgrpo.patches import JOB_ENV, PatchError
from verl_offgrpo.patches import rpc_results as patch

SERVER_FILE = Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout" / "vllm_async_server.py"


def _verls_method() -> ast.AsyncFunctionDef:
    tree = ast.parse(SERVER_FILE.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == patch.CLASS)
    return next(n for n in cls.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "collective_rpc")


class Engine:
    """vLLM's AsyncLLM as far as the method uses it: one answer per TP worker."""

    def __init__(self):
        self.calls = []

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.calls.append((method, timeout, args, kwargs))
        return [{"rank": rank, "method": method} for rank in range(2)]


def _server_class():
    """A class holding verl 0.9.1's ``collective_rpc``, compiled from its source, and an :class:`Engine`."""
    source = "from __future__ import annotations\nfrom typing import Any, Callable\nclass Server:\n" + textwrap.indent(
        ast.unparse(_verls_method()), "    ")
    namespace: dict = {}
    exec(compile(source, "<verl collective_rpc>", "exec"), namespace)
    cls = namespace["Server"]
    cls.__init__ = lambda self: setattr(self, "engine", Engine())
    return cls


def test_verls_method_drops_the_answer_and_the_patched_one_returns_it():
    cls = _server_class()
    assert tuple(ast.unparse(a) for a in _verls_method().args.args) == ("self", "method: str | Callable",
                                                                          "timeout: float | None", "args: tuple",
                                                                          "kwargs: dict[str, Any] | None")
    server = cls()
    assert asyncio.run(server.collective_rpc("off_grpo_served_weights", kwargs={"action": "record"})) is None
    patch.return_results(cls)
    patch.return_results(cls)  # idempotent
    assert cls.collective_rpc is patch.collective_rpc
    answer = asyncio.run(server.collective_rpc("off_grpo_served_weights", 5.0, (1,), {"action": "record"}))
    assert answer == [{"rank": 0, "method": "off_grpo_served_weights"}, {"rank": 1, "method": "off_grpo_served_weights"}]
    # the same call to the engine as verl's
    assert server.engine.calls == [("off_grpo_served_weights", None, (), {"action": "record"}),
                                   ("off_grpo_served_weights", 5.0, (1,), {"action": "record"})]


@pytest.mark.parametrize("method", ["async def collective_rpc(self, method, timeout=None):\n    return None",
                                    "def collective_rpc(self, method, timeout=None, args=(), kwargs=None):\n    return None"],
                         ids=["other_parameters", "not_async"])
def test_a_method_of_another_shape_is_a_patch_error(method):
    namespace: dict = {}
    exec(compile(method, "<other>", "exec"), namespace)
    cls = type("vLLMHttpServer", (), {"collective_rpc": namespace["collective_rpc"]})
    with pytest.raises(PatchError, match="vLLMHttpServer.collective_rpc is not verl 0.9.1's async"):
        patch.return_results(cls)


def test_installed_only_in_a_selecting_jobs_processes(monkeypatch):
    """Without ``VERL_OFFGRPO_JOB=1`` no hook is registered and verl's class stays as it is; with it the class is
    patched when its module is imported (here: already imported, a stand-in module), and ``live()`` says so."""
    cls = _server_class()
    module = types.ModuleType(patch.MODULE)
    setattr(module, patch.CLASS, cls)
    monkeypatch.setitem(sys.modules, patch.MODULE, module)
    monkeypatch.delenv(JOB_ENV, raising=False)
    patch.install()
    assert not patch.live() and cls.collective_rpc is not patch.collective_rpc
    monkeypatch.setenv(JOB_ENV, "1")
    patch.install()
    assert patch.live() and cls.collective_rpc is patch.collective_rpc
