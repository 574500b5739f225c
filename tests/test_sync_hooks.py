"""The lagged sync hooks against fakes of verl's rollout servers, in real Ray actor processes.

* ``FakeVLLMServer`` mimics ``vLLMHttpServer``'s sleep/wake: ``_sleep_hybrid`` sleeps at
  ``self._resolve_sleep_level()`` (2 in verl for a plain model); level 2 discards the weights and a wake
  without a sync then "generates garbage"; level 1 restores them. It runs as a Ray actor, so the
  sleep-level override must really reach another process.
* ``FakeActorWG.update_weights`` stands for verl's naive sync (count = resharding + transfer).
* Replicas are verl's own ``RolloutReplica`` (its ``wake_up``/``sleep``) over the fake servers.
* The loop below follows verl's order: generate → ``sleep_replicas`` → update actor → ``update_weights(s)``.
"""

import asyncio
import logging
import math
import os
import re
import subprocess
import sys
import time
import weakref
from types import SimpleNamespace

import pytest
import ray
from hydra import compose, initialize_config_dir

import verl  # noqa: F401
from verl.checkpoint_engine.base import CheckpointEngineManager
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.import_utils import load_class_from_fqn
from verl.workers.rollout.replica import RolloutReplica

import verl_offgrpo
from verl_offgrpo.config import V0_MANAGER_FQN, SyncConfigError, check_sync_config, validate_off_grpo_config
from verl_offgrpo.patches import rpc_results, tracking_merge
from verl_offgrpo.sync import register_sync_hooks
from verl_offgrpo.sync import lagged_manager as cm
from verl_offgrpo.sync import vllm_sleep

CONFIG_DIR = os.path.join(os.path.dirname(verl_offgrpo.__file__), "config")
V0_OVERRIDES = ["trainer.use_v1=false", f"+actor_rollout_ref.rollout.checkpoint_manager_class={V0_MANAGER_FQN}"]


def compose_cfg(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        base = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.n=4"]  # n: groups of 4
        return compose(config_name="off_grpo_trainer", overrides=[*base, *overrides])


# ----------------------------------------------------------------------------- fakes
def served_model(tp=1):
    """The tiny model of the fakes, in the trainer (``actor.engine.module``, whole, then sharded by
    :func:`hold_policy`) and in each vLLM rank (a TP slice of it): the same tensor names (``layers.0.weight`` …), as a
    checkpoint's are in both. At rollout TP = ``tp`` a rank holds vLLM's slices: ``layers.0`` column-parallel (its
    weight's and bias's rows split), ``layers.1`` row-parallel (its weight's columns split, its bias whole on every
    rank: :data:`REPLICATED`)."""
    import torch

    return torch.nn.ModuleDict({"layers": torch.nn.ModuleList([torch.nn.Linear(6, 10 // tp), torch.nn.Linear(10 // tp, 3)])})


#: the fake vLLM tensors every TP rank holds whole (a bias after a row-parallel layer), loaded alike on every rank
REPLICATED = ("layers.1.bias",)


class FakeWorkerExtension:
    """Stands for verl's ``vLLMColocateWorkerExtension``: the plugin's post-import hook gives it the
    served-weights method (:func:`verl_offgrpo.patches.served_weights_worker.install_worker_method`), vLLM mixes it into its workers."""


class FakeVLLMWorker(FakeWorkerExtension):
    """One tensor-parallel rank of vLLM: ``rank`` and ``model_runner.model`` (a tiny torch model whose
    shard depends on the rank). Level-1 sleep copies the weights to host memory and wake restores them
    bit for bit; level-2 sleep discards them and a wake without a sync leaves garbage."""

    def __init__(self, rank, tp=1):
        import torch

        self.rank, self.tp = rank, tp
        self.model_runner = SimpleNamespace(model=served_model(tp).to(torch.bfloat16))
        self.host_copy = None

    def params(self):
        return list(self.model_runner.model.parameters())

    def load(self, version):
        """π_version's weights as the trainer holds them (:func:`policy_tensors`), cast to bf16: this rank's TP
        slice of each (``layers.0`` column-parallel: rows; ``layers.1``'s weight row-parallel: columns; a
        :data:`REPLICATED` tensor whole on every rank); ``version`` may be ``(version, names)``: those tensors keep
        what they held (a sync that reached this rank in part)."""
        import torch

        version, kept = version if isinstance(version, tuple) else (version, ())
        whole = policy_tensors(version or 0)
        with torch.no_grad():
            for name, p in self.model_runner.model.named_parameters():
                if name not in kept:
                    dim = 1 if name == "layers.1.weight" else 0
                    size = p.shape[dim]
                    p.copy_(whole[name] if name in REPLICATED else whole[name].narrow(dim, self.rank * size, size))

    def sleep(self, level):
        self.host_copy = [p.detach().clone() for p in self.params()] if level == 1 else None
        for p in self.params():
            p.data.zero_()  # the device memory is handed back

    def wake(self):
        import torch

        with torch.no_grad():
            for i, p in enumerate(self.params()):
                p.copy_(self.host_copy[i] if self.host_copy is not None else torch.full_like(p, 7.0))

    def perturb(self, param=0, element=3):
        """One ulp more in one element of one tensor (its bits + 1)."""
        self.params()[param].data.view(-1).view(__import__("torch").int16)[element] += 1


class FakeEngine:
    """vLLM's ``AsyncLLM`` as verl's server holds it (``engine``): ``collective_rpc`` runs ``method`` by name on every
    TP worker, in rank order, and returns their results; a worker's error comes back as the text vLLM wraps it in
    (multiproc executor, then the engine core's utility call)."""

    def __init__(self, workers, rpcs):
        self.workers, self.rpcs = workers, rpcs

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        results = []
        for worker in self.workers:
            self.rpcs.append((method, (kwargs or {}).get("action"), (kwargs or {}).get("step"), worker.rank))
            try:
                results.append(getattr(worker, method)(*args, **(kwargs or {})))
            except Exception as err:
                raise Exception(
                    f"Call to collective_rpc method failed: Worker failed with error '{err}', please check the stack "
                    "trace above for the root cause"
                ) from None
        return results


class FakeVLLMServer:
    """``vLLMHttpServer``'s sleep/wake over ``tp`` fake workers, and its ``collective_rpc``. Faults, from
    outside the plugin's code path: ``force_level2`` (every sleep discards the weights while the
    server's ``_resolve_sleep_level`` still says what the override made it), ``perturb_at_wake=(n, rank)``
    (one ulp in one element of that rank's first tensor right after the server's n-th weights wake),
    ``load_at={version: {rank: policy}}`` (at the sync of that version those ranks load that policy's weights instead
    of the one sent: a sync that did not reach them, or brought other weights)."""

    def __init__(self, free_cache_engine=True, level1_sleep_s=0.0, tp=1, force_level2=False, perturb_at_wake=None,
                 load_at=None):
        from verl_offgrpo.patches import served_weights_worker

        self.config = SimpleNamespace(free_cache_engine=free_cache_engine)
        self.level1_sleep_s = level1_sleep_s  # what copying the weights to host memory takes
        self.rollout_mode = "hybrid"
        self.node_rank = 0
        self.global_steps = None
        self.weights = "dummy"
        self.cpu_copy = None
        self.awake = True
        self.log = []
        self.force_level2 = force_level2
        self.perturb_at_wake = perturb_at_wake
        self.load_at = load_at or {}
        self.weight_wakes = 0
        self.rpcs = []  # (method, action, step, rank) of each collective_rpc, per worker
        # what the plugin's post-import hook does in vLLM's worker processes
        served_weights_worker.install_worker_method(SimpleNamespace(__name__="fake", vLLMColocateWorkerExtension=FakeWorkerExtension))
        self.workers = [FakeVLLMWorker(rank, tp) for rank in range(tp)]
        self.engine = FakeEngine(self.workers, self.rpcs)

    def _resolve_sleep_level(self):
        return 2

    async def _sleep_hybrid(self):
        level = self._resolve_sleep_level()
        self.log.append(("sleep", level))
        if self.force_level2:
            level = 2
        if level == 1:
            await asyncio.sleep(self.level1_sleep_s)
        self.cpu_copy = self.weights if level == 1 else None
        self.weights, self.awake = None, False
        for worker in self.workers:
            worker.sleep(level)

    async def sleep(self):
        if self.node_rank != 0 or not self.config.free_cache_engine:
            return
        await self._sleep_hybrid()

    async def wake_up(self, tags=None):
        tags = tags or ["kv_cache", "weights"]
        self.log.append(("wake", tuple(tags)))
        if "weights" in tags and self.weights is None:
            self.weights = self.cpu_copy if self.cpu_copy is not None else "garbage"
            for worker in self.workers:
                worker.wake()
            self.weight_wakes += 1
            if self.perturb_at_wake and self.perturb_at_wake[0] == self.weight_wakes:
                self.workers[self.perturb_at_wake[1]].perturb()
        if "kv_cache" in tags:
            self.awake = True

    async def resume_kv_cache(self):
        """verl 0.9.1's vLLMHttpServer.resume_kv_cache (hybrid mode)."""
        if self.node_rank != 0 or not self.config.free_cache_engine:
            return
        await self.wake_up(["kv_cache"])

    async def receive_weights(self, version, policy=None):
        """What verl's naive sync does to the server: resume, load π_version (the bits of the trainer's ``policy``,
        by default ``version``), set the version."""
        if self.config.free_cache_engine:
            await self.wake_up(["weights"])
        self.weights = f"pi_{version}"
        for worker in self.workers:
            worker.load(self.load_at.get(version, {}).get(worker.rank, version if policy is None else policy))
        if version is not None:
            self.global_steps = version
        if self.config.free_cache_engine:
            await self.wake_up(["kv_cache"])
        self.log.append(("sync", version))

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        """verl 0.9.1's ``vLLMHttpServer.collective_rpc``: vLLM's answer is dropped (below, the plugin's patch
        :mod:`verl_offgrpo.patches.rpc_results` makes it return it, as in a selecting job's server actors)."""
        await self.engine.collective_rpc(method=method, timeout=timeout, args=args, kwargs=kwargs)

    async def wait_for_requests_to_drain(self):
        return None

    def generate(self):
        if not self.awake:
            return "asleep"
        return self.weights

    def get_log(self):
        return list(self.log)

    def get_rpcs(self):
        return list(self.rpcs)


class FakeWorker:
    def empty_cache_calls(self):
        return getattr(self, "_off_grpo_empty_cache_calls", 0)


class FakeReplica(RolloutReplica):
    def __init__(self, servers):
        self.servers = servers

    async def launch_servers(self):
        raise NotImplementedError


def policy_tensors(policy):
    """The trainer's policy number ``policy``: each tensor of :func:`served_model` whole, in float32."""
    import torch

    gen = torch.Generator().manual_seed(policy)
    return {name: torch.randn(p.shape, generator=gen) for name, p in served_model().named_parameters()}


def hold_policy(worker, policy, shard=0, shards=1):
    """In a FakeWorker's process: the actor's weights (``worker.actor.engine.module``, where verl's worker holds
    them) become this rank's shard of the trainer's policy number ``policy`` as verl 0.9.1's default actor engine
    holds it (torch FSDP1, ``use_orig_params=False``): one flat parameter, part ``shard`` of ``shards`` equal parts
    of the tensors flattened one after another (FSDP1's padding left out), with torch's ``_fqns``, ``_numels`` and
    ``_shard_param_infos``."""
    import torch
    from torch.distributed.fsdp._flat_param import _ShardParamInfo

    whole = policy_tensors(policy)
    flat = torch.cat([t.reshape(-1) for t in whole.values()])
    size = -(-flat.numel() // shards)
    low, high = shard * size, min((shard + 1) * size, flat.numel())
    local = torch.nn.Parameter(flat[low:high].clone())
    infos, at = [], 0
    for t in whole.values():
        first, end = max(at, low), min(at + t.numel(), high)
        infos.append(_ShardParamInfo(True, first - low, end - first, first - at, end - at - 1) if first < end
                     else _ShardParamInfo(False, None, None, None, None))
        at += t.numel()
    local._fqns, local._numels, local._shard_param_infos = tuple(whole), tuple(t.numel() for t in whole.values()), infos
    module = torch.nn.Module()
    module.register_parameter("_flat_param", local)
    worker.actor = SimpleNamespace(engine=SimpleNamespace(module=module))


class FakeActorWG:
    """verl's actor worker group as the manager uses it: ``workers`` and the naive sync ``update_weights``.
    ``policy_of(step)``: which policy the trainer holds at a step's sync (``step`` itself: every update moves it;
    a constant: a policy that never moves, e.g. a zero learning rate)."""

    def __init__(self, workers, servers, policy_of=None):
        self.workers = workers
        self.servers = servers
        self.sync_calls = []
        self.policy_of = policy_of or (lambda step: step or 0)

    def update_weights(self, global_steps=None, mode="auto"):
        self.sync_calls.append((global_steps, mode))
        policy = self.policy_of(global_steps)
        ray.get([worker.__ray_call__.remote(hold_policy, policy, i, len(self.workers))
                 for i, worker in enumerate(self.workers)])
        return [server.receive_weights.remote(global_steps, policy) for server in self.servers]


class FakeV0Trainer:
    """Stands for RayPPOTrainer: builds the manager the way its init_workers does."""

    def __init__(self, config, actor_wg, total_training_steps=12):
        self.config = config
        self.actor_rollout_wg = actor_wg
        self.total_training_steps = total_training_steps

    def init_workers(self, replicas, manager_cls=None):
        fqn = self.config.actor_rollout_ref.rollout.get("checkpoint_manager_class")
        manager_cls = manager_cls or load_class_from_fqn(fqn, "CheckpointEngineManager")
        self.checkpoint_manager = manager_cls(
            config=omega_conf_to_dataclass(self.config.actor_rollout_ref.rollout.checkpoint_engine),
            actor_wg=self.actor_rollout_wg,
            replicas=replicas,
        )
        self.checkpoint_manager.sleep_replicas()
        return self.checkpoint_manager


def start_ray():
    """The local Ray instance of the fake clusters, started once and left running for the next module that
    needs it (starting and stopping cost ~4 s a module); tests/conftest.py runs those modules last and
    stops it with the session."""
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)


@pytest.fixture(scope="module")
def ray_local():
    start_ray()
    import ray.cloudpickle as rcp

    rcp.register_pickle_by_value(sys.modules[__name__])
    yield
    release_actors()


def release_actors():
    """End this module's actors, as stopping Ray at the module's end did: the shared workers and servers,
    and every other server still alive (a finished test's cluster can stay referenced, e.g. by a
    reference cycle or the lagged manager's ``Tracking.log`` merge)."""
    for actor in [*_ACTOR_WORKERS, *_SERVER_POOL, *(server() for server in _SERVERS_MADE)]:
        if actor is not None:
            ray.kill(actor)
    _ACTOR_WORKERS.clear()
    _SERVER_POOL.clear()
    _SERVERS_MADE.clear()


#: the two fake actor workers (Ray actors) of this module's clusters: a worker process imports verl
#: (~5 s of CPU) at the first skipped slot that empties its cache, so the clusters share them, each
#: reset by :func:`make_cluster` to a new FakeWorker's state (a cluster made later in the same test
#: takes them over)
_ACTOR_WORKERS = []
#: the fake servers (Ray actors) of this module's clusters, shared the same way: a server process imports
#: torch (~5 s of CPU), so :func:`make_cluster` takes the first ``n_servers`` of them (starting more when
#: it needs more) and puts each back in a new FakeVLLMServer's state (:func:`reset_server`)
_SERVER_POOL = []
_SERVERS_MADE = []  # weak references to the servers of this module's clusters that are not shared
#: the fake server class as this module defines it: a test that patches it (test_window's lossy sync) gets
#: new server actors of the patched class, as Ray pickles the class when it starts an actor
#: verl 0.9.1's collective_rpc, which drops vLLM's answer (a test puts it back to see the plugin without its patch)
VERL_COLLECTIVE_RPC = FakeVLLMServer.collective_rpc
rpc_results.return_results(FakeVLLMServer)  # what the plugin's post-import hook does in a selecting job's servers
_SERVER_CLASS_DICT = dict(vars(FakeVLLMServer))


def reset_worker(worker):
    """In a FakeWorker's process: back to a new FakeWorker's state (no attributes, verl's device module
    as before :func:`install_device`)."""
    worker.__dict__.clear()
    device = sys.modules.get("verl.utils.device")
    if device is not None and "_get_torch_device_before_test" in vars(device):
        device.get_torch_device = vars(device).pop("_get_torch_device_before_test")


def reset_server(server, *args, **kwargs):
    """In a FakeVLLMServer's process: a new FakeVLLMServer's state, built by ``__init__(*args, **kwargs)``
    on an instance without attributes (the sleep-level override, the weights, the logs and the TP workers
    of the last cluster are gone)."""
    server.__dict__.clear()
    type(server).__init__(server, *args, **kwargs)


def make_cluster(n_servers=2, free_cache_engine=True, level1_sleep_s=0.0, **server_kwargs):
    """``server_kwargs``: ``tp`` and the faults of :class:`FakeVLLMServer`, for every server, or a list
    of per-server dicts as ``per_server=[...]``. The servers are this module's first ``n_servers``
    (``_SERVER_POOL``), reset to new servers of these arguments (new actors if the class was patched); the
    workers are this module's two (``_ACTOR_WORKERS``), reset. A cluster made later in the same test
    takes them over."""
    server_cls = ray.remote(num_cpus=0)(FakeVLLMServer)
    per_server = server_kwargs.pop("per_server", None) or [{}] * n_servers
    args = [((free_cache_engine, level1_sleep_s), {**server_kwargs, **per_server[i]}) for i in range(n_servers)]
    if dict(vars(FakeVLLMServer)) == _SERVER_CLASS_DICT:
        reused = _SERVER_POOL[:n_servers]
        resets = [server.__ray_call__.remote(reset_server, *a, **kw) for server, (a, kw) in zip(reused, args)]
        _SERVER_POOL.extend(server_cls.remote(*a, **kw) for a, kw in args[len(reused):])
        servers = _SERVER_POOL[:n_servers]
    else:
        resets, servers = [], [server_cls.remote(*a, **kw) for a, kw in args]
        _SERVERS_MADE.extend(weakref.ref(server) for server in servers)
    if not _ACTOR_WORKERS:
        _ACTOR_WORKERS.extend(ray.remote(num_cpus=0)(FakeWorker).remote() for _ in range(2))
    workers = list(_ACTOR_WORKERS)
    ray.get([*resets, *(worker.__ray_call__.remote(reset_worker) for worker in workers)])
    replicas = [FakeReplica([s]) for s in servers]
    return servers, workers, replicas, FakeActorWG(workers, servers)


def run_v0_loop(trainer, manager, servers, steps, start=0):
    """verl v0 order; returns {step: weights each server generated from}."""
    manager.update_weights(start)
    generated = {}
    for s in steps:
        manager.trainer.global_steps = s
        generated[s] = ray.get([server.generate.remote() for server in servers])
        manager.sleep_replicas()
        manager.update_weights(s)
    return generated


# ----------------------------------------------------------------------------- v0 manager
def test_v0_lagged_sync_serves_alpha(ray_local):
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=4")
    servers, workers, replicas, wg = make_cluster()
    trainer = FakeV0Trainer(cfg, wg)
    manager = trainer.init_workers(replicas)
    assert type(manager).__name__ == "LaggedCheckpointManager" and manager.trainer is trainer
    # the override reached the server processes; the class in this process is untouched
    states = ray.get([s.__ray_call__.remote(vllm_sleep.read_server_state) for s in servers])
    assert [st["sleep_level"] for st in states] == [1, 1] and FakeVLLMServer(True)._resolve_sleep_level() == 2

    generated = run_v0_loop(trainer, manager, servers, range(1, 13))
    # resharding + transfer only at the first slot and every 4 steps
    assert [c[0] for c in wg.sync_calls] == [0, 4, 8, 12]
    assert all(mode == "naive" for _, mode in wg.sync_calls)
    # every generation used α = π of the last sync, never garbage
    for s, weights in generated.items():
        assert weights == [f"pi_{4 * ((s - 1) // 4)}"] * 2, (s, weights)
    # skipped slots woke vLLM (weights + kv cache) and emptied the actor cache, nothing else
    log = ray.get(servers[0].get_log.remote())
    assert sum(1 for e in log if e[0] == "sync") == 4
    # a skipped slot wakes as verl's sync does, minus the transfer: weights, then the KV cache
    slots, current = [], []
    for event in log:
        if event[0] == "sleep" and current:
            slots.append(current)
            current = []
        current.append(event)
    slots.append(current)
    skip_slot = [("sleep", 1), ("wake", ("weights",)), ("wake", ("kv_cache",))]
    assert sum(slot == skip_slot for slot in slots) == 9
    assert sum(slot[:3] == skip_slot and slot[3:] == [("sync", slot[3][1])] for slot in slots if len(slot) == 4) == 4
    assert all(e == ("sleep", 1) for e in log if e[0] == "sleep")
    assert ray.get([w.empty_cache_calls.remote() for w in workers]) == [9, 9]
    # the engine's weight version only moves on real syncs (V1's trajectory_staleness relies on it)
    assert ray.get(servers[0].__ray_call__.remote(lambda srv: srv.global_steps)) == 12
    # metrics by step
    m = {s: manager.step_metrics(s) for s in range(5, 13)}
    assert [m[s]["off_grpo/synced"] for s in range(5, 13)] == [0, 0, 0, 1, 0, 0, 0, 1]
    assert [m[s]["off_grpo/lag"] for s in range(5, 13)] == [1, 2, 3, 0, 1, 2, 3, 0]
    assert [m[s]["off_grpo/rollout_lag"] for s in range(5, 13)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert all(m[s]["timing_s/off_grpo_sync"] >= 0 for s in m)
    # a skipped slot reports its two parts; a real sync has neither
    parts = ["timing_s/off_grpo_skip_" + k for k in ("empty_cache", "wake_weights", "wake_kv_cache", "wake")]
    for s in m:
        if m[s]["off_grpo/synced"]:
            assert not any(k in m[s] for k in parts), m[s]
        else:
            assert all(0 <= m[s][k] <= m[s]["timing_s/off_grpo_sync"] for k in parts), m[s]
            wake = m[s]["timing_s/off_grpo_skip_wake_weights"] + m[s]["timing_s/off_grpo_skip_wake_kv_cache"]
            assert m[s]["timing_s/off_grpo_skip_wake"] == pytest.approx(wake)
            # no device here: memory unknown, so every worker empties (the safe side)
            assert m[s]["off_grpo/skip_cache_emptied_frac"] == 1.0 and "off_grpo/skip_min_free_frac" not in m[s]


def install_device(worker, free_gib, total_gib, queued_work_s=0.0):
    """In an actor worker's process: a device with ``free_gib`` of ``total_gib`` free and
    ``queued_work_s`` of queued work (what ``synchronize`` waits for); counts real empties and waits
    (:func:`reset_worker` puts verl's device back)."""
    import verl.utils.device

    class Device:
        def is_available(self):
            return True

        def synchronize(self):
            worker.waits = getattr(worker, "waits", 0) + 1
            time.sleep(queued_work_s)

        def mem_get_info(self):
            return free_gib * 2**30, total_gib * 2**30

        def empty_cache(self):
            worker.real_empties = getattr(worker, "real_empties", 0) + 1

    vars(verl.utils.device).setdefault("_get_torch_device_before_test", verl.utils.device.get_torch_device)
    verl.utils.device.get_torch_device = Device


def test_keeps_device_cache_when_vllms_whole_budget_is_free():
    assert vllm_sleep.keeps_device_cache(32, 80, 0.4)  # free = 0.4 × 80: the pool fits exactly
    assert not vllm_sleep.keeps_device_cache(31.9, 80, 0.4)
    assert not vllm_sleep.keeps_device_cache(80, 80, None)  # empty_cache_on_skip=always


@pytest.mark.slow
@pytest.mark.parametrize("mode, empties", [("always", [3, 3]), ("if_needed", [0, 3]), (None, [0, 3])])
def test_skipped_slot_keeps_the_actor_cache_only_if_vllms_pool_fits(ray_local, caplog, mode, empties):
    """empty_cache_on_skip=if_needed (also the default, mode None): a worker with free ≥
    gpu_memory_utilization × total keeps its cache. Worker 0 has 50 of 80 GiB free (≥ 0.4 × 80 = 32:
    keeps), worker 1 has 20 (empties). if_needed warns once, on the first skip, with the
    gpu_memory_utilization that would have kept worker 1's cache (below 20 / 80 = 0.25); always never."""
    choice = [f"algorithm.off_grpo.empty_cache_on_skip={mode}"] if mode else []
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=4", *choice,
                      "actor_rollout_ref.rollout.gpu_memory_utilization=0.4")  # fmt: skip
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    # worker 0 has 0.3 s of device work queued (as verl's non_blocking FSDP offload copies leave), worker 1 0.1 s
    ray.get([w.__ray_call__.remote(install_device, free, 80, queued) for w, free, queued in zip(workers, (50, 20), (0.3, 0.1))])
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    with caplog.at_level(logging.WARNING, logger=cm.__name__):
        generated = run_v0_loop(None, manager, servers, range(1, 5))
    assert generated == {1: ["pi_0"], 2: ["pi_0"], 3: ["pi_0"], 4: ["pi_0"]}  # 3 skipped slots (1, 2, 3)
    hints = [r.getMessage() for r in caplog.records if r.msg == cm.CACHE_EMPTIED_HINT]
    assert hints == ([] if mode == "always" else [cm.CACHE_EMPTIED_HINT % (0.25, 0.4, 0.25)])
    assert ray.get([w.__ray_call__.remote(lambda w: getattr(w, "real_empties", 0)) for w in workers]) == empties
    # a worker waits for its queued work only when it empties its cache
    assert ray.get([w.__ray_call__.remote(lambda w: getattr(w, "waits", 0)) for w in workers]) == empties
    for m in map(manager.step_metrics, (1, 2, 3)):
        assert m["off_grpo/synced"] == 0.0 and m["off_grpo/skip_cache_emptied_frac"] == (1.0 if mode == "always" else 0.5)
        assert m["off_grpo/skip_min_free_frac"] == 0.25 and m["off_grpo/skip_wake_needs_frac"] == 0.4
        wait = m["timing_s/off_grpo_skip_actor_wait"]  # the longest wait of an emptying worker
        assert (0.3 <= wait < 0.4) if mode == "always" else (0.1 <= wait < 0.2)
        assert m["timing_s/off_grpo_skip_empty_cache"] >= wait
    assert "off_grpo/skip_cache_emptied_frac" not in manager.step_metrics(4)  # a real sync: verl's own path


def test_an_actor_worker_group_without_ray_handles_stops_the_lagged_sync(ray_local):
    """The skipped slot empties the actor's cache, and the sync check reads the trainer's weights, on the handles of
    verl's ``RayWorkerGroup.workers``: none there (a verl that moved them) is an error at the first sync, not a
    check that quietly compares nothing."""
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=4")
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    wg.workers = []
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    with pytest.raises(RuntimeError, match=r"^verl-offgrpo: the actor worker group \(FakeActorWG\) has no Ray handles "
                                           r"in .workers \(where verl 0.9.1's RayWorkerGroup keeps them\); the lagged"):
        run_v0_loop(None, manager, servers, range(1, 3))


@pytest.mark.slow
def test_without_the_override_skips_serve_garbage(ray_local, monkeypatch):
    """Control: the same loop with verl's level-2 sleep generates garbage on lagged steps (with the
    served-weights check off); with the check on (default) the first wake without a sync stops the run
    before step 2's rollout."""
    monkeypatch.setattr(cm, "keep_weights_across_sleep", lambda replicas, level=1: [])
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.verify_served_weights=false")
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    generated = run_v0_loop(None, manager, servers, range(1, 5))
    assert generated[1] == ["pi_0"] and generated[2] == ["garbage"]

    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=4")
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    with pytest.raises(ServedPolicyError, match=r"^verl-offgrpo: step 2: vLLM does not serve α .*replica 0, TP rank 0"):
        run_v0_loop(None, manager, servers, range(1, 5))


@pytest.mark.slow  # the default run's lagged tests check honest engines on every wake too (verify is on)
def test_honest_engines_pass_the_weight_check_on_every_wake(ray_local):
    """verify_served_weights (default on): every TP rank of every replica records α's fingerprint at each
    real sync and checks it on each wake without a sync; honest engines (level-1 sleep restores the
    weights bit for bit) never fail it, over 30 steps, 2 replicas × TP=2."""
    from verl_offgrpo.sync import served_weights

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=3")
    servers, workers, replicas, wg = make_cluster(n_servers=2, tp=2)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    generated = run_v0_loop(None, manager, servers, range(1, 31))
    assert all(generated[s] == [f"pi_{3 * ((s - 1) // 3)}"] * 2 for s in generated)
    expected = [("record", 0)] + [("check", s) if s % 3 else ("record", s) for s in range(1, 31)]
    for server in servers:
        rpcs = ray.get(server.get_rpcs.remote())
        assert {method for method, *_ in rpcs} == {served_weights.RPC_METHOD}
        for rank in (0, 1):
            assert [(action, step) for _, action, step, r in rpcs if r == rank] == expected, rank
        records = ray.get(server.__ray_call__.remote(lambda srv: [w._off_grpo_alpha_record["step"] for w in srv.workers]))
        assert records == [30, 30]
    for s in range(23, 31):  # the manager keeps the metrics of the last steps only
        m = manager.step_metrics(s)
        assert m["off_grpo/weights_verified"] == float(s % 3 != 0)
        assert 0 <= m["timing_s/off_grpo_verify_weights"] <= m["timing_s/off_grpo_sync"]


def test_forced_level2_sleep_is_caught_at_the_first_affected_step(ray_local):
    """A server whose engine sleeps at level 2 (weights discarded) although the plugin's override made its
    ``_resolve_sleep_level`` say 1 — the fault of issue 32, injected below the plugin's code path: the
    first wake without a sync (the slot of step 1) stops the run before step 2's rollout, naming the
    replica, the rank and the tensors; the honest replica beside it passes."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=3")
    servers, _, replicas, wg = make_cluster(n_servers=2, tp=2, per_server=[{}, {"force_level2": True}])
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    assert [st["sleep_level"] for st in ray.get([s.__ray_call__.remote(vllm_sleep.read_server_state) for s in servers])] == [1, 1]
    manager.update_weights(0)
    manager.trainer.global_steps = 1
    assert ray.get([s.generate.remote() for s in servers]) == ["pi_0", "pi_0"]  # step 1: right after the sync
    manager.sleep_replicas()
    with pytest.raises(ServedPolicyError) as caught:
        manager.update_weights(1)
    message = str(caught.value)
    assert message.startswith("verl-offgrpo: step 2: vLLM does not serve α after its wake without a weight sync")
    assert "for step 2's rollout: replica 1 of 2, TP rank 0: 4 of 4 parameter tensors differ from α as loaded at " \
           "the sync of step 0" in message and "first: layers.0.weight (bit-sum" in message  # fmt: skip
    assert "[off-grpo-served-weights]" not in message  # the payload was parsed, not pasted
    rpcs = ray.get(servers[0].get_rpcs.remote())  # the honest replica was checked too, on both ranks
    assert [(a, st, r) for _, a, st, r in rpcs] == [("record", 0, 0), ("record", 0, 1), ("check", 1, 0), ("check", 1, 1)]


@pytest.mark.slow
def test_a_one_ulp_change_on_one_rank_is_caught_at_its_step(ray_local):
    """TP=3: one element of one tensor on rank 2 gains one ulp right after the server's 5th weights wake
    (the wake in the slot of step 4, a skipped one at v=3): the check of that slot names step 5, rank 2,
    the tensor and a bit-sum that moved by exactly 1. The same change at the 4th wake (the sync of step 3,
    which then loads π_3 over it) is harmless and raises nothing."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=3")
    servers, _, replicas, wg = make_cluster(n_servers=1, tp=3, perturb_at_wake=(5, 2))
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    with pytest.raises(ServedPolicyError) as caught:
        run_v0_loop(None, manager, servers, range(1, 10))
    message = str(caught.value)
    assert message.startswith("verl-offgrpo: step 5: ") and "replica 0, TP rank 2: 1 of 4 parameter tensors" in message
    assert "sync of step 3" in message
    before, after = map(int, re.search(r"layers\.0\.weight \(bit-sum (-?\d+) -> (-?\d+)", message).groups())
    assert after - before == 1
    assert manager.schedule.last_step == 3  # the slot of step 4 never completed: no rollout of step 5

    servers, _, replicas, wg = make_cluster(n_servers=1, tp=3, perturb_at_wake=(4, 2))
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    run_v0_loop(None, manager, servers, range(1, 10))


def test_an_engine_without_the_check_falls_back_loudly_to_the_lagged_rprime_limit(ray_local, monkeypatch, caplog):
    """If the fingerprint cannot be recorded (an engine without verl's worker extension), the run warns,
    logs off_grpo/weights_verify_failed and goes on with the r' monitor, whose lagged limit is then an
    error again, as before the exact check existed. With rollout TP > 1 it stops instead: vLLM's multi-process
    executor raises at the first rank's failure and leaves the others' answers queued for its next call."""
    from verl_offgrpo.sync import served_weights
    from verl_offgrpo.sync.alpha_guard import STATISTIC, ServedPolicyError

    async def no_method(replicas, action, step):
        return [AttributeError("'Worker' object has no attribute 'off_grpo_served_weights'")]

    monkeypatch.setattr(served_weights, "call_replicas", no_method)
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=3", "actor_rollout_ref.rollout.tensor_model_parallel_size=2")
    servers, _, replicas, wg = make_cluster(n_servers=1, tp=2)
    with pytest.raises(ServedPolicyError, match="step 0: could not record .* with rollout TP > 1 a failed call leaves"):
        FakeV0Trainer(cfg, wg).init_workers(replicas).update_weights(0)
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=3", "actor_rollout_ref.rollout.tensor_model_parallel_size=1")
    servers, _, replicas, wg = make_cluster(n_servers=1)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    assert manager.verify_weights
    with caplog.at_level(logging.WARNING):
        manager.update_weights(0)
    assert not manager.verify_weights and "is off for this run" in caplog.text
    manager.trainer.global_steps = 1
    manager.sleep_replicas()
    manager.update_weights(1)  # a skipped slot: no check is attempted now
    assert manager.step_metrics(1)["off_grpo/synced"] == 0.0
    with pytest.raises(ServedPolicyError, match="rollout lag 1"):
        manager.check_served_policy({STATISTIC: 9.0}, 2)


@pytest.mark.parametrize("data_parallel_size, lagged_is_error", [(1, False), (2, True)])
def test_with_vllm_data_parallelism_the_lagged_limit_stays_an_error(ray_local, caplog, data_parallel_size,
                                                                     lagged_is_error):
    """vLLM's collective_rpc reaches the leader's data-parallel shard of a replica only, so with
    data_parallel_size > 1 the exact check does not cover every worker that samples a lagged batch: the lagged
    limit then stops the run (one warning says so at start-up) instead of logging lagged_over_limit."""
    from verl_offgrpo.sync.alpha_guard import STATISTIC, ServedPolicyError

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=3",
                      f"actor_rollout_ref.rollout.data_parallel_size={data_parallel_size}")
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate_off_grpo_config(cfg)  # the start-up checks say it, before any GPU work
    told = [r.getMessage() for r in caplog.records if "data_parallel_size" in r.getMessage()]
    assert told == ([f"off_grpo: actor_rollout_ref.rollout.data_parallel_size={data_parallel_size}: vLLM's "
                     "collective_rpc answers for each replica's leader shard only, so the exact check that each sync "
                     "reached vLLM is off and the check of each wake without a sync reaches the leader's data-parallel shard "
                     "only: a lagged batch over algorithm.off_grpo.max_log_rprime_lagged stops the run."]
                    if lagged_is_error else [])
    servers, _, replicas, wg = make_cluster(n_servers=1)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    assert manager.verify_weights and manager.verify_syncs is not lagged_is_error
    manager.update_weights(0)
    manager.trainer.global_steps = 1
    manager.sleep_replicas()
    manager.update_weights(1)  # a skipped slot, checked exactly on the leader's shard
    if lagged_is_error:
        with pytest.raises(ServedPolicyError, match="rollout lag 1"):
            manager.check_served_policy({STATISTIC: 9.0}, 2)
    else:
        assert manager.check_served_policy({STATISTIC: 9.0}, 2)["off_grpo/guard/lagged_over_limit"] == 1.0


def test_no_sleep_mode_never_wakes(ray_local):
    cfg = compose_cfg(
        *V0_OVERRIDES,
        "algorithm.off_grpo.sync_period=3",
        "algorithm.off_grpo.keep_weights=no_sleep",
        "actor_rollout_ref.rollout.free_cache_engine=false",
    )
    servers, workers, replicas, wg = make_cluster(n_servers=1, free_cache_engine=False)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    generated = run_v0_loop(None, manager, servers, range(1, 7))
    assert [c[0] for c in wg.sync_calls] == [0, 3, 6]
    assert generated == {1: ["pi_0"], 2: ["pi_0"], 3: ["pi_0"], 4: ["pi_3"], 5: ["pi_3"], 6: ["pi_3"]}
    log = ray.get(servers[0].get_log.remote())
    assert not [e for e in log if e[0] in ("wake", "sleep")]
    assert "timing_s/off_grpo_skip_wake" not in manager.step_metrics(5)
    assert ray.get(servers[0].__ray_call__.remote(vllm_sleep.read_server_state))["sleep_level"] == 2
    assert ray.get(workers[0].empty_cache_calls.remote()) == 0


def test_period_one_is_verl_behaviour(ray_local):
    """sync_period=1: no override, every call a real sync, including the wake inside _validate."""
    cfg = compose_cfg(*V0_OVERRIDES)
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    run_v0_loop(None, manager, servers, range(1, 4))
    manager.sleep_replicas()
    manager.update_weights(3)  # v0 _validate with a colocated reward model
    assert [c[0] for c in wg.sync_calls] == [0, 1, 2, 3, 3]
    assert ray.get(servers[0].generate.remote()) == "pi_3"
    assert ray.get(servers[0].__ray_call__.remote(vllm_sleep.read_server_state))["override"] is None
    assert [manager.step_metrics(s)["off_grpo/synced"] for s in (1, 2, 3)] == [1, 1, 1]


@pytest.mark.slow
def test_validation_forces_sync_and_validation_wake_does_not_transfer(ray_local):
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=4", "trainer.test_freq=5")
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    trainer = FakeV0Trainer(cfg, wg, total_training_steps=11)
    manager = trainer.init_workers(replicas)
    manager.update_weights(0)
    for s in range(1, 12):
        manager.sleep_replicas()
        manager.update_weights(s)
        if s in (5, 10, 11):  # verl validates after these slots; a colocated RM sleeps + wakes vLLM
            assert ray.get(servers[0].generate.remote()) == f"pi_{s}"
            manager.sleep_replicas()
            manager.update_weights(s)
            assert ray.get(servers[0].generate.remote()) == f"pi_{s}"
    assert [c[0] for c in wg.sync_calls] == [0, 4, 5, 8, 10, 11]

    cfg2 = compose_cfg(
        *V0_OVERRIDES, "algorithm.off_grpo.sync_period=4", "trainer.test_freq=5",
        "algorithm.off_grpo.sync_before_validate=false",
    )
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    manager = FakeV0Trainer(cfg2, wg, total_training_steps=11).init_workers(replicas)
    run_v0_loop(None, manager, servers, range(1, 12))
    assert [c[0] for c in wg.sync_calls] == [0, 4, 8]


@pytest.mark.slow
def test_resume_syncs_first_slot(ray_local):
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=4")
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    generated = run_v0_loop(None, manager, servers, range(11, 15), start=10)
    assert [c[0] for c in wg.sync_calls] == [10, 12]
    assert generated == {11: ["pi_10"], 12: ["pi_10"], 13: ["pi_12"], 14: ["pi_12"]}


@pytest.mark.slow
def test_each_step_reports_the_sleep_after_its_rollout(ray_local):
    """timing_s/off_grpo_sleep: the replicas' sleep in each step (inside verl's gen timer). At v > 1 it
    is level 1, which pays for copying α to host memory (0.2 s in the fake); v = 1 sleeps at level 2."""
    for period, copies in ((2, True), (1, False)):
        cfg = compose_cfg(*V0_OVERRIDES, f"algorithm.off_grpo.sync_period={period}")
        servers, _, replicas, wg = make_cluster(n_servers=1, level1_sleep_s=0.2)
        manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
        run_v0_loop(None, manager, servers, range(1, 4))
        slept = [manager.step_metrics(s)["timing_s/off_grpo_sleep"] for s in (1, 2, 3)]
        assert all(0.2 <= t < 2 for t in slept) if copies else all(t < 0.2 for t in slept), (period, slept)
        manager.sleep_replicas()  # a second sleep in step 3 (after validation): the step reports both
        twice = manager.step_metrics(3)["timing_s/off_grpo_sleep"]
        assert twice >= slept[2] + (0.2 if copies else 0.0)


@pytest.mark.slow
def test_v0_metrics_reach_the_logger(ray_local):
    from verl.utils.tracking import Tracking

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=2")
    servers, workers, replicas, wg = make_cluster(n_servers=1, level1_sleep_s=0.05)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    run_v0_loop(None, manager, servers, range(1, 4))

    class Memory:
        def __init__(self):
            self.rows = []

        def log(self, data, step):
            self.rows.append((step, dict(data)))

    tracking = Tracking(project_name="p", experiment_name="e", default_backend=[])
    tracking.logger["memory"] = mem = Memory()
    tracking.log(data={"actor/x": 1.0, "timing_s/off_grpo_sync": 7.0}, step=3)  # a key the trainer logged wins
    tracking.log(data={"actor/x": 2.0}, step=3)  # consumed once
    step, row = mem.rows[0]
    assert step == 3 and row["actor/x"] == 1.0 and row["timing_s/off_grpo_sync"] == 7.0
    assert row["off_grpo/synced"] == 0.0 and row["off_grpo/lag"] == 1.0 and row["off_grpo/rollout_lag"] == 0.0
    assert "timing_s/off_grpo_sync" in row and row["timing_s/off_grpo_sleep"] >= 0.05
    assert "off_grpo/synced" not in mem.rows[1][1]


def test_v0_bound_monitor_goes_through_verls_compute_advantage_to_the_logger(ray_local):
    """v0: verl's own ``ray_trainer.compute_advantage`` (wrapped by the manager) feeds the bound monitor.

    Batch: group a rewards {1, 0}, group b {1, 1} (zero variance, masked), 2 response tokens each.
    r' = [[2, 1], [1, 1], [0.5, 1], [1, 1]] -> tv_token = ½·(1 + 0.5)/8 = 0.09375 over the pre-mask
    tokens; group a: unbiased std = sqrt(0.5), ε = 1e-6 -> coef = (1 − σ)/σ; 1 of 2 groups zero-var.
    """
    import numpy as np
    import torch

    from verl import DataProto
    from verl.trainer.ppo import ray_trainer
    from verl.utils.tracking import Tracking

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=2", "algorithm.off_grpo.zero_var_mask=true")
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    trainer = FakeV0Trainer(cfg, wg)
    trainer.init_workers(replicas)
    trainer.global_steps = 7
    rewards = torch.zeros(4, 2)
    rewards[:, 1] = torch.tensor([1.0, 0.0, 1.0, 1.0])
    data = DataProto.from_dict(
        tensors={
            "token_level_rewards": rewards,
            "response_mask": torch.ones(4, 2, dtype=torch.int64),
            "rollout_is_weights": torch.tensor([[2.0, 1.0], [1.0, 1.0], [0.5, 1.0], [1.0, 1.0]]),
        },
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)},
    )
    out = ray_trainer.compute_advantage(data, adv_estimator="off_grpo", num_repeat=2, config=cfg.algorithm)
    assert out.batch["response_mask"][2:].sum() == 0  # the estimator masked group b

    tracking = Tracking(project_name="p", experiment_name="e", default_backend=[])
    rows = []
    tracking.logger["memory"] = type("M", (), {"log": lambda self, data, step: rows.append((step, data))})()
    tracking.log(data={"actor/x": 1.0}, step=7)
    (step, row), sigma = rows[0], math.sqrt(0.5 + 1e-6)
    assert step == 7
    assert row["off_grpo/bound/tv_token"] == pytest.approx(0.09375)
    assert row["off_grpo/bound/mean_abs_log_rprime"] == pytest.approx(2 * math.log(2) / 8)  # |log 2| + |log ½|
    assert row["off_grpo/bound/coef_mean"] == pytest.approx((1 - sigma) / sigma)
    assert row["off_grpo/bound/zero_var_group_frac"] == pytest.approx(0.5)
    assert row["off_grpo/zero_var_masked_frac"] == pytest.approx(0.5)
    # verl's own estimators (under the plugin's loss) keep verl's advantage and log only the r' terms, which the
    # served-policy guard reads; over the rows the mask above left (group a: r' [[2, 1], [1, 1]], 4 tokens):
    # tv_token = ½·1/4, tv_seq = ½·(|2 − 1| + 0)/2, mean |log r'| = log 2 / 4, the largest response's log 2 / 2
    ray_trainer.compute_advantage(data, adv_estimator="grpo", num_repeat=2, config=cfg.algorithm)
    tracking.log(data={"actor/x": 2.0}, step=7)
    ours = {k: v for k, v in rows[1][1].items() if k.startswith("off_grpo/")}
    assert ours == pytest.approx({"off_grpo/bound/tv_token": 0.125, "off_grpo/bound/tv_seq": 0.25,
                                  "off_grpo/bound/mean_abs_log_rprime": math.log(2) / 4,
                                  "off_grpo/bound/max_seq_abs_log_rprime": math.log(2) / 2})


def v0_guard_case(cfg, rollout_is_weights):
    """A v0 trainer over the fake cluster (one server) and a 4-response, 2-token batch of two groups with these
    r' weights; returns (manager, trainer, advantage), the last running verl's compute_advantage on the batch."""
    import numpy as np
    import torch

    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    servers, workers, replicas, wg = make_cluster(n_servers=1)
    trainer = FakeV0Trainer(cfg, wg)
    manager = trainer.init_workers(replicas)
    rewards = torch.zeros(4, 2)
    rewards[:, 1] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(4, 2, dtype=torch.int64),
                 "rollout_is_weights": rollout_is_weights},
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)},
    )  # fmt: skip

    def advantage():
        return ray_trainer.compute_advantage(data, adv_estimator="off_grpo", num_repeat=2, config=cfg.algorithm)

    return manager, trainer, advantage


@pytest.mark.parametrize("limit, verify", [(1.0, False), (0.0, False), (1.0, True)])
def test_v0_guard_stops_a_run_whose_engine_disagrees_right_after_a_sync(ray_local, limit, verify):
    """Through verl's compute_advantage: a batch sampled right after a sync (rollout lag 0) with
    |log r'| = log 1e4 ≈ 9.2 per token (what an engine that lost its weights gives) stops the run
    before the update, and so does the same batch at lag 1 (after a skipped slot, where a broken
    sleep/wake shows) under a lagged limit of 5.0 when the exact served-weights check is off; with
    it on (default) the lagged batch only logs off_grpo/guard/lagged_over_limit = 1 (the check itself
    stops a wrong engine); with every limit 0 both pass."""
    import torch

    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=2",
                      f"algorithm.off_grpo.max_log_rprime_after_sync={limit}",
                      f"algorithm.off_grpo.max_seq_log_rprime_after_sync={limit}",
                      f"algorithm.off_grpo.max_log_rprime_lagged={5.0 if limit else 0.0}",
                      f"algorithm.off_grpo.verify_served_weights={verify}")  # fmt: skip
    manager, trainer, advantage = v0_guard_case(cfg, torch.full((4, 2), 1e-4))

    manager.update_weights(0)  # the first slot syncs: step 1's batch has lag 0
    trainer.global_steps = 1
    assert manager.schedule.rollout_lag_of(1) == 0
    if limit:
        with pytest.raises(ServedPolicyError, match=r"step 1: .* 9\.21"):
            advantage()
    else:
        advantage()
    manager.sleep_replicas()
    manager.update_weights(1)  # v=2: skipped, step 2's batch has lag 1
    trainer.global_steps = 2
    assert manager.schedule.rollout_lag_of(2) == 1 and manager.step_metrics(1)["off_grpo/synced"] == 0.0
    if limit and not verify:
        with pytest.raises(ServedPolicyError, match=r"step 2: .*rollout lag 1.* 9\.21"):
            advantage()
    else:
        advantage()
    if verify:  # the served-weights check ran in the slot; the r' limit only warned, logged with step 2
        from verl_offgrpo.sync.alpha_guard import LAGGED_OVER_LIMIT

        assert manager.step_metrics(1)["off_grpo/weights_verified"] == 1.0
        assert tracking_merge.PENDING_METRICS[2][LAGGED_OVER_LIMIT] == 1.0


@pytest.mark.parametrize("seq_limit", [1.0, 0.0])
def test_v0_guard_stops_a_lag_0_batch_with_one_response_far_from_the_trainer(ray_local, seq_limit):
    """One engine among several on other weights moves the lag-0 batch's mean by its share only: through verl's
    compute_advantage, 4 responses of 2 tokens, one with |log r'| = 1.5 per token and three at 0: the batch's mean
    3/8 = 0.375 passes max_log_rprime_after_sync = 0.5, that response's 1.5 > max_seq_log_rprime_after_sync = 1.0
    stops the run (0 turns it off); the same batch at lag 1 passes (drift per response is a lag's to have)."""
    import torch

    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=2",
                      f"algorithm.off_grpo.max_seq_log_rprime_after_sync={seq_limit}")  # fmt: skip
    weights = torch.ones(4, 2)
    weights[0] = math.exp(-1.5)
    manager, trainer, advantage = v0_guard_case(cfg, weights)

    manager.update_weights(0)
    trainer.global_steps = 1
    if seq_limit:
        with pytest.raises(ServedPolicyError, match=r"step 1: .*one response's mean .* 1\.5 \(> "
                                                    r"algorithm\.off_grpo\.max_seq_log_rprime_after_sync=1\.0; the "
                                                    r"batch's is 0\.375\)"):
            advantage()
    else:
        advantage()
    manager.sleep_replicas()
    manager.update_weights(1)  # skipped: step 2's batch has lag 1
    trainer.global_steps = 2
    assert manager.schedule.rollout_lag_of(2) == 1
    advantage()


def test_v0_manager_without_trainer_is_an_error(ray_local):
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=4")
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    with pytest.raises(RuntimeError, match="must be built by a verl trainer"):
        cm.LaggedCheckpointManager(
            config=omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine),
            actor_wg=wg,
            replicas=replicas,
        )


def test_override_rejects_a_server_without_the_hooks(ray_local):
    @ray.remote(num_cpus=0)
    class Bare:
        pass

    with pytest.raises(Exception, match="sleep-level override"):
        vllm_sleep.keep_weights_across_sleep([FakeReplica([Bare.remote()])])


# ----------------------------------------------------------------------------- V1 mode
def test_v1_mode_is_registered_and_presents_sync():
    register_sync_hooks()
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    from verl_offgrpo.sync.trainer_v1 import OffGRPOSyncTrainer

    cls = get_trainer_cls(verl_offgrpo.TRAINER_MODE)
    assert cls is OffGRPOSyncTrainer and issubclass(cls, PPOTrainerSync)
    bare = cls.__new__(cls)
    bare.trainer_mode = "off_grpo_sync"  # what PPOTrainer.__init__ does
    assert bare.trainer_mode == "sync" and bare.configured_trainer_mode == "off_grpo_sync"


def test_v1_construction_uses_the_sync_paths():
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from verl_offgrpo.config import OffGRPOConfigError

    register_sync_hooks()
    # verl's local updates run at v = 1 only (at v > 1 their sub-batches' lag is one the guard does not count)
    cfg = compose_cfg("+trainer.v1.sync.parameter_sync_step=2")
    trainer = get_trainer_cls(cfg.trainer.v1.trainer_mode)(config=cfg)
    assert trainer.trainer_mode == "sync"
    assert type(trainer.replay_buffer) is ReplayBuffer and trainer.replay_buffer.trainer_mode == "sync"
    assert trainer.parameter_sync_step == 2  # read from trainer.v1.sync
    assert trainer.off_grpo_knobs.sync_period == 1
    with pytest.raises(OffGRPOConfigError, match="does not combine with trainer.v1.sync.parameter_sync_step=2"):
        get_trainer_cls(cfg.trainer.v1.trainer_mode)(config=compose_cfg(
            "algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.rollout_schedule=per_step",
            "+trainer.v1.sync.parameter_sync_step=2"))
    # verl never reads trainer.v1.off_grpo_sync (the mode presents itself as sync): refused before any worker
    cfg = compose_cfg("algorithm.off_grpo.sync_period=4", "+trainer.v1.off_grpo_sync.parameter_sync_step=3")
    with pytest.raises(OffGRPOConfigError, match="trainer.v1.off_grpo_sync.parameter_sync_step=3 is not where verl's trainer reads"):
        get_trainer_cls(cfg.trainer.v1.trainer_mode)(config=cfg)


def test_v1_mode_polls_for_finished_groups_faster_than_verls_sync_mode():
    """The plugin's mode looks at the TransferQueue every SAMPLE_POLL_S; verl's own sync mode keeps 2 s."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    from verl_offgrpo.sync.trainer_v1 import SAMPLE_POLL_S

    register_sync_hooks()
    assert SAMPLE_POLL_S == 0.1
    ours = get_trainer_cls(verl_offgrpo.TRAINER_MODE)(config=compose_cfg("algorithm.off_grpo.sync_period=4"))
    assert ours.replay_buffer.poll_interval == SAMPLE_POLL_S
    plain = compose_cfg("trainer.v1.trainer_mode=sync", "algorithm.adv_estimator=grpo",
                        "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla", "algorithm.off_grpo.zero_var_mask=false")
    verls = get_trainer_cls("sync")(config=plain)
    assert verls.replay_buffer.poll_interval == 2.0


def test_v1_no_sleep_sets_free_cache_engine():
    from verl.trainer.ppo.v1 import get_trainer_cls

    register_sync_hooks()
    cfg = compose_cfg("algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.rollout_schedule=per_step",
                      "algorithm.off_grpo.keep_weights=no_sleep")
    get_trainer_cls(cfg.trainer.v1.trainer_mode)(config=cfg)
    assert cfg.actor_rollout_ref.rollout.free_cache_engine is False


def test_v1_rejects_bad_config_before_any_worker():
    from verl.trainer.ppo.v1 import get_trainer_cls

    register_sync_hooks()
    cfg = compose_cfg("algorithm.off_grpo.sync_period=4", "actor_rollout_ref.model.lora_rank=8")
    with pytest.raises(ValueError, match="LoRA"):
        get_trainer_cls(cfg.trainer.v1.trainer_mode)(config=cfg)


def v1_trainer_on_fake_cluster(monkeypatch, *overrides, schedule="per_step", **cluster):
    """The off_grpo_sync trainer (v=4, ``rollout_schedule=schedule``) whose ``_setup`` leaves what verl's does, minus the GPU work:
    the fake cluster's worker group and verl's checkpoint manager over its replicas, asleep.
    Returns ``(trainer, servers, actor worker group)``; ``trainer.init()`` is the caller's."""
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    register_sync_hooks()
    cfg = compose_cfg("algorithm.off_grpo.sync_period=4", f"algorithm.off_grpo.rollout_schedule={schedule}", *overrides)
    trainer = get_trainer_cls(cfg.trainer.v1.trainer_mode)(config=cfg)
    servers, workers, replicas, wg = make_cluster(**cluster)
    engine_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)

    def fake_setup(self):
        self.actor_rollout_wg = wg
        self.checkpoint_manager = CheckpointEngineManager(config=engine_cfg, actor_wg=wg, replicas=replicas)
        self.checkpoint_manager.sleep_replicas()
        self.global_steps = 0
        self.total_training_steps = 12

    monkeypatch.setattr(PPOTrainer, "_setup", fake_setup)
    return trainer, servers, wg


def test_v1_hooks_drive_the_lagged_manager(ray_local, monkeypatch):
    from verl_offgrpo.sync.lagged_manager import LaggedCheckpointManager

    trainer, servers, wg = v1_trainer_on_fake_cluster(monkeypatch, "trainer.test_freq=6")
    trainer.init()  # _setup + on_init_end
    assert isinstance(trainer.checkpoint_manager, LaggedCheckpointManager)
    assert trainer.checkpoint_manager.trainer is trainer and trainer.checkpoint_manager.trainer_kind == "v1"
    assert [st["sleep_level"] for st in ray.get([s.__ray_call__.remote(vllm_sleep.read_server_state) for s in servers])] == [1, 1]
    trainer.curr_step_profile = False

    served = {1: 0, 2: 0, 3: 0, 4: 0, 5: 4, 6: 4, 7: 6, 8: 6, 9: 8, 10: 8, 11: 8, 12: 8}
    logged = {}
    for s in range(1, 13):
        trainer.global_steps = s
        trainer.timing_raw = {}
        assert ray.get([srv.generate.remote() for srv in servers]) == [f"pi_{served[s]}"] * 2
        trainer.on_sample_end()  # sleep
        trainer.on_step_end()
        assert "update_weights" in trainer.timing_raw
        logged[s] = trainer._consume_sync_metrics()
    # slots 0, 4, 6 (validation follows, test_freq=6), 8, 12 (6 and 12 are validation steps too)
    assert [c[0] for c in wg.sync_calls] == [0, 4, 6, 8, 12]
    assert [logged[s]["off_grpo/synced"] for s in range(1, 13)] == [0, 0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 1]
    assert [logged[s]["off_grpo/lag"] for s in range(1, 13)] == [1, 2, 3, 0, 1, 0, 1, 0, 1, 2, 3, 0]
    assert [logged[s]["off_grpo/rollout_lag"] for s in range(1, 13)] == [0, 1, 2, 3, 0, 1, 0, 1, 0, 1, 2, 3]
    assert all("timing_s/off_grpo_sync" in logged[s] and "timing_s/off_grpo_sleep" in logged[s] for s in logged)
    # the served-weights check ran on every skipped slot and passed (honest engines)
    assert [logged[s]["off_grpo/weights_verified"] for s in range(1, 13)] == [1 - logged[s]["off_grpo/synced"] for s in range(1, 13)]
    assert ray.get(servers[0].__ray_call__.remote(lambda srv: srv.global_steps)) == 12
    # V1's _validate wakes with update_weights() (no step) after a colocated reward model: no transfer
    trainer.checkpoint_manager.sleep_replicas()
    trainer.checkpoint_manager.update_weights()
    assert len(wg.sync_calls) == 5 and ray.get(servers[0].generate.remote()) == "pi_12"


@pytest.mark.parametrize("overrides, windowed", [([], True), (["trainer.test_freq=5", "algorithm.off_grpo.sync_before_validate=false"], False)])
def test_v1_auto_schedule_agrees_in_the_trainer_and_the_manager(ray_local, monkeypatch, overrides, windowed):
    """rollout_schedule=auto, resolved separately by the V1 mode and the lagged manager it builds: both take
    the window, or both fall back to per_step (validation without a sync), and vLLM's sleep follows: verl's
    level 2 for the window, the level-1 override that keeps α for per_step."""
    trainer, servers, wg = v1_trainer_on_fake_cluster(monkeypatch, *overrides, schedule="auto")
    trainer.init()
    assert trainer.windowed is windowed and trainer.checkpoint_manager.windowed is windowed
    levels = [st["sleep_level"] for st in ray.get([s.__ray_call__.remote(vllm_sleep.read_server_state) for s in servers])]
    assert levels == ([2, 2] if windowed else [1, 1])


@pytest.mark.parametrize("verify", [True, False])
def test_v1_guard_runs_in_compute_advantage_with_the_managers_lag(ray_local, monkeypatch, caplog, verify):
    """V1: _compute_advantage hands the bound-monitor metrics to the r' guard with the batch's rollout lag:
    step 1 (right after the first sync) with |log r'| 9.2 stops the run. Step 2 (lag 1, after a skipped
    slot) with 9.2: with the exact served-weights check on (default) a warning and
    off_grpo/guard/lagged_over_limit = 1; with it off the lagged limit stops the run. A real lag's 0.3 passes."""
    from verl.trainer.ppo.v1 import PPOTrainerSync

    import verl_offgrpo.sync.advantage_v1 as zvm
    from verl_offgrpo.sync import alpha_guard
    from verl_offgrpo.sync.alpha_guard import LAGGED_OVER_LIMIT, STATISTIC, ServedPolicyError

    trainer, servers, wg = v1_trainer_on_fake_cluster(monkeypatch, f"algorithm.off_grpo.verify_served_weights={verify}")
    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", lambda self, batch, metrics: batch, raising=False)
    monkeypatch.setattr(zvm, "after_advantage_v1", lambda tq, batch, algorithm_cfg: {STATISTIC: 9.2})
    trainer.init()  # the first slot syncs
    trainer.global_steps = 1
    metrics = {}
    with pytest.raises(ServedPolicyError, match="step 1"):
        trainer._compute_advantage("batch", metrics)
    assert metrics[STATISTIC] == 9.2  # logged before the guard stops the run
    trainer.timing_raw, trainer.curr_step_profile = {}, False
    trainer.on_sample_end()
    trainer.on_step_end()  # slot 1: skipped (v=4)
    assert trainer._consume_sync_metrics().get("off_grpo/weights_verified") == (1.0 if verify else None)
    trainer.global_steps = 2
    if verify:
        metrics = {}
        with caplog.at_level(logging.WARNING, logger=alpha_guard.__name__):
            assert trainer._compute_advantage("batch", metrics) == "batch"
        assert metrics[LAGGED_OVER_LIMIT] == 1.0
        assert any("step 2: lagged batch (rollout lag 1)" in r.getMessage() for r in caplog.records)
    else:
        with pytest.raises(ServedPolicyError, match="step 2: .*rollout lag 1"):
            trainer._compute_advantage("batch", {})
    monkeypatch.setattr(zvm, "after_advantage_v1", lambda tq, batch, algorithm_cfg: {STATISTIC: 0.3})
    metrics = {}
    assert trainer._compute_advantage("batch", metrics) == "batch"
    assert metrics.get(LAGGED_OVER_LIMIT) == (0.0 if verify else None)


def test_v1_weight_check_stops_the_run_before_the_lagged_rollout(ray_local, monkeypatch):
    """V1 trainer mode, replicas whose engines sleep at level 2 in spite of the override: on_step_end of
    step 1 (a skipped slot at v=4) raises ServedPolicyError for step 2's rollout."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    trainer, servers, wg = v1_trainer_on_fake_cluster(monkeypatch, tp=2, force_level2=True)
    trainer.init()
    trainer.global_steps = 1
    trainer.timing_raw, trainer.curr_step_profile = {}, False
    assert ray.get([srv.generate.remote() for srv in servers]) == ["pi_0"] * 2
    trainer.on_sample_end()
    with pytest.raises(ServedPolicyError, match=r"^verl-offgrpo: step 2: .*replica 0 of 2, TP rank 0: 4 of 4 parameter"):
        trainer.on_step_end()


# ----------------------------------------------------------------------------- config
def test_hydra_v0_composition_loads_the_manager_class():
    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=4")
    assert cfg.trainer.use_v1 is False
    cls = load_class_from_fqn(cfg.actor_rollout_ref.rollout.checkpoint_manager_class, "CheckpointEngineManager")
    assert issubclass(cls, CheckpointEngineManager) and cls.__name__ == "LaggedCheckpointManager"
    assert check_sync_config(cfg).sync_period == 4
    # and the V1 default of the shipped yaml
    assert compose_cfg().trainer.v1.trainer_mode == verl_offgrpo.TRAINER_MODE


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["actor_rollout_ref.rollout.name=sglang"], "vllm only"),
        (["actor_rollout_ref.model.lora_rank=16"], "LoRA"),
        (["actor_rollout_ref.model.lora.rank=16"], "LoRA"),
        (["actor_rollout_ref.hybrid_engine=false"], "hybrid"),
        (["actor_rollout_ref.actor.strategy=megatron"], r"strategy in \('fsdp', 'fsdp2'\) only \(got 'megatron'\)"),
        (["trainer.v1.trainer_mode=sync"], "trainer_mode=off_grpo_sync"),
        (["trainer.v1.trainer_mode=colocate_async"], "trainer_mode=off_grpo_sync"),
        (["trainer.use_v1=false"], "checkpoint_manager_class"),
        ([*V0_OVERRIDES, "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"], "backend=naive"),
        (["actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"], r"backend=naive \(got 'nccl'\)"),  # V1 too
        (["actor_rollout_ref.rollout.checkpoint_engine.backend=nixl"], r"backend=naive \(got 'nixl'\)"),
        ([*V0_OVERRIDES, "algorithm.off_grpo.keep_weights=no_sleep"], "free_cache_engine=false"),
        (["algorithm.off_grpo.keep_weights=sleep_level9"], "keep_weights"),
        (["algorithm.off_grpo.empty_cache_on_skip=never"], "empty_cache_on_skip must be one of"),
        (["+actor_rollout_ref.rollout.enable_sleep_mode=false"], "enable_sleep_mode"),
    ],
)
def test_configs_that_cannot_keep_alpha_are_rejected(overrides, match):
    cfg = compose_cfg("algorithm.off_grpo.sync_period=4", *overrides)
    with pytest.raises(SyncConfigError, match=match):
        check_sync_config(cfg)


def test_period_one_accepts_anything_verl_accepts():
    for overrides in (["actor_rollout_ref.rollout.name=sglang"], ["trainer.v1.trainer_mode=sync"], ["trainer.use_v1=false"],
                      ["actor_rollout_ref.actor.strategy=megatron"]):
        assert check_sync_config(compose_cfg(*overrides)).sync_period == 1
    with pytest.raises(SyncConfigError, match="sync_period"):
        check_sync_config(compose_cfg("algorithm.off_grpo.sync_period=0"))


# ----------------------------------------------------------------------------- import-time behaviour
def _run(code):
    env = dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_sync_package_import_is_light():
    out = _run(
        "import sys, verl_offgrpo.sync as s; s.register_sync_hooks(); s.register_sync_hooks();"
        "print(sorted(m for m in ('verl', 'vllm', 'torch', 'ray') if m in sys.modules));"
        "print(sorted(f.fullname for f in sys.meta_path if type(f).__name__ == '_PostImportHook'))"
    )
    assert out.splitlines() == ["[]", str(["verl.trainer.ppo.v1"])]


@pytest.mark.slow
def test_hook_registers_the_mode_when_v1_is_imported():
    out = _run(
        "import sys, verl; from verl_offgrpo.sync import register_sync_hooks; register_sync_hooks();"
        "assert 'verl.trainer.ppo.v1' not in sys.modules;"
        "from verl.trainer.ppo.v1 import get_trainer_cls; c = get_trainer_cls('off_grpo_sync');"
        "import verl.trainer.ppo.v1 as m; assert type(m.__loader__).__name__ != '_LoaderWithCallback';"
        "print(c.__name__, 'vllm' in sys.modules, sum(getattr(f, 'fullname', '') == 'verl.trainer.ppo.v1' for f in sys.meta_path))"
    )
    assert out.split()[-3:] == ["OffGRPOSyncTrainer", "False", "0"]


@pytest.mark.slow
def test_importing_the_trainer_mode_first_registers_it_without_a_warning():
    """``import verl_offgrpo.sync.trainer_v1`` before verl's V1 trainer: its own import of verl's trainer
    fires the plugin's hook while it is half-imported; the hook leaves the registration to the module
    (it was a PatchWarning, and a PatchError in a job that selects the plugin)."""
    out = subprocess.run(
        [sys.executable, "-c",
         "import warnings; from verl_offgrpo.patches import PatchWarning; warnings.simplefilter('error', PatchWarning);"
         "import verl_offgrpo.sync.trainer_v1 as t; from verl.trainer.ppo.v1 import get_trainer_cls;"
         "print(get_trainer_cls('off_grpo_sync') is t.OffGRPOSyncTrainer)"],
        capture_output=True, text=True, timeout=240)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "True"


def test_the_earlier_v0_manager_path_still_loads():
    """Configs written for earlier releases name verl_offgrpo.sync.checkpoint_manager_v0: verl's loader
    still finds the same class there."""
    old = load_class_from_fqn("verl_offgrpo.sync.checkpoint_manager_v0.LaggedCheckpointManager", "CheckpointEngineManager")
    assert old is cm.LaggedCheckpointManager and V0_MANAGER_FQN == "verl_offgrpo.sync.lagged_manager.LaggedCheckpointManager"


# ----------------------------------------------------------------------------- the guard with verl's estimators
def _garbage_rprime_batch():
    """Two groups of 2 responses, 2 tokens each, r' = 1e-4 on every token: mean |log r'| = log 1e4 ≈ 9.21 per
    token, what an engine serving weights other than π_k gives right after a sync."""
    import numpy as np
    import torch

    from verl import DataProto

    rewards = torch.zeros(4, 2)
    rewards[:, 1] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(4, 2, dtype=torch.int64),
                 "rollout_is_weights": torch.full((4, 2), 1e-4)},
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)},
    )  # fmt: skip


def test_v0_guard_also_watches_a_lagged_job_on_verls_estimator(ray_local):
    """The off_grpo loss over verl's grpo advantage at v=2 (accepted, with a warning): the batch of step 1,
    sampled right after the first sync, with |log r'| = log 1e4 ≈ 9.21 per token stops the run in verl's
    compute_advantage, as it does with the plugin's estimator; it was passed on unchecked."""
    from verl.trainer.ppo import ray_trainer

    from verl_offgrpo.sync.alpha_guard import STATISTIC, ServedPolicyError

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=2", "algorithm.adv_estimator=grpo")
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    trainer = FakeV0Trainer(cfg, wg)
    manager = trainer.init_workers(replicas)
    manager.update_weights(0)
    trainer.global_steps = 1
    with pytest.raises(ServedPolicyError, match=r"step 1: .* 9\.21"):
        ray_trainer.compute_advantage(_garbage_rprime_batch(), adv_estimator="grpo", num_repeat=2, config=cfg.algorithm)
    assert tracking_merge.PENDING_METRICS[1][STATISTIC] == pytest.approx(math.log(1e4))


@pytest.mark.parametrize("schedule", ["window", "per_step"])
def test_v1_guard_also_watches_a_lagged_job_on_verls_estimator(ray_local, monkeypatch, schedule):
    """V1, the off_grpo loss over verl's grpo advantage at v=4: _compute_advantage reads r' from the
    TransferQueue and the guard stops step 1 (lag 0) at mean |log r'| = log 1e4 ≈ 9.21 per token; with the
    window the exact served-weights check is off, so nothing else would. r' = e^{±0.5} (0.5 per token) passes."""
    import torch
    import transfer_queue
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from verl_offgrpo.sync.alpha_guard import STATISTIC, ServedPolicyError

    trainer, servers, wg = v1_trainer_on_fake_cluster(monkeypatch, "algorithm.adv_estimator=grpo", schedule=schedule)
    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", lambda self, batch, metrics: batch, raising=False)
    mask = torch.nested.as_nested_tensor([torch.ones(2, dtype=torch.int64)] * 4, layout=torch.jagged)
    store = {"response_mask": mask, "loss_mask": mask}
    monkeypatch.setattr(transfer_queue, "kv_batch_get",
                        lambda keys, partition_id, select_fields: {k: store[k] for k in select_fields})
    batch = SimpleNamespace(keys=["k0", "k1", "k2", "k3"], partition_id="train", tags=[{}] * 4,
                            fields=["response_mask", "loss_mask", "rollout_is_weights"])
    trainer.init()
    assert trainer.checkpoint_manager.verify_weights is (schedule == "per_step")
    trainer.global_steps = 1
    store["rollout_is_weights"] = torch.nested.as_nested_tensor([torch.full((2,), 1e-4)] * 4, layout=torch.jagged)
    metrics = {}
    with pytest.raises(ServedPolicyError, match=r"step 1: .* 9\.21"):
        trainer._compute_advantage(batch, metrics)
    assert metrics[STATISTIC] == pytest.approx(math.log(1e4))
    honest = [torch.tensor([math.exp(0.5), math.exp(-0.5)])] * 4
    store["rollout_is_weights"] = torch.nested.as_nested_tensor(honest, layout=torch.jagged)
    metrics = {}
    assert trainer._compute_advantage(batch, metrics) is batch
    assert metrics[STATISTIC] == pytest.approx(0.5)


@pytest.mark.parametrize("overrides, guarded", [
    ([], True),  # the shipped yaml: the off_grpo loss, r' untruncated
    (["actor_rollout_ref.actor.policy_loss.loss_mode=rec"], True),
    (["algorithm.off_grpo.allow_truncated_rprime=true"], True),  # r' then read off the log-probs
    (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla", "algorithm.off_grpo.sync_period=1"], False),
])
def test_verls_advantage_is_guarded_only_under_the_plugins_loss(overrides, guarded):
    from verl_offgrpo.config.readers import guards_verls_advantage

    assert guards_verls_advantage(compose_cfg("algorithm.adv_estimator=grpo", *overrides)) is guarded


def _truncated_weights_store(log_rprime: float, n: int = 4):
    """``n`` responses of 2 tokens: verl's ``rollout_is_weights`` all 1 (batch-normalised weights look perfect
    whatever the engine served), while π_k's and α's log-probs differ by ``log_rprime`` per token."""
    import torch

    def nested(value, dtype=torch.float32):
        return torch.nested.as_nested_tensor([torch.full((2,), value, dtype=dtype)] * n, layout=torch.jagged)

    mask = nested(1, torch.int64)
    return {"response_mask": mask, "loss_mask": mask, "rollout_is_weights": nested(1.0),
            "old_log_probs": nested(-0.25 + log_rprime), "rollout_log_probs": nested(-0.25)}


@pytest.mark.parametrize("schedule", ["window", "per_step"])
def test_v1_guard_reads_verls_estimator_off_the_log_probs_with_allow_truncated_rprime(ray_local, monkeypatch,
                                                                                       schedule):
    """``allow_truncated_rprime`` lets verl truncate, reject or normalise its ``rollout_is_weights``: under the
    plugin's loss with verl's grpo advantage the guard reads r' = π_k/α off the log-probs, as the plugin's estimators
    do. Weights of 1 with log π_k − log α = log 1e4 ≈ 9.21 a token right after a sync stop the run; a drift of 0.5
    passes and logs 0.5. A TransferQueue read that fails stops the step (the guard must not pass an unread batch)."""
    import torch  # noqa: F401
    import transfer_queue
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from verl_offgrpo.sync.alpha_guard import STATISTIC, ServedPolicyError

    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", lambda self, batch, metrics: batch, raising=False)
    trainer, _, _ = v1_trainer_on_fake_cluster(monkeypatch, "algorithm.adv_estimator=grpo",
                                               "algorithm.off_grpo.allow_truncated_rprime=true",
                                               "algorithm.rollout_correction.rollout_is_threshold=2.0", schedule=schedule)
    store = _truncated_weights_store(math.log(1e4))
    monkeypatch.setattr(transfer_queue, "kv_batch_get",
                        lambda keys, partition_id, select_fields: {k: store[k] for k in select_fields})
    batch = SimpleNamespace(keys=["k0", "k1", "k2", "k3"], partition_id="train", tags=[{}] * 4, fields=list(store))
    trainer.init()
    trainer.global_steps = 1
    with pytest.raises(ServedPolicyError, match=r"step 1: .* 9\.21"):
        trainer._compute_advantage(batch, metrics := {})
    assert metrics[STATISTIC] == pytest.approx(math.log(1e4), rel=1e-5)
    store.update(_truncated_weights_store(0.5))
    assert trainer._compute_advantage(batch, metrics := {}) is batch
    assert metrics[STATISTIC] == pytest.approx(0.5, rel=1e-5)

    def broken(**kwargs):
        raise RuntimeError("storage unit gone")

    monkeypatch.setattr(transfer_queue, "kv_batch_get", broken)
    with pytest.raises(RuntimeError, match="storage unit gone"):
        trainer._compute_advantage(batch, {})


def test_v0_guard_reads_verls_estimator_off_the_log_probs_with_allow_truncated_rprime(ray_local):
    """The v0 twin: verl's grpo under the plugin's loss with ``allow_truncated_rprime``, weights of 1 and
    log π_k − log α = log 1e4 a token right after a sync: the wrapped ``compute_advantage`` stops the step."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    cfg = compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=2", "algorithm.adv_estimator=grpo",
                      "algorithm.off_grpo.allow_truncated_rprime=true",
                      "algorithm.rollout_correction.rollout_is_threshold=2.0")
    servers, workers, replicas, wg = make_cluster(n_servers=1)
    trainer = FakeV0Trainer(cfg, wg)
    manager = trainer.init_workers(replicas)
    manager.update_weights(0)
    trainer.global_steps = 1
    rewards = torch.zeros(4, 2)
    rewards[:, 1] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(4, 2, dtype=torch.int64),
                 "rollout_is_weights": torch.ones(4, 2), "old_log_probs": torch.full((4, 2), math.log(1e-4) - 0.25),
                 "rollout_log_probs": torch.full((4, 2), -0.25)},
        non_tensors={"uid": np.array(["a", "a", "b", "b"], dtype=object)})
    with pytest.raises(ServedPolicyError, match=r"step 1: .* 9\.21"):
        ray_trainer.compute_advantage(data, adv_estimator="grpo", num_repeat=2, config=cfg.algorithm)


def test_v1_skip_old_log_prob_per_step_follows_the_sync_schedule_and_the_exact_check(ray_local, monkeypatch, caplog):
    """rollout_schedule=per_step, v=4, ``skip_old_log_prob``: verl's pass runs in bypass mode on the lagged
    batches by the sync schedule's lag (step 2), not on step 1 (right after the sync); once the exact
    served-weights check is off (it switches itself off where it cannot record), a lagged batch keeps verl's
    pass, since the guard's lagged limit, which reads r' before the update, is then its only check."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    seen = {}

    def old_log_prob(self, batch, metrics=None):
        seen[self.global_steps] = bool(self.config.algorithm.rollout_correction.bypass_mode)
        return batch

    monkeypatch.setattr(PPOTrainer, "_compute_old_log_prob", old_log_prob)
    trainer, servers, wg = v1_trainer_on_fake_cluster(
        monkeypatch, "algorithm.off_grpo.skip_old_log_prob=true", "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "trainer.test_freq=-1")  # fmt: skip
    trainer.init()
    trainer.curr_step_profile = False
    batch = [f"row{i}" for i in range(8)]  # B·n rows: one optimizer step
    for step in range(1, 4):
        trainer.global_steps = step
        if step == 3:
            trainer.checkpoint_manager.verify_weights = False
        with caplog.at_level(logging.WARNING, logger="verl_offgrpo.sync.trainer_v1"):
            trainer._compute_old_log_prob(batch, {})
        trainer.timing_raw = {}
        trainer.on_sample_end()
        trainer.on_step_end()
        trainer._consume_sync_metrics()
    assert seen == {1: False, 2: True, 3: False}
    assert any("the exact served-weights check does not reach every vLLM worker" in r.getMessage() for r in caplog.records)
