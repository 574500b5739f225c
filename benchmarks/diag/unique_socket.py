"""The package's per-cluster weight-transfer socket in a plain-verl lab job too, so plain jobs run side by side.

verl 0.9.1 names its colocated weight-transfer socket the same in every fresh Ray cluster of a host
(``verl_offgrpo/patches/ipc_socket.py``): two plain-verl jobs side by side can swap weights, which is why
``mainppo_job.plain_jobs_side_by_side`` refuses them. The package renames the socket only in a selecting job's
processes (a user who did not select the plugin keeps plain verl). This lab module applies the same rename
(:func:`verl_offgrpo.patches.ipc_socket.make_transfer_sockets_unique`) in every process of a job where
``OFFGRPO_UNIQUE_SOCKET=1``, and prints each endpoint's socket once a process, so the saved logs show that a
job's sender and receiver met on their own cluster's name (``[unique-socket] pid P: <role> <handle>``).

Loaded in every verl process of a job through ``VERL_USE_EXTERNAL_MODULES=benchmarks.diag.unique_socket`` (the
repo root is on the jobs' ``PYTHONPATH``; vLLM's worker processes import verl, so they load it too).
"""

from __future__ import annotations

import functools
import os

from verl_offgrpo.patches import ipc_socket
from verl_offgrpo.patches.post_import import on_import

ENV = "OFFGRPO_UNIQUE_SOCKET"
MODULE = "benchmarks.diag.unique_socket"
TAG = "[unique-socket]"
__all__ = ["ENV", "MODULE", "TAG", "install", "rename_and_report"]


def rename_and_report(module) -> None:
    """The package's rename on ``module`` (verl's weight-transfer module), then each endpoint prints its handle."""
    ipc_socket.make_transfer_sockets_unique(module)
    for name in ipc_socket.ENDPOINT_CLASSES:
        cls = getattr(module, name)
        renamed = cls.__init__

        @functools.wraps(renamed)
        def __init__(self, *args, _renamed=renamed, _name=name, **kwargs):
            _renamed(self, *args, **kwargs)
            print(f"{TAG} pid {os.getpid()}: {_name} {self.zmq_handle}", flush=True)

        cls.__init__ = __init__


def install(environ=os.environ) -> bool:
    """Where ``OFFGRPO_UNIQUE_SOCKET=1``, :func:`rename_and_report` once verl's weight-transfer module is imported
    (now, if it is already); True if it did. A job that selects the plugin gets the rename from the package: then
    nothing is added (the package's wrap is idempotent, but one report per endpoint is the point)."""
    if environ.get(ENV) != "1" or ipc_socket.job_selected(environ):
        return False
    on_import(ipc_socket.WEIGHT_TRANSFER_MODULE, "BucketedWeightReceiver", rename_and_report)
    return True


install()
