"""One weight-transfer socket per Ray cluster, so that verl jobs side by side on one host never swap weights.

verl 0.9.1 moves the trainer's weights into a colocated vLLM worker through a ZMQ IPC socket (module
:data:`WEIGHT_TRANSFER_MODULE`): the sender (``BucketedWeightSender``, in the actor process) deletes
any file at the path and binds there; the receiver (``BucketedWeightReceiver``, in vLLM's worker
process) connects to it. The path is

    ipc:///tmp/rl-colocate-zmq-{ray job id}-replica-{replica}-rank-{local rank}.sock

and the Ray job id does not tell jobs apart: every fresh Ray cluster (each ``main_ppo`` run that
starts its own, the default) numbers its driver's job ``01000000``. Two jobs on different GPUs of
one host therefore share the path. The later bind replaces the earlier socket file, so a receiver
can connect to the *other* job's sender: one vLLM loads the other job's weights (α silently wrong)
while the other job's sender, whose receiver never connects, waits for its peer without end (a
blocking ZMQ REQ/REP handshake without a timeout, in ``BucketedWeightSender._init_buffer``).

Fix, applied to both ends when :data:`WEIGHT_TRANSFER_MODULE` is imported (a post-import hook that the
entry point installs only in the processes of a job that selects the plugin, ``VERL_OFFGRPO_JOB=1``,
:mod:`verl_offgrpo.patches.job_env`: sender and receiver live in different processes, and the vLLM
worker that connects sees no config, only the job's environment, so both ends decide alike; a job
that does not select the plugin keeps verl's name): the socket file's name gets the raylet's PID,

    ipc://DIR/NAME  →  ipc://DIR/off-grpo-raylet{RAY_RAYLET_PID}-NAME

``RAY_RAYLET_PID`` is set by Ray in every worker process and inherited by the processes vLLM
spawns, so all processes of one cluster on one node agree on it, and two clusters running on one
host at the same time cannot (two live raylets of one PID namespace never share a PID; containers
that share ``/tmp`` but not their PIDs are not covered). Outside Ray (no
``RAY_RAYLET_PID``) and for non-``ipc://`` endpoints the handle is left as verl made it.
"""

from __future__ import annotations

import functools
import os
import sys

from verl_offgrpo.patches import VERL_VERSIONS, hook_for_job, job_selected, targets_where_vllm

#: verl's module with both ends of the colocated weight transfer.
WEIGHT_TRANSFER_MODULE = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
#: The classes whose ``zmq_handle`` is made unique (sender binds it, receiver connects to it).
ENDPOINT_CLASSES = ("BucketedWeightSender", "BucketedWeightReceiver")
TARGETS = tuple(f"{WEIGHT_TRANSFER_MODULE}.{name}.__init__" for name in ENDPOINT_CLASSES)
WHEN = ("actor and vLLM workers of a selecting job (VERL_OFFGRPO_JOB=1): the weight-transfer socket's name "
        "gets the raylet's PID; not installed in other jobs")
PREFIX = "off-grpo-raylet"
_WRAPPED = "__off_grpo_unique_socket__"


def cluster_unique_handle(zmq_handle: str, environ=os.environ) -> str:
    """``ipc://DIR/NAME`` → ``ipc://DIR/off-grpo-raylet<PID>-NAME`` (PID = ``RAY_RAYLET_PID``); idempotent."""
    raylet_pid = environ.get("RAY_RAYLET_PID")
    if not raylet_pid or not zmq_handle.startswith("ipc://"):
        return zmq_handle
    directory, _, name = zmq_handle[len("ipc://") :].rpartition("/")
    if name.startswith(PREFIX):
        return zmq_handle
    return f"ipc://{directory}/{PREFIX}{raylet_pid}-{name}"


def applied(module) -> bool:
    """Whether :func:`make_transfer_sockets_unique` has wrapped ``module``'s endpoint classes."""
    inits = (getattr(getattr(module, name, None), "__init__", None) for name in ENDPOINT_CLASSES)
    return all(getattr(init, _WRAPPED, False) for init in inits)


def make_transfer_sockets_unique(module) -> None:
    """Wrap ``__init__`` of both endpoint classes of ``module`` (verl's :data:`WEIGHT_TRANSFER_MODULE`)
    so that ``self.zmq_handle`` is :func:`cluster_unique_handle` of what verl passed; idempotent."""
    missing = [name for name in ENDPOINT_CLASSES if not isinstance(getattr(module, name, None), type)]
    if missing:
        from verl_offgrpo.patches import PatchError

        raise PatchError(
            f"verl-offgrpo: {module.__name__} lacks {missing}; the per-cluster weight-transfer socket was "
            "written for verl 0.9.1's BucketedWeightSender/BucketedWeightReceiver."
        )
    for name in ENDPOINT_CLASSES:
        cls = getattr(module, name)
        original = cls.__init__
        if getattr(original, _WRAPPED, False):
            continue

        @functools.wraps(original)
        def __init__(self, *args, _original=original, **kwargs):
            _original(self, *args, **kwargs)
            self.zmq_handle = cluster_unique_handle(self.zmq_handle)

        setattr(__init__, _WRAPPED, True)
        cls.__init__ = __init__


def preflight_targets() -> tuple[str, ...]:
    """The targets to check before a selecting job starts: verl's module imports vllm, so only where
    vllm is installed (a job without vllm never imports the module)."""
    return targets_where_vllm(TARGETS)


def live() -> bool:
    """Whether verl's endpoint classes carry the per-cluster name in this process (read off the classes)."""
    module = sys.modules.get(WEIGHT_TRANSFER_MODULE)
    return module is not None and applied(module)


def install() -> None:
    """In a selecting job's process (``VERL_OFFGRPO_JOB=1``), a post-import hook on
    :data:`WEIGHT_TRANSFER_MODULE`; in any other process nothing."""
    if not job_selected():
        return
    hook_for_job(WEIGHT_TRANSFER_MODULE, "BucketedWeightReceiver", make_transfer_sockets_unique)
