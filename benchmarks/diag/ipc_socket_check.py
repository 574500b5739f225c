"""Which socket verl's colocated weight transfer uses in the processes of one Ray cluster.

Starts a Ray cluster, as one verl job does, and prints (one line, ``RESULT {json}``) the
``zmq_handle`` that verl's classes end up with for verl's name of replica 0, rank 0:

* ``sender``: ``BucketedWeightSender`` built in a Ray actor (verl's actor worker binds it);
* ``receiver``: ``BucketedWeightReceiver`` built in a fresh interpreter started by another actor
  (``--receiver``: as vLLM's worker process, started by the rollout server actor, connects to it);
* ``driver``: the same in the driver, which is no Ray worker (verl's name is kept there);
* ``raylet_pid``, ``vllm``: the cluster's raylet and whether vllm was importable (on a GPU host
  verl's module is imported the normal way; without vllm, under a bare ``vllm_rollout`` package).

With the plugin installed, ``sender == receiver == ipc:///tmp/off-grpo-raylet<PID>-<verl's name>``
(``verl_offgrpo.patches.ipc_socket``, in a job that selects the plugin: run with
``VERL_OFFGRPO_JOB=1``; without it verl's name stays); two of these run at once on one host report different PIDs.

    python3 benchmarks/diag/ipc_socket_check.py
"""

import json
import os
import subprocess
import sys

import ray

from verl_offgrpo.patches.ipc_socket import WEIGHT_TRANSFER_MODULE

VERL_NAME = "rl-colocate-zmq-01000000-replica-0-rank-0.sock"
HANDLE = f"ipc:///tmp/{VERL_NAME}"


def transfer_module():
    """(verl's weight-transfer module, whether vllm is importable), imported in the calling process.

    ``import verl`` loads the plugin (entry point), whose post-import hook must patch the classes
    on this import. Without vllm (CPU) ``vllm_rollout/__init__`` cannot run; the module itself is
    then imported under a bare package."""
    import importlib
    import importlib.util
    import types

    import verl.workers.rollout as parent

    vllm = importlib.util.find_spec("vllm") is not None
    if not vllm:
        package = types.ModuleType("verl.workers.rollout.vllm_rollout")
        package.__path__ = [os.path.join(parent.__path__[0], "vllm_rollout")]
        sys.modules.setdefault(package.__name__, package)
    return importlib.import_module(WEIGHT_TRANSFER_MODULE), vllm


def receiver_handle() -> str:
    import torch

    bwt, _ = transfer_module()
    return bwt.BucketedWeightReceiver(zmq_handle=HANDLE, device=torch.device("cpu")).zmq_handle


@ray.remote(num_cpus=0)
class ActorWorker:
    def sender_handle(self):
        bwt, _ = transfer_module()
        return bwt.BucketedWeightSender(zmq_handle=HANDLE).zmq_handle, os.environ.get("RAY_RAYLET_PID")


@ray.remote(num_cpus=0)
class RolloutServer:
    def receiver_handle(self):
        command = [sys.executable, os.path.abspath(__file__), "--receiver"]  # a fresh interpreter, as vLLM's
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        return out.stdout.split()[-1]


def main() -> int:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        sender, raylet_pid = ray.get(ActorWorker.remote().sender_handle.remote())
        receiver = ray.get(RolloutServer.remote().receiver_handle.remote())
        bwt, vllm = transfer_module()
        driver = bwt.BucketedWeightSender(zmq_handle=HANDLE).zmq_handle
    finally:
        ray.shutdown()
    result = {"sender": sender, "receiver": receiver, "driver": driver, "raylet_pid": raylet_pid, "vllm": vllm}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--receiver"]:
        print(receiver_handle())
        sys.exit(0)
    sys.exit(main())
