"""benchmarks/diag/vllm_outputs.py (the lab's probe of what verl's vLLM servers ask vLLM for) and
window_speed.py's ``--job-env``, on the CPU. vllm is not installed here: the probe is exercised on a class
with verl 0.9.1's own ``vLLMHttpServer.generate`` signature, read from verl's source."""

from __future__ import annotations

import ast
import asyncio
import importlib
import sys
from pathlib import Path

import pytest
import verl

import window_speed  # benchmarks/ is on sys.path (conftest.py)
from verl_offgrpo.patches import final_outputs

SERVER_FILE = Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout" / "vllm_async_server.py"
FINAL_ONLY = "FINAL_ONLY"  # stands in for vllm's RequestOutputKind.FINAL_ONLY


@pytest.fixture
def probe(monkeypatch):
    """The probe module, imported without its import-time hook staying behind."""
    from verl_offgrpo.patches import post_import

    monkeypatch.delitem(sys.modules, "benchmarks.diag.vllm_outputs", raising=False)
    module = importlib.import_module("benchmarks.diag.vllm_outputs")
    for hook in post_import.installed_hooks(module.MODULE):
        if hook.callback is module._apply:
            hook.remove()
    return module


def _server_class():
    """A class whose ``generate`` has verl 0.9.1's parameter list and returns what it was given."""
    tree = ast.parse(SERVER_FILE.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "vLLMHttpServer")
    generate = next(n for n in cls.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "generate")
    source = (f"from __future__ import annotations\nclass Server:\n"
              f"    async def generate({ast.unparse(generate.args)}):\n        return dict(locals())\n")  # fmt: skip
    namespace: dict = {}
    exec(compile(source, "<verl generate signature>", "exec"), namespace)
    return namespace["Server"]


@pytest.mark.parametrize("plugin_first", [True, False])
def test_the_probe_adds_flat_logprobs_and_tells_once_beside_the_plugins_patch(probe, plugin_first):
    server = _server_class()
    told = []
    if plugin_first:
        final_outputs.wrap_generate(server, FINAL_ONLY)
    probe.wrap(server, flat=True, say=told.append)
    probe.wrap(server, flat=True, say=told.append)  # idempotent
    if not plugin_first:
        final_outputs.wrap_generate(server, FINAL_ONLY)
    params = {"temperature": 1.0, "logprobs": True}
    for _ in range(3):
        got = asyncio.run(server().generate([1, 2], params, "req-1"))
    assert got["sampling_params"] == {"temperature": 1.0, "logprobs": True, "flat_logprobs": True,
                                      "output_kind": FINAL_ONLY, "detokenize": False}
    assert params == {"temperature": 1.0, "logprobs": True}  # the caller's dict is not touched
    assert len(told) == 1 and "OFFGRPO_FLAT_LOGPROBS=1" in told[0]
    assert "final_outputs_only patch live: False" in told[0]  # live() reads verl's class, not this stand-in
    assert ("flat_logprobs=True" in told[0]) and (("output_kind='FINAL_ONLY'" in told[0]) is not plugin_first)


def test_without_the_flag_the_probe_changes_nothing(probe):
    server = _server_class()
    told = []
    probe.wrap(server, flat=False, say=told.append)
    got = asyncio.run(server().generate([1], sampling_params={"logprobs": True}, request_id="r"))
    assert got["sampling_params"] == {"logprobs": True}
    assert "OFFGRPO_FLAT_LOGPROBS=0" in told[0] and "flat_logprobs=None" in told[0]


def test_window_speed_job_env_reaches_only_its_job():
    items = ["w10fl=OFFGRPO_FLAT_LOGPROBS=1", "w10fl=A=b=c"]
    assert window_speed.job_env(items, "w10fl") == {"OFFGRPO_FLAT_LOGPROBS": "1", "A": "b=c"}
    assert window_speed.job_env(items, "w10") == {}
    with pytest.raises(SystemExit, match="--job-env: bad item"):
        window_speed.job_env(["w10fl=FLAT"], "w10fl")
