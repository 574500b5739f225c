"""benchmarks/diag/unique_socket.py on the CPU: a plain-verl lab job's endpoints (verl 0.9.1's own classes, loaded
from their file: its package needs vllm) get the package's per-cluster socket and print it; nothing is installed
unless asked, nor in a selecting job (the package renames there)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import torch
import verl

from verl_offgrpo.patches import JOB_ENV, ipc_socket

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diag"))
unique_socket = importlib.import_module("unique_socket")  # OFFGRPO_UNIQUE_SOCKET unset: installs nothing

TRANSFER_FILE = Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout" / "bucketed_weight_transfer.py"
VERL_NAME = "rl-colocate-zmq-01000000-replica-0-rank-0.sock"


def transfer_module(name: str):
    spec = importlib.util.spec_from_file_location(name, TRANSFER_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_endpoints_of_two_clusters_get_their_own_socket_and_say_which(monkeypatch, capsys):
    bwt = transfer_module("offgrpo_lab_transfer")
    unique_socket.rename_and_report(bwt)
    assert ipc_socket.applied(bwt)
    ends = {}
    for pid in ("1001", "1002"):
        monkeypatch.setenv("RAY_RAYLET_PID", pid)
        ends[pid] = (bwt.BucketedWeightSender(zmq_handle=f"ipc:///tmp/{VERL_NAME}"),
                     bwt.BucketedWeightReceiver(zmq_handle=f"ipc:///tmp/{VERL_NAME}", device=torch.device("cpu")))
    for pid, (send, recv) in ends.items():
        assert send.zmq_handle == recv.zmq_handle == f"ipc:///tmp/off-grpo-raylet{pid}-{VERL_NAME}"
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [
        f"{name} ipc:///tmp/off-grpo-raylet{pid}-{VERL_NAME}"
        for pid in ("1001", "1002") for name in ("BucketedWeightSender", "BucketedWeightReceiver")]
    assert all(line.startswith(unique_socket.TAG + " pid ") for line in lines)


def test_installed_only_where_asked_and_not_in_a_selecting_job(monkeypatch):
    hooked = []
    monkeypatch.setattr(unique_socket, "on_import", lambda *a: hooked.append(a))
    assert unique_socket.install({}) is False
    assert unique_socket.install({unique_socket.ENV: "1", JOB_ENV: "1"}) is False
    assert hooked == []
    assert unique_socket.install({unique_socket.ENV: "1"}) is True
    assert hooked == [(ipc_socket.WEIGHT_TRANSFER_MODULE, "BucketedWeightReceiver", unique_socket.rename_and_report)]


def test_the_hook_renames_verls_module_when_it_is_imported(monkeypatch, tmp_path):
    """Through the real post-import hook: a module of verl's name imported after install() comes out renamed."""
    package = tmp_path / "offgrpo_fake_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "transfer.py").write_text(TRANSFER_FILE.read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ipc_socket, "WEIGHT_TRANSFER_MODULE", "offgrpo_fake_pkg.transfer")
    assert unique_socket.install({unique_socket.ENV: "1"}) is True
    module = importlib.import_module("offgrpo_fake_pkg.transfer")
    assert ipc_socket.applied(module)
    monkeypatch.setenv("RAY_RAYLET_PID", "77")
    assert module.BucketedWeightSender(zmq_handle="ipc:///tmp/x.sock").zmq_handle == "ipc:///tmp/off-grpo-raylet77-x.sock"
