"""Worker side: runs inside each actor worker process (Ray actor), reached through ``__ray_call__``.

verl 0.9.1 builds the actor and the reference as two ``TrainingWorker`` s inside one
``ActorRolloutRefWorker`` (``verl/workers/engine_workers.py``, role ``actor_rollout_ref``):
``worker.actor.engine.module`` and ``worker.ref.engine.module`` are FSDP modules built by the same
``FSDPEngine`` code in the same process, on the same ``torch.distributed`` world and (with equal
``fsdp_size``) the same device mesh. The reference is ``forward_only``: FSDP1 wraps it with
``CPUOffload(offload_params=True)``, FSDP2 with ``CPUOffloadPolicy(pin_memory=True)``, so its shards
live on CPU between forwards; it is loaded with ``ref.fsdp_config.model_dtype`` (fp32 by default,
like the actor).

The trainers do not hold the ``ActorRolloutRefWorker`` directly: both wrap it in the colocated
``WorkerDict`` (``create_colocated_worker_cls``; instances in ``.worker_dict``) — or a ``FusedWorker``
(``.fused_worker_dict``). Ray's built-in ``actor.__ray_call__.remote(fn, *args)`` runs
``fn(actor_instance, *args)`` in the actor's process, so :func:`reset_reference_on_worker` needs no
method on verl's worker classes and no worker subclass.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ..accelerator import available_device
from .param_copy import RefResetError, copy_params_into_

SUPPORTED_STRATEGIES = ("fsdp", "fsdp2")


def worker_roles(obj: Any) -> list:
    """The role workers a Ray actor instance holds (verl's colocated ``worker_dict`` / ``fused_worker_dict``), then itself."""
    found = []
    for attr in ("worker_dict", "fused_worker_dict"):
        mapping = getattr(obj, attr, None)
        if isinstance(mapping, dict):
            found.extend(mapping.values())
    found.append(obj)
    return found


def find_actor_and_ref(obj: Any):
    """``(actor TrainingWorker, ref TrainingWorker)`` held by the Ray actor instance ``obj``."""
    cands = worker_roles(obj)
    actor = next((c.actor for c in cands if getattr(c, "actor", None) is not None), None)
    ref = next((c.ref for c in cands if getattr(c, "ref", None) is not None), None)
    if actor is None:
        raise RefResetError(
            f"verl-offgrpo ref reset: no actor model in worker {type(obj).__name__} (expected verl's "
            "ActorRolloutRefWorker with role actor_rollout_ref)."
        )
    if ref is None:
        raise RefResetError(
            "verl-offgrpo ref reset: this worker holds no reference model. verl builds one only when "
            "actor_rollout_ref.actor.use_kl_loss or algorithm.use_kl_in_reward is on, and not with LoRA "
            "(the reference is then the actor's base model with adapters disabled)."
        )
    return actor, ref


def _check_engine(engine: Any, who: str) -> None:
    strategy = getattr(getattr(engine, "engine_config", None), "strategy", None)
    if strategy not in SUPPORTED_STRATEGIES or not hasattr(engine, "module"):
        raise RefResetError(
            f"verl-offgrpo ref reset: the {who} engine is {type(engine).__name__} (strategy {strategy!r}); "
            f"only FSDP engines ({SUPPORTED_STRATEGIES}) are supported (not Megatron, VeOmni, TorchTitan, "
            "AutoModel, fsdp_turbo)."
        )


def _mesh_signature(engine: Any):
    mesh = getattr(engine, "device_mesh", None)
    if mesh is None:
        return None
    return (tuple(mesh.mesh.shape), mesh.mesh.tolist())


def reset_reference_in_process(actor: Any, ref: Any, verify: bool = False) -> dict:
    """Copy ``actor.engine.module`` into ``ref.engine.module`` in place (see :mod:`.param_copy`)."""
    actor_engine, ref_engine = actor.engine, ref.engine
    _check_engine(actor_engine, "actor")
    _check_engine(ref_engine, "reference")
    a_strategy, r_strategy = actor_engine.engine_config.strategy, ref_engine.engine_config.strategy
    if a_strategy != r_strategy:
        raise RefResetError(
            f"verl-offgrpo ref reset: actor strategy {a_strategy!r} differs from the reference's {r_strategy!r}."
        )
    if _mesh_signature(actor_engine) != _mesh_signature(ref_engine):
        raise RefResetError(
            "verl-offgrpo ref reset: the actor and the reference use different FSDP device meshes "
            f"({_mesh_signature(actor_engine)} vs {_mesh_signature(ref_engine)}); set the same "
            "actor_rollout_ref.{actor,ref}.fsdp_config.fsdp_size."
        )
    start = time.perf_counter()
    device = available_device()
    if device is not None:
        # with param offload verl moves the actor's parameters to host memory with non_blocking copies
        # at the end of update_actor and does not wait for them; a real sync waits (in verl's
        # update_weights), a skipped slot may not (the cache kept, or no_sleep), so the host tensors
        # are read only after the device has finished writing them
        device.synchronize()
    report = copy_params_into_(ref_engine.module, actor_engine.module, verify=verify)
    if device is not None:
        device.synchronize()
        device.empty_cache()
    report["seconds_total"] = time.perf_counter() - start
    report["strategy"] = a_strategy
    report["ref_param_offload"] = report["dst_devices"] == ["cpu"]
    report["rank"] = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    return report


def reset_reference_on_worker(worker: Any, verify: bool = False) -> dict:
    """Run inside an actor worker (``worker.__ray_call__.remote(reset_reference_on_worker, verify)``).

    Every rank of the actor worker group must run it (each copies its own shards; no collective).
    """
    actor, ref = find_actor_and_ref(worker)
    report = reset_reference_in_process(actor, ref, verify=verify)
    count = getattr(worker, "_off_grpo_ref_resets", 0) + 1
    worker._off_grpo_ref_resets = count
    report["resets_on_worker"] = count
    return report
