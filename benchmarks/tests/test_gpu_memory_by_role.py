"""Per-process GPU memory of a job (``mainppo_job.gpu_mib_by_role``, ``memory_sample``, ``memory_summary``)
on the CPU: nvidia-smi's answers are faked (``subprocess.run``) and so is ``/proc`` (a folder of
``PID/stat`` and ``PID/cmdline``, ``mainppo_job.PROC_ROOT``). The expected numbers are summed by hand."""

import json
import subprocess
import sys
import textwrap

import pytest

import mainppo_job  # benchmarks/ is on sys.path (conftest.py)
import sync_e2e
import throughput
import window_speed

#: the job's two GPUs (``-i 0,1``) as nvidia-smi lists them: 120 000 + 71 000 MiB in use
GPUS = "GPU-a, 120000\nGPU-b, 71000\n"
#: nvidia-smi's processes: the job's (session 500) on GPU-a and GPU-b, one of them also on GPU-c (not the
#: job's), another job's WorkerDict on GPU-a (two jobs a GPU), and a pid that /proc does not hold
APPS = textwrap.dedent("""\
    500, GPU-a, 512
    601, GPU-a, 30000
    602, GPU-b, 29000
    701, GPU-a, 400
    702, GPU-a, 40000
    703, GPU-b, 41000
    703, GPU-c, 300
    800, GPU-a, 50000
    999, GPU-b, 7000
""")


def fake_proc(root, pid: int, cmdline: bytes, pgrp: int, session: int) -> None:
    (root / str(pid)).mkdir()
    # /proc/PID/stat: pid (comm) state ppid pgrp session …; comm may hold spaces and parentheses
    (root / str(pid) / "stat").write_text(f"{pid} (py (x) y) S 1 {pgrp} {session} 0 -1 4194560 0 0")
    (root / str(pid) / "cmdline").write_bytes(cmdline)


@pytest.fixture
def job_procs(tmp_path, monkeypatch):
    """A job in session 500: its driver (whose arguments name vLLM), two FSDP workers and a TaskRunner
    (Ray actors: process groups of their own, same session), vLLM's engine core and two TP workers;
    and another job's WorkerDict in session 900."""
    root = tmp_path / "proc"
    root.mkdir()
    driver = b"/usr/bin/python3\0-m\0verl.trainer.main_ppo\0actor_rollout_ref.rollout.name=vllm\0"
    fake_proc(root, 500, driver, 500, 500)
    fake_proc(root, 601, b"ray::WorkerDict.actor_rollout_update_actor\0\0\0\0", 601, 500)
    fake_proc(root, 602, b"ray::WorkerDict\0\0\0\0\0\0", 602, 500)
    fake_proc(root, 604, b"ray::TaskRunner.run\0", 604, 500)
    fake_proc(root, 701, b"VLLM::EngineCore\0", 701, 500)
    fake_proc(root, 702, b"VLLM::Worker_TP0\0", 701, 500)
    fake_proc(root, 703, b"VLLM::Worker_TP1\0", 701, 500)
    fake_proc(root, 800, b"ray::WorkerDict\0", 800, 900)
    monkeypatch.setattr(mainppo_job, "PROC_ROOT", root)
    return root


def fake_nvidia_smi(monkeypatch, apps: str | None, gpus: str = GPUS) -> list[list[str]]:
    """nvidia-smi answering the GPU query with ``gpus`` (for ``-i 0,1`` only) and the process query with
    ``apps`` (None: it fails); returns the commands it was called with."""
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        if cmd[1] == "--query-gpu=uuid,memory.used":
            assert cmd[-2:] == ["-i", "0,1"]
            return subprocess.CompletedProcess(cmd, 0, stdout=gpus, stderr="")
        assert cmd[1] == "--query-compute-apps=pid,gpu_uuid,used_memory"
        return subprocess.CompletedProcess(cmd, 0 if apps is not None else 9, stdout=apps or "", stderr="")

    monkeypatch.setattr(mainppo_job.subprocess, "run", run)
    return calls


@pytest.mark.parametrize("cmdline, role", [
    ("ray::WorkerDict.actor_rollout_compute_log_prob", "actor"),
    ("ray::WorkerDict", "actor"),
    ("ray::FusedWorker_actor_rollout.update_actor", "actor"),
    ("ray::vLLMHttpServer.generate", "vllm"),
    ("VLLM::EngineCore", "vllm"),
    ("VLLM::Worker_PP0_TP1", "vllm"),
    ("/usr/bin/python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=vllm", "other"),
    ("ray::TaskRunner.run", "other"),
    ("ray::AgentLoopWorker.generate_sequences", "other"),
    ("ray::IDLE", "other"),
    ("python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)", "other"),
    ("", "other"),
])  # fmt: skip
def test_process_role_reads_the_title_only(cmdline, role):
    assert mainppo_job.process_role(cmdline) == role


def test_gpu_memory_is_summed_by_role_over_the_jobs_processes_on_its_gpus(job_procs, monkeypatch):
    """actor: 601 + 602 = 30 000 + 29 000; vllm: 701 + 702 + 703 on GPU-b = 400 + 40 000 + 41 000 (703's
    300 MiB on GPU-c is not the job's GPU); other: the driver's 512 (its arguments say vllm, its title
    does not). The other job's 50 000 MiB on the shared GPU-a and pid 999 (no process here) are left out."""
    calls = fake_nvidia_smi(monkeypatch, APPS)
    sample = mainppo_job.memory_sample("0,1", group=500)
    assert sample["gpu_mib"] == 191000.0
    assert sample["gpu_mib_by_role"] == {"actor": 59000.0, "vllm": 81400.0, "other": 512.0}
    assert "storage_mib" not in sample  # no storage unit among the fake processes
    # the other job, by its own session: only its WorkerDict
    assert mainppo_job.memory_sample("0,1", group=900)["gpu_mib_by_role"] == {"actor": 50000.0, "vllm": 0.0,
                                                                               "other": 0.0}
    # without a group (host_state): the total only, processes not asked for
    del calls[:]
    assert "gpu_mib_by_role" not in mainppo_job.memory_sample("0,1") and len(calls) == 1


@pytest.mark.parametrize("apps", [
    "",  # a container's nvidia-smi lists no process
    "12001, GPU-a, 30000\n12002, GPU-b, 41000\n",  # the host's pids: none is a process of the job here
    "601, GPU-a, [N/A]\n702, GPU-a, [N/A]\n",  # used memory unknown
    None,  # the process query fails
])  # fmt: skip
def test_no_per_process_reading_records_no_roles(job_procs, monkeypatch, apps):
    fake_nvidia_smi(monkeypatch, apps)
    sample = mainppo_job.memory_sample("0,1", group=500)
    assert sample["gpu_mib"] == 191000.0 and "gpu_mib_by_role" not in sample
    summary = mainppo_job.memory_summary([{"t": 1.0, **sample}, {"t": 3.0, **sample}], after_s=0)
    assert summary["gpu_mib"]["by_role"] is None and summary["gpu_mib"]["max_by_role"] is None


def test_memory_summary_keeps_the_roles_at_the_total_peak_and_each_roles_own_max():
    """The total peaks at 4 s (vLLM's 110 000), the actor and "other" at 6 s; the 1-s sample is before
    training (after_s = 2) and its roles are not counted; the 8-s one has no per-process reading.
    Steps logged at 3, 5, 7, 9 s: a peak at 4 s is in step 2, at 6 s in step 3."""
    role = lambda actor, vllm, other: {"actor": actor, "vllm": vllm, "other": other}  # noqa: E731
    samples = [
        {"t": 1.0, "gpu_mib": 999999.0, "gpu_mib_by_role": role(900000.0, 90000.0, 9999.0)},
        {"t": 2.0, "gpu_mib": 100000.0, "gpu_mib_by_role": role(60000.0, 30000.0, 500.0)},
        {"t": 4.0, "gpu_mib": 140000.0, "gpu_mib_by_role": role(20000.0, 110000.0, 500.0)},
        {"t": 6.0, "gpu_mib": 120000.0, "gpu_mib_by_role": role(70000.0, 40000.0, 600.0)},
        {"t": 8.0, "gpu_mib": 130000.0},
    ]
    arrival = {1: 3.0, 2: 5.0, 3: 7.0, 4: 9.0}
    gpu = mainppo_job.memory_summary(samples, after_s=2.0, arrival=arrival)["gpu_mib"]
    assert gpu == {
        "max": 140000.0, "median": 130000.0, "n": 4, "max_at_s": 4.0, "max_in_step": 2,
        "max_by_role": role(20000.0, 110000.0, 500.0),
        "by_role": {"actor": {"max": 70000.0, "max_at_s": 6.0, "max_in_step": 3},
                    "vllm": {"max": 110000.0, "max_at_s": 4.0, "max_in_step": 2},
                    "other": {"max": 600.0, "max_at_s": 6.0, "max_in_step": 3}},
    }  # fmt: skip
    # a total peak in a sample without a per-process reading: who held it is unknown, the roles' maxima stay
    gpu = mainppo_job.memory_summary([*samples, {"t": 10.0, "gpu_mib": 150000.0}], after_s=2.0)["gpu_mib"]
    assert gpu["max"] == 150000.0 and gpu["max_by_role"] is None
    assert gpu["by_role"]["actor"] == {"max": 70000.0, "max_at_s": 6.0}


def test_launch_samples_memory_at_the_given_interval(tmp_path):
    """A job that logs its step and lives 3 s more: sampled every 0.25 s, ≥ 6 samples after the step
    (every 2 s, the default, would give at most 2-3)."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""\
        import json, os, time
        with open(os.environ["VERL_FILE_LOGGER_PATH"], "a") as fh:
            fh.write(json.dumps({"step": 1, "data": {"timing_s/step": 0.1}}) + "\\n")
        time.sleep(3)
    """))
    jsonl = tmp_path / "m.jsonl"
    rc, progress = mainppo_job.launch([sys.executable, str(script)], mainppo_job.run_env(jsonl), "job", tmp_path,
                                      jsonl, timeout=60, steps=1, stall_s=30, mem_sample_s=0.25)  # fmt: skip
    assert rc == 0 and progress["memory"]["host_mib"]["n"] >= 6
    assert mainppo_job.MEM_SAMPLE_S == 2.0


@pytest.mark.parametrize("flag, expect", [([], 2.0), (["--mem-sample-s", "0.5"], 0.5)])
def test_window_speed_passes_its_memory_sampling_interval_to_each_job(tmp_path, monkeypatch, capsys, flag, expect):
    """--mem-sample-s reaches run_main_ppo (default 2 s); the printed summary names who held the GPU peak."""
    got = []
    peak = {"actor": 47000.0, "vllm": 94000.0, "other": 500.0}

    def fake_run_main_ppo(name, overrides, out, log_dir, timeout, steps, stall_s, mem_sample_s, **env):
        got.append(mem_sample_s)
        return 0, {"startup_s": 1.0, "memory": {"gpu_mib": {"max": 141500.0, "max_by_role": peak}}}, log_dir / "x"

    monkeypatch.setattr(mainppo_job, "run_main_ppo", fake_run_main_ppo)
    monkeypatch.setattr(mainppo_job, "versions", lambda: {"device": "fake"})
    monkeypatch.setattr(throughput, "ensure_model", lambda *a: {})
    monkeypatch.setattr(sync_e2e, "build_data", lambda d: d)
    assert window_speed.main(["--out", str(tmp_path / "o"), "--work", str(tmp_path / "w"), "--shape", "qwen2.5-1.5b",
                              "--jobs", "v1=step:1,w10=window:10", *flag]) == 0  # fmt: skip
    assert got == [expect, expect]
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [p["gpu_mib_max_by_role"] for p in printed] == [peak, peak]
    assert json.loads((tmp_path / "o" / "window_speed.json").read_text())["args"]["mem_sample_s"] == expect
