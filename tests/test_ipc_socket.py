"""verl's weight-transfer socket, one per Ray cluster (``verl_offgrpo.patches.ipc_socket``).

The endpoints are verl 0.9.1's own ``BucketedWeightSender``/``BucketedWeightReceiver`` over real ZMQ
IPC sockets (their ``_init_socket``; the CUDA-IPC buffer exchange that follows needs a GPU). On
the CPU verl's ``vllm_rollout`` package cannot be imported (its ``__init__`` needs vllm), so the
module is loaded from its file, or imported under a bare package where the import hook must fire.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import verl
import zmq

from verl_offgrpo.patches import JOB_ENV
from verl_offgrpo.patches.ipc_socket import (
    applied,
    cluster_unique_handle,
    make_transfer_sockets_unique,
)

TRANSFER_FILE = Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout" / "bucketed_weight_transfer.py"
#: The path verl 0.9.1 gives replica 0, rank 0 of *every* job that started its own Ray cluster.
VERL_NAME = "rl-colocate-zmq-01000000-replica-0-rank-0.sock"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def sock_dir():
    """A short directory for socket files (an IPC path has at most 107 characters: pytest's tmp_path
    is too long)."""
    path = Path(tempfile.mkdtemp(prefix="og", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def fresh_transfer_module(tag: str):
    """A private, unpatched copy of verl's weight-transfer module."""
    spec = importlib.util.spec_from_file_location(f"offgrpo_test_transfer_{tag}", TRANSFER_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def close(*endpoints):
    for endpoint in endpoints:
        endpoint.socket.close(linger=0)


def received(receiver, timeout_ms=5000):
    """The next object on ``receiver``'s socket, or None if nothing arrives in ``timeout_ms``."""
    return receiver.socket.recv_pyobj() if receiver.socket.poll(timeout_ms) else None


# ----------------------------------------------------------------------------- the name
def test_handle_gets_the_raylet_pid_in_its_file_name():
    env = {"RAY_RAYLET_PID": "4242"}
    handle = f"ipc:///tmp/{VERL_NAME}"
    unique = cluster_unique_handle(handle, env)
    assert unique == f"ipc:///tmp/off-grpo-raylet4242-{VERL_NAME}"
    assert cluster_unique_handle(unique, env) == unique  # idempotent
    assert cluster_unique_handle(handle, {"RAY_RAYLET_PID": "4243"}) != unique
    assert cluster_unique_handle(handle, {}) == handle  # outside Ray: verl's name
    assert cluster_unique_handle("tcp://127.0.0.1:5555", env) == "tcp://127.0.0.1:5555"


# ----------------------------------------------------------------------------- verl's endpoints
def test_verl_gives_two_clusters_one_socket_and_a_receiver_the_other_jobs_weights(sock_dir, monkeypatch):
    """The defect, with verl's unpatched classes: jobs A and B both compute VERL_NAME; B's sender binds
    after A's (deleting A's socket file), so A's receiver connects to B and gets B's weights, and
    A's sender has no peer: it would wait forever (the hang seen with two jobs on one GPU host)."""
    bwt = fresh_transfer_module("unpatched")
    handle = f"ipc://{sock_dir / VERL_NAME}"
    monkeypatch.setenv("RAY_RAYLET_PID", "1001")
    send_a = bwt.BucketedWeightSender(zmq_handle=handle)
    monkeypatch.setenv("RAY_RAYLET_PID", "1002")
    send_b = bwt.BucketedWeightSender(zmq_handle=handle)
    send_a._init_socket()
    send_b._init_socket()
    monkeypatch.setenv("RAY_RAYLET_PID", "1001")
    recv_a = bwt.BucketedWeightReceiver(zmq_handle=handle, device=torch.device("cpu"))
    recv_a._init_socket()
    try:
        assert send_a.zmq_handle == send_b.zmq_handle == recv_a.zmq_handle == handle
        send_b.socket.send_pyobj("weights of job B")
        assert received(recv_a) == "weights of job B"
        assert send_a.socket.poll(300, zmq.POLLOUT) == 0  # no receiver will ever take A's weights
    finally:
        close(send_a, send_b, recv_a)


def test_patched_endpoints_keep_each_cluster_on_its_own_socket(sock_dir, monkeypatch):
    bwt = fresh_transfer_module("patched")
    assert not applied(bwt)
    make_transfer_sockets_unique(bwt)
    assert applied(bwt)
    make_transfer_sockets_unique(bwt)  # idempotent: one wrapper
    assert bwt.BucketedWeightSender.__init__.__wrapped__.__name__ == "__init__"
    assert not hasattr(bwt.BucketedWeightSender.__init__.__wrapped__, "__wrapped__")
    handle = f"ipc://{sock_dir / VERL_NAME}"
    ends = {}
    for job, pid in (("A", "1001"), ("B", "1002")):
        monkeypatch.setenv("RAY_RAYLET_PID", pid)
        ends[job] = (
            bwt.BucketedWeightSender(zmq_handle=handle, bucket_size_mb=1),
            bwt.BucketedWeightReceiver(zmq_handle=handle, device=torch.device("cpu")),
        )
    (send_a, recv_a), (send_b, recv_b) = ends["A"], ends["B"]
    # the same order of binds and connects as above
    send_a._init_socket()
    send_b._init_socket()
    recv_a._init_socket()
    recv_b._init_socket()
    try:
        assert send_a.zmq_handle == recv_a.zmq_handle == f"ipc://{sock_dir}/off-grpo-raylet1001-{VERL_NAME}"
        assert send_b.zmq_handle == recv_b.zmq_handle == f"ipc://{sock_dir}/off-grpo-raylet1002-{VERL_NAME}"
        assert send_a.bucket_size == 1 << 20  # verl's own __init__ still ran
        send_b.socket.send_pyobj("weights of job B")
        send_a.socket.send_pyobj("weights of job A")
        assert received(recv_a) == "weights of job A"
        assert received(recv_b) == "weights of job B"
    finally:
        close(send_a, send_b, recv_a, recv_b)


def test_patch_refuses_a_module_without_the_endpoints():
    class NotVerl:
        __name__ = "not_verl"
        BucketedWeightSender = object

    with pytest.raises(RuntimeError, match="BucketedWeightReceiver"):
        make_transfer_sockets_unique(NotVerl)


# ----------------------------------------------------------------------------- in real processes
CHECK_SCRIPT = REPO / "tests" / "fixtures" / "ipc_socket_check.py"


@pytest.mark.slow
def test_two_ray_clusters_side_by_side_get_two_sockets_and_each_cluster_one(tmp_path):
    """Two concurrent Ray clusters on this host (as two verl jobs on two GPUs), each a job that selects
    the plugin (``VERL_OFFGRPO_JOB=1`` in its processes, as main_ppo's runtime env gives them): in each,
    the actor worker's sender and the receiver in a process started by another actor (vLLM's worker)
    name the same socket, through the plugin's import hook; the two clusters' sockets differ. The same
    script runs on the GPU host, where verl's module is imported with vllm."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           JOB_ENV: "1"}
    runs = [
        subprocess.Popen([sys.executable, str(CHECK_SCRIPT)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-3000:]
        results.append(json.loads(next(line[7:] for line in out.splitlines() if line.startswith("RESULT "))))
    for result in results:
        assert result["raylet_pid"]
        assert result["sender"] == result["receiver"] == f"ipc:///tmp/off-grpo-raylet{result['raylet_pid']}-{VERL_NAME}"
        assert result["driver"] == f"ipc:///tmp/{VERL_NAME}"  # the driver is no Ray worker: verl's name
    assert results[0]["sender"] != results[1]["sender"]


@pytest.mark.slow
def test_a_job_that_does_not_select_the_plugin_keeps_verls_socket_name(tmp_path):
    """Without ``VERL_OFFGRPO_JOB`` (a plain verl job in an environment with the package) no process
    patches verl's classes: sender and receiver use verl's own name, as without the package."""
    env = {k: v for k, v in os.environ.items() if k != JOB_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(CHECK_SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line[7:] for line in done.stdout.splitlines() if line.startswith("RESULT ")))
    assert result["sender"] == result["receiver"] == result["driver"] == f"ipc:///tmp/{VERL_NAME}"

