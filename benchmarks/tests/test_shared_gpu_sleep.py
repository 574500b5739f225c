"""benchmarks/diag/shared_gpu_sleep.py (two jobs a GPU: vLLM's device-wide sleep assertion, NOTEBOOK §14) and
how mainppo_job hands it to the jobs that share a GPU, on the CPU (vllm is not installed here: the wrap is
exercised on a class whose ``sleep`` is vLLM 0.24's check, with the device's free memory as a number)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

import mainppo_job  # benchmarks/ is on sys.path (conftest.py)

shared_gpu_sleep = importlib.import_module("benchmarks.diag.shared_gpu_sleep")


class Worker:
    """vLLM 0.24's ``Worker.sleep`` in miniature: the allocator sleeps, then the device's free memory must have grown."""

    def __init__(self, neighbour_mib: int):
        self.free, self.asleep, self.neighbour_mib = 1000, False, neighbour_mib

    def sleep(self, level: int = 1) -> None:
        before = self.free
        self.asleep = True
        self.free += 300 - self.neighbour_mib  # ours freed 300 MiB; a neighbour took some meanwhile
        if self.free - before < 0:  # vLLM's ``assert freed_bytes >= 0, ...`` (raised by hand: pytest rewrites asserts)
            raise AssertionError("Memory usage increased after sleeping.")


def test_only_vllms_memory_assertion_becomes_a_line_and_the_sleep_stands():
    cls = type("W", (Worker,), {})
    said = []
    shared_gpu_sleep.wrap(cls, say=lambda text, **_: said.append(text))
    shared_gpu_sleep.wrap(cls, say=lambda text, **_: said.append("twice"))  # idempotent
    alone, beside = cls(neighbour_mib=100), cls(neighbour_mib=500)
    alone.sleep()
    assert alone.asleep and said == []
    beside.sleep(level=1)  # free memory fell by 200 MiB: vLLM would stop the job here
    assert beside.asleep and len(said) == 1 and said[0].startswith(shared_gpu_sleep.MESSAGE)
    with pytest.raises(AssertionError, match="Memory usage increased"):
        Worker(neighbour_mib=500).sleep()  # unwrapped: vLLM's own behaviour

    def other(self, level=1):
        raise AssertionError("another check")

    cls.sleep = other
    shared_gpu_sleep.wrap(cls)
    with pytest.raises(AssertionError, match="another check"):
        cls(0).sleep()


def test_installed_only_where_asked_and_on_vllms_worker_module(monkeypatch):
    from verl_offgrpo.patches import post_import

    assert shared_gpu_sleep.install({}) is False and not post_import.installed_hooks(shared_gpu_sleep.MODULE)
    fake = types.ModuleType(shared_gpu_sleep.MODULE)
    fake.Worker = type("Worker", (Worker,), {})
    monkeypatch.setitem(sys.modules, shared_gpu_sleep.MODULE, fake)  # already imported: wrapped now
    assert shared_gpu_sleep.install({shared_gpu_sleep.ENV: "1"}) is True
    assert getattr(fake.Worker.sleep, "__offgrpo_shared_gpu_sleep__", False)


def test_jobs_that_share_a_gpu_get_the_switch_and_the_diag_folder_on_their_path(tmp_path):
    envs = mainppo_job.on_gpus([0, 1, 2], ["0", "0", "1"], lambda job, env: env, stagger_s=0.0)
    shared = [e.get(mainppo_job.SHARED_GPU_ENV) for e in envs]
    assert sorted(shared, key=str) == ["1", "1", None]  # the two jobs of GPU 0, not the one of GPU 1
    env = mainppo_job.run_env(tmp_path / "m.jsonl", **envs[shared.index("1")])
    diag = str(mainppo_job.REPO / "benchmarks" / "diag")
    assert env["PYTHONPATH"].split(":")[0] == diag
    assert diag not in mainppo_job.run_env(tmp_path / "m.jsonl", CUDA_VISIBLE_DEVICES="1")["PYTHONPATH"]
    # and sitecustomize acts on it in a fresh process: the hook waits for vLLM's module
    probe = ("import sys; from verl_offgrpo.patches import post_import; "
             "print(len(post_import.installed_hooks('vllm.v1.worker.gpu_worker')))")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"
