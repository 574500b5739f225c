"""Reference reset π_ref ← π_θ every R steps (verl_offgrpo/ref_reset): schedule, in-place copy, checks.

CPU only. FSDP runs in-process with gloo at world size 1 (FSDP2; FSDP1 with ``device_id=cpu``) and,
for the genuinely sharded path, in two subprocesses at world size 2 (this file run as a script).
FSDP1 ``CPUOffload(offload_params=True)`` (verl's reference wrapping) cannot run on a CPU-only host
(its lazy init pins memory, which needs an accelerator); the tests emulate verl's offload instead
(``_local_shard`` as a separate tensor object on the same storage, as ``offload_fsdp_model_to_cpu``
leaves it). FSDP2's ``CPUOffloadPolicy(pin_memory=False)`` does run on CPU and is tested.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from verl_offgrpo.config import RefResetConfigError, check_ref_reset_config
from verl_offgrpo.ref_reset import RefResetState, reference_step, should_reset
from verl_offgrpo.ref_reset.param_copy import RefResetError, copy_params_into_, module_layout

VOCAB, HIDDEN = 32, 12


# ----------------------------------------------------------------------------- toy policy
class TinyPolicy(nn.Module):
    def __init__(self, seed: int, dtype=torch.float32, odd: bool = False):
        super().__init__()
        torch.manual_seed(seed)
        h = HIDDEN + (1 if odd else 0)
        self.embed = nn.Embedding(VOCAB, h)
        self.block = nn.Sequential(nn.Linear(h, h), nn.Tanh(), nn.Linear(h, h))
        self.head = nn.Linear(h, VOCAB)
        self.to(dtype)

    def forward(self, ids):
        x = self.embed(ids)
        return self.head(x + self.block(x)).float()


def token_log_probs(model, ids):
    """log π(ids[t+1] | ids[:t+1]) per token, like verl's log_prob of a response."""
    logits = model(ids[:, :-1])
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def toy_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (4, 9), generator=g)


# ----------------------------------------------------------------------------- schedule
def test_schedule_formula():
    assert [s for s in range(1, 13) if should_reset(s, 3)] == [3, 6, 9, 12]
    assert [s for s in range(1, 13) if should_reset(s, 1)] == list(range(1, 13))
    assert not any(should_reset(s, 0) for s in range(0, 50))
    assert not should_reset(0, 3)  # the init slot never resets
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError):
            should_reset(3, bad)


def test_reference_step_during_step():
    # R=3: steps 1..3 use π_0, 4..6 use π_3, 7..9 use π_6
    assert [reference_step(s, 3) for s in range(1, 10)] == [0, 0, 0, 3, 3, 3, 6, 6, 6]
    assert [reference_step(s, 0) for s in range(1, 5)] == [0, 0, 0, 0]


def test_state_idempotent_per_step():
    st = RefResetState(period=3)
    out = []
    for s in [0, 1, 2, 3, 3, 4, 5, 6, 6, 2, 7]:  # repeated/earlier steps are ignored
        d = st.decide(s)
        if d is not None:
            st.commit(s, d)
        out.append(d)
    assert out == [None, False, False, True, None, False, False, True, None, None, False]
    assert st.num_resets == 2 and st.last_reset_step == 6


# ----------------------------------------------------------------------------- plain copy + KL
def test_copy_makes_reference_equal_to_actor_and_kl_zero():
    from verl.trainer.ppo.core_algos import kl_penalty

    actor, ref = TinyPolicy(0), TinyPolicy(1)
    ids = toy_batch()
    ref_storage = {n: p.data_ptr() for n, p in ref.named_parameters()}
    with torch.no_grad():
        lp_a, lp_r = token_log_probs(actor, ids), token_log_probs(ref, ids)
    assert kl_penalty(lp_a, lp_r, "low_var_kl").abs().max() > 1e-3  # different before
    report = copy_params_into_(ref, actor, verify=True)
    assert report["path"] == "plain" and report["max_abs_diff"] == 0.0
    assert report["tensors"] == len(list(actor.parameters()))
    assert {n: p.data_ptr() for n, p in ref.named_parameters()} == ref_storage  # in place
    with torch.no_grad():
        lp_a, lp_r = token_log_probs(actor, ids), token_log_probs(ref, ids)
        assert torch.equal(actor(ids), ref(ids))
    for kind in ("kl", "abs", "mse", "low_var_kl", "k3"):
        assert torch.count_nonzero(kl_penalty(lp_a, lp_r, kind)) == 0, kind
    # the actor keeps training: the reference does not follow (a copy, not an alias)
    with torch.no_grad():
        actor.head.bias.add_(1.0)
    assert not torch.equal(actor.head.bias, ref.head.bias)


def test_copy_casts_into_lower_precision_reference():
    actor, ref = TinyPolicy(0, torch.float32), TinyPolicy(1, torch.bfloat16)
    copy_params_into_(ref, actor)
    for (n, pr), (_, pa) in zip(ref.named_parameters(), actor.named_parameters()):
        assert pr.dtype == torch.bfloat16
        assert torch.equal(pr, pa.to(torch.bfloat16)), n


def test_name_and_shape_mismatch_raise_before_writing():
    actor, ref = TinyPolicy(0), TinyPolicy(1, odd=True)
    before = {n: p.detach().clone() for n, p in ref.named_parameters()}
    with pytest.raises(RefResetError, match="shape"):
        copy_params_into_(ref, actor)
    assert all(torch.equal(before[n], p) for n, p in ref.named_parameters())  # nothing written

    other = nn.Sequential(nn.Linear(3, 3))
    with pytest.raises(RefResetError, match="names"):
        copy_params_into_(other, nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3)))
    with pytest.raises(RefResetError, match="same module"):
        copy_params_into_(actor, actor)


# ----------------------------------------------------------------------------- FSDP, world size 1 in-process
@pytest.fixture(scope="module")
def gloo_world_1(tmp_path_factory):
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    created = False
    if not dist.is_initialized():
        # a file store: no TCP port to pick and lose to another process
        store = tmp_path_factory.mktemp("gloo") / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
        created = True
    yield
    if created:
        dist.destroy_process_group()


def test_fsdp2_world1_with_cpu_offload_policy(gloo_world_1):
    from verl.trainer.ppo.core_algos import kl_penalty

    actor, ref = wrap_fsdp2(TinyPolicy(0)), wrap_fsdp2(TinyPolicy(1), offload=True)
    assert module_layout(actor) == module_layout(ref) == "fsdp2"
    ids = toy_batch()
    with torch.no_grad():
        ref(ids)  # lazy init, then resharded like after verl's compute_ref_log_prob
    report = copy_params_into_(ref, actor, verify=True)
    assert report["path"] == "fsdp2" and report["max_abs_diff"] == 0.0 and report["dst_devices"] == ["cpu"]
    with torch.no_grad():
        lp_a, lp_r = token_log_probs(actor, ids), token_log_probs(ref, ids)
    assert torch.equal(lp_a, lp_r)
    assert torch.count_nonzero(kl_penalty(lp_a, lp_r, "low_var_kl")) == 0


def test_fsdp1_world1_and_worker_entry(gloo_world_1):
    from verl_offgrpo.ref_reset.worker import reset_reference_on_worker

    actor, ref = wrap_fsdp1(TinyPolicy(0)), wrap_fsdp1(TinyPolicy(1))
    ids = toy_batch()
    with torch.no_grad():
        actor(ids), ref(ids)  # lazy init (sets _local_shard)
    emulate_verl_offload_fsdp1(ref)
    worker_dict = types.SimpleNamespace(worker_dict={"actor_rollout_ref": fake_arr_worker(actor, ref, "fsdp")})
    report = reset_reference_on_worker(worker_dict, verify=True)
    assert report["path"] == "fsdp1" and report["max_abs_diff"] == 0.0 and report["resets_on_worker"] == 1
    with torch.no_grad():
        assert torch.equal(actor(ids), ref(ids))


def test_worker_waits_for_the_device_before_reading_the_actor(gloo_world_1, monkeypatch):
    """verl's param offload copies the actor to host memory with non_blocking copies that nothing waits
    for on a skipped sync slot: the reset synchronizes the device before it reads the actor's tensors."""
    import verl.utils.device

    from verl_offgrpo.ref_reset import worker

    events = []
    fake_device = types.SimpleNamespace(is_available=lambda: True, synchronize=lambda: events.append("synchronize"),
                                        empty_cache=lambda: events.append("empty_cache"))  # fmt: skip
    monkeypatch.setattr(verl.utils.device, "get_torch_device", lambda: fake_device)
    real_copy = worker.copy_params_into_
    monkeypatch.setattr(worker, "copy_params_into_", lambda *a, **k: events.append("copy") or real_copy(*a, **k))
    actor, ref = wrap_fsdp1(TinyPolicy(0)), wrap_fsdp1(TinyPolicy(1))
    with torch.no_grad():
        actor(toy_batch()), ref(toy_batch())
    worker_dict = types.SimpleNamespace(worker_dict={"actor_rollout_ref": fake_arr_worker(actor, ref, "fsdp")})
    worker.reset_reference_on_worker(worker_dict)
    assert events == ["synchronize", "copy", "synchronize", "empty_cache"]


def test_fsdp_layout_mismatch_raises(gloo_world_1):
    with pytest.raises(RefResetError, match="mismatched sharding"):
        copy_params_into_(wrap_fsdp2(TinyPolicy(1)), TinyPolicy(0))
    with pytest.raises(RefResetError, match="wrap policy"):
        copy_params_into_(wrap_fsdp1(TinyPolicy(1), wrap_blocks=False), wrap_fsdp1(TinyPolicy(0)))


def test_worker_entry_rejects_missing_ref_and_non_fsdp():
    from verl_offgrpo.ref_reset.worker import reset_reference_on_worker

    w = fake_arr_worker(TinyPolicy(0), TinyPolicy(1), "fsdp")
    w.ref = None
    with pytest.raises(RefResetError, match="no reference"):
        reset_reference_on_worker(w)
    w = fake_arr_worker(TinyPolicy(0), TinyPolicy(1), "megatron")
    with pytest.raises(RefResetError, match="only FSDP"):
        reset_reference_on_worker(w)


# ----------------------------------------------------------------------------- FSDP, world size 2 (subprocesses)
@pytest.mark.parametrize("mode", [pytest.param("fsdp1", marks=pytest.mark.slow), "fsdp1_ref_unforwarded",
                                  pytest.param("fsdp1_orig_params_cast", marks=pytest.mark.slow), "fsdp2",
                                  pytest.param("fsdp2_offload_cast", marks=pytest.mark.slow)])
def test_sharded_world_size_2(mode, tmp_path):
    """π_ref ← π_θ on two gloo ranks: the reference equals the actor bit for bit, parameters and outputs, after the
    copy; ``fsdp1_ref_unforwarded``: a reference that never ran (FSDP1 lazy init not done), as a resume's first
    sync finds it."""
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank", str(r), "--world", "2", "--store", str(tmp_path / "store"), "--mode", mode,
             "--out", str(tmp_path / f"r{r}.json")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                               os.environ.get("PYTHONPATH", "")])},
        )  # fmt: skip
        for r in range(2)
    ]
    logs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        logs.append(out)
    assert all(p.returncode == 0 for p in procs), "\n".join(x[-3000:] for x in logs)
    results = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2)]
    for res in results:
        assert res["sharded"], res  # each rank holds only part of the model
        if res["outcome"] == "raised":
            # allowed only where the layouts really differ (use_orig_params aligns by dtype)
            assert mode == "fsdp1_orig_params_cast" and "mismatched sharding" in res["error"], res
        else:
            assert res["full_params_equal"] and res["outputs_equal"] and res["max_abs_diff"] == 0.0, res
            if mode.startswith("fsdp1") and mode != "fsdp1_ref_unforwarded":
                # FSDP1 leaves the reference's root unit unsharded after its forward (stale weights for the
                # next forward unless freed): the copy must have resharded it
                assert res["resharded"] >= 1, res
    assert len({r["outcome"] for r in results}) == 1  # ranks agree (all checks before writing)


# ----------------------------------------------------------------------------- trainer entry (Ray __ray_call__)
@pytest.mark.parametrize("worker_group", [None, types.SimpleNamespace(workers=[]), types.SimpleNamespace()])
def test_a_reset_without_the_actors_ray_handles_is_an_error_not_a_quiet_no_op(worker_group):
    """The copy runs on the handles of verl's ``RayWorkerGroup.workers``: no worker group, or none there (a verl
    that moved them), stops the reset in one line instead of resetting nothing."""
    from verl_offgrpo.ref_reset.trainer import maybe_reset_reference

    cfg = OmegaConf.create({"algorithm": {"off_grpo": {"ref_reset_period": 1}}})
    trainer = types.SimpleNamespace(config=cfg, actor_rollout_wg=worker_group)
    expected = (r"^verl-offgrpo: the reference reset needs the trainer's actor worker group \(actor_rollout_wg\); it "
                r"has none\.$" if worker_group is None else r"^verl-offgrpo: the actor worker group \(SimpleNamespace\) has "
                r"no Ray handles in .workers .*; the reference reset cannot reach the actor's workers\.$")
    with pytest.raises(RefResetError, match=expected):
        maybe_reset_reference(trainer, 1)


@pytest.mark.slow
def test_maybe_reset_reference_through_ray_call():
    ray = pytest.importorskip("ray")
    from verl_offgrpo.ref_reset.trainer import maybe_reset_reference

    from ray import cloudpickle

    # pytest imports this file under a name the Ray worker cannot import (verl ships a package "tests"):
    # ship its classes and functions by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        handle = ray.remote(num_cpus=0)(_RayWorkerDict).remote()
        cfg = OmegaConf.create({"algorithm": {"off_grpo": {"ref_reset_period": 3}}})
        trainer = types.SimpleNamespace(config=cfg, actor_rollout_wg=types.SimpleNamespace(workers=[handle]))
        rows = []
        assert maybe_reset_reference(trainer, 0, at_init=True) == {}
        for step in range(1, 8):
            m = maybe_reset_reference(trainer, step, verify=True)
            rows.append((step, m["off_grpo/ref_reset"], m["off_grpo/ref_policy_step"]))
            assert maybe_reset_reference(trainer, step) == {}  # second call of the same step: nothing
            if m["off_grpo/ref_reset"]:
                assert m["off_grpo/ref_reset_max_abs_diff"] == 0.0
                assert ray.get(handle.kl.remote()) == 0.0
                ray.get(handle.train_step.remote())  # actor moves on
                assert ray.get(handle.kl.remote()) > 0.0
        assert rows == [(1, 0.0, 0), (2, 0.0, 0), (3, 1.0, 3), (4, 0.0, 3), (5, 0.0, 3), (6, 1.0, 6), (7, 0.0, 6)]
        assert ray.get(handle.resets.remote()) == 2
        # resume at step 5 (not a multiple of 3): ref ← π_5 with the exactness flag off
        trainer2 = types.SimpleNamespace(config=cfg, actor_rollout_wg=types.SimpleNamespace(workers=[handle]))
        m = maybe_reset_reference(trainer2, 5, at_init=True)
        assert m["off_grpo/ref_reset_on_resume"] == 1.0 and m["off_grpo/ref_resume_exact"] == 0.0
        assert maybe_reset_reference(trainer2, 5) == {} and maybe_reset_reference(trainer2, 6)["off_grpo/ref_reset"]
        # R = 0: nothing at all
        off = types.SimpleNamespace(config=OmegaConf.create({"algorithm": {}}), actor_rollout_wg=None)
        assert maybe_reset_reference(off, 3) == {}
    finally:
        if started:
            ray.shutdown()


class _RayWorkerDict:  # made a Ray actor inside the test
    """Like verl's colocated WorkerDict: an async Ray actor holding the worker in .worker_dict."""

    def __init__(self):
        self.worker_dict = {"actor_rollout_ref": fake_arr_worker(TinyPolicy(0), TinyPolicy(1), "fsdp")}

    def _w(self):
        return self.worker_dict["actor_rollout_ref"]

    def kl(self):
        from verl.trainer.ppo.core_algos import kl_penalty

        w, ids = self._w(), toy_batch()
        with torch.no_grad():
            lp_a, lp_r = token_log_probs(w.actor.engine.module, ids), token_log_probs(w.ref.engine.module, ids)
        return float(kl_penalty(lp_a, lp_r, "low_var_kl").abs().max())

    def train_step(self):
        with torch.no_grad():
            for p in self._w().actor.engine.module.parameters():
                p.add_(0.01 * torch.randn_like(p))

    def resets(self):
        return getattr(self, "_off_grpo_ref_resets", 0)

    async def update_weights(self):  # makes it an async actor, like verl's workers
        return None



# ----------------------------------------------------------------------------- startup check
def base_cfg(**over):
    cfg = OmegaConf.create(
        {
            "algorithm": {"off_grpo": {"ref_reset_period": 3}, "use_kl_in_reward": False},
            "actor_rollout_ref": {
                "model": {"lora": {"rank": 0}, "lora_rank": 0},
                "actor": {"strategy": "fsdp", "use_kl_loss": True,
                          "fsdp_config": {"fsdp_size": -1, "wrap_policy": {"min_num_params": 0}, "use_orig_params": False}},
                "ref": {"strategy": "${actor_rollout_ref.actor.strategy}",
                        "fsdp_config": {"fsdp_size": -1, "wrap_policy": {"min_num_params": 0}, "use_orig_params": False}},
                "rollout": {},
            },
            "trainer": {"use_v1": True, "v1": {"trainer_mode": "off_grpo_sync"}},
        }
    )  # fmt: skip
    for key, value in over.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


def test_check_accepts_supported():
    assert check_ref_reset_config(base_cfg()) == 3
    assert check_ref_reset_config(base_cfg(**{"actor_rollout_ref.actor.strategy": "fsdp2"})) == 3
    assert check_ref_reset_config(base_cfg(**{"algorithm.off_grpo.ref_reset_period": 0,
                                              "actor_rollout_ref.model.lora.rank": 8})) == 0  # fmt: skip
    v0 = {"trainer.use_v1": False,
          "actor_rollout_ref.rollout.checkpoint_manager_class": "verl_offgrpo.sync.checkpoint_manager_v0.LaggedCheckpointManager"}  # fmt: skip
    assert check_ref_reset_config(base_cfg(**v0)) == 3


@pytest.mark.parametrize(
    "over, match",
    [
        ({"actor_rollout_ref.actor.use_kl_loss": False}, "needs a reference model"),
        ({"actor_rollout_ref.model.lora.rank": 16}, "LoRA"),
        ({"actor_rollout_ref.model.lora_adapter_path": "/x"}, "LoRA"),
        ({"actor_rollout_ref.actor.strategy": "megatron"}, "FSDP engines only"),
        ({"actor_rollout_ref.ref.strategy": "fsdp2"}, "same engine"),
        ({"actor_rollout_ref.ref.fsdp_config.fsdp_size": 4}, "mismatched sharding"),
        ({"actor_rollout_ref.ref.fsdp_config.wrap_policy.min_num_params": 10}, "mismatched sharding"),
        ({"actor_rollout_ref.ref.fsdp_config.use_orig_params": True}, "mismatched sharding"),
        ({"trainer.v1.trainer_mode": "sync"}, "trainer_mode=off_grpo_sync"),
        ({"trainer.use_v1": False}, "checkpoint_manager_class"),
        ({"algorithm.off_grpo.ref_reset_period": -2}, ">= 0"),
    ],
)
def test_check_rejects(over, match):
    with pytest.raises(RefResetConfigError, match=match):
        check_ref_reset_config(base_cfg(**over))


def test_check_on_shipped_yaml_composition():
    """The shipped yaml + use_kl_loss composes into a config the check accepts (and rejects without KL)."""
    from hydra import compose, initialize_config_dir

    cfg_dir = str(Path(__file__).resolve().parents[1] / "verl_offgrpo" / "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        ok = compose("off_grpo_trainer", overrides=["algorithm.off_grpo.ref_reset_period=3",
                                                    "actor_rollout_ref.actor.use_kl_loss=True"])  # fmt: skip
        no_kl = compose("off_grpo_trainer", overrides=["algorithm.off_grpo.ref_reset_period=3"])
    assert check_ref_reset_config(ok) == 3
    with pytest.raises(RefResetConfigError, match="reference model"):
        check_ref_reset_config(no_kl)


def test_a_reset_with_a_kl_weight_of_0_warns_that_it_changes_nothing(caplog):
    """π_ref only enters the loss through the KL term: with kl_loss_coef = 0 (and no KL in the reward) a reset has
    no effect, which is said in one warning; verl's default coefficient is silent."""
    import logging

    from hydra import compose, initialize_config_dir

    cfg_dir = str(Path(__file__).resolve().parents[1] / "verl_offgrpo" / "config")
    base = ["algorithm.off_grpo.ref_reset_period=3", "actor_rollout_ref.actor.use_kl_loss=True"]
    reward = ["algorithm.off_grpo.ref_reset_period=3", "algorithm.use_kl_in_reward=True",
              "algorithm.off_grpo.zero_var_mask=false"]
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        zero = compose("off_grpo_trainer", overrides=[*base, "actor_rollout_ref.actor.kl_loss_coef=0"])
        default = compose("off_grpo_trainer", overrides=base)
        reward_zero = compose("off_grpo_trainer", overrides=[*reward, "algorithm.kl_ctrl.kl_coef=0"])
        reward_default = compose("off_grpo_trainer", overrides=reward)
        one_of_two = compose("off_grpo_trainer", overrides=[*base, "algorithm.use_kl_in_reward=True",
                                                            "actor_rollout_ref.actor.kl_loss_coef=0"])
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        for cfg in (zero, default, reward_zero, reward_default, one_of_two):
            assert check_ref_reset_config(cfg) == 3
    told = [r.getMessage() for r in caplog.records]
    lead = "off_grpo: algorithm.off_grpo.ref_reset_period=3 (π_ref ← π_θ every 3 steps) with a KL weight of 0 "
    assert told == [  # the weights in use, each named; one of two KL terms still weighted: silent
        lead + "(actor_rollout_ref.actor.kl_loss_coef=0): the KL term is 0, so the resets change nothing; set that "
        "coefficient, or ref_reset_period=0.",
        lead + "(algorithm.kl_ctrl.kl_coef=0): the KL term is 0, so the resets change nothing; set that coefficient, "
        "or ref_reset_period=0.",
    ], told


# ----------------------------------------------------------------------------- helpers (also used by the script)
def wrap_fsdp2(module, offload=False):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    kw = {"mesh": mesh}
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=False)
    for sub in (module.embed, module.block, module.head):
        fully_shard(sub, **kw)
    fully_shard(module, **kw)
    return module


def wrap_fsdp1(module, wrap_blocks=True, use_orig_params=False):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    policy = ModuleWrapPolicy({nn.Sequential}) if wrap_blocks else None
    return FSDP(
        module, device_id=torch.device("cpu"), auto_wrap_policy=policy, use_orig_params=use_orig_params,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
    )  # fmt: skip


def emulate_verl_offload_fsdp1(module):
    """verl's offload_fsdp_model_to_cpu leaves ``_local_shard`` a distinct tensor object on .data's storage."""
    from torch.distributed.fsdp._traversal_utils import _get_fsdp_handles

    for h in _get_fsdp_handles(module):
        fp = h.flat_param
        fp._local_shard = fp.data.view(fp.data.shape)
        assert id(fp._local_shard) != id(fp.data) and fp._local_shard.data_ptr() == fp.data.data_ptr()


def fake_arr_worker(actor_module, ref_module, strategy):
    """Stand-in for verl's ActorRolloutRefWorker: .actor/.ref TrainingWorkers with an .engine each."""

    def engine(module):
        return types.SimpleNamespace(module=module, engine_config=types.SimpleNamespace(strategy=strategy), device_mesh=None)

    return types.SimpleNamespace(
        actor=types.SimpleNamespace(engine=engine(actor_module)), ref=types.SimpleNamespace(engine=engine(ref_module))
    )


def _full_params(module, layout):
    if layout == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.summon_full_params(module, writeback=False):
            return {n.replace("_fsdp_wrapped_module.", ""): p.detach().float().clone() for n, p in module.named_parameters()}
    return {n: p.full_tensor().detach().float().clone() for n, p in module.named_parameters()}


def _dist_main(rank, world, store, mode, out):
    """World-size-2 check (run as a script by test_sharded_world_size_2)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    ref_dtype = torch.bfloat16 if mode.endswith("_cast") else torch.float32
    odd = mode == "fsdp1_orig_params_cast"  # numels not multiples of 8: alignment padding differs by dtype
    actor_m, ref_m = TinyPolicy(0, odd=odd), TinyPolicy(1, dtype=ref_dtype, odd=odd)
    if mode.startswith("fsdp1"):
        orig = "orig_params" in mode
        actor, ref = wrap_fsdp1(actor_m, use_orig_params=orig), wrap_fsdp1(ref_m, use_orig_params=orig)
        layout = "fsdp1"
    else:
        actor, ref = wrap_fsdp2(actor_m), wrap_fsdp2(ref_m, offload="offload" in mode)
        layout = "fsdp2"
    ids = toy_batch()
    # one optimizer step on the actor (so its shards differ from the checkpoint), one ref forward
    opt = torch.optim.SGD(actor.parameters(), lr=0.1)
    token_log_probs(actor, ids).mean().backward()
    opt.step()
    if mode != "fsdp1_ref_unforwarded":  # else the reference as a resume's first sync finds it: never run
        with torch.no_grad():
            ref(ids)
    if layout == "fsdp1":
        if mode != "fsdp1_ref_unforwarded":
            emulate_verl_offload_fsdp1(ref)
        sharded = all(h.flat_param._local_shard.numel() < sum(h.flat_param._numels) for h in _fsdp1_handles(actor))
    else:
        sharded = all(p.to_local().numel() < p.numel() for p in actor.parameters() if p.numel() > 1)
    res = {"rank": rank, "sharded": bool(sharded)}
    try:
        rep = copy_params_into_(ref, actor, verify=True)
        res["outcome"], res["max_abs_diff"], res["resharded"] = "copied", rep["max_abs_diff"], rep["resharded"]
    except RefResetError as err:
        res["outcome"], res["error"] = "raised", str(err)
    outcomes = [None] * world
    dist.all_gather_object(outcomes, res["outcome"])
    if all(o == "copied" for o in outcomes):
        fa, fr = _full_params(actor, layout), _full_params(ref, layout)
        res["full_params_equal"] = fa.keys() == fr.keys() and all(
            torch.equal(fa[k].to(ref_dtype).float(), fr[k]) for k in fa
        )
        with torch.no_grad():
            if ref_dtype == torch.float32:
                res["outputs_equal"] = bool(torch.equal(actor(ids), ref(ids)))
            else:  # bf16 reference: compare with a bf16 copy of the actor's full weights
                plain = TinyPolicy(0, dtype=torch.bfloat16, odd=odd)
                plain.load_state_dict({k: v.to(torch.bfloat16) for k, v in fa.items()})
                res["outputs_equal"] = bool(torch.allclose(plain(ids), ref(ids), atol=0, rtol=0))
    Path(out).write_text(json.dumps(res))
    dist.barrier()
    exit_skipping_teardown()


def exit_skipping_teardown():
    """Exit 0 without C++ teardown, once every rank has written its result and passed the barrier.

    Gloo's worker threads can still be joinable when the process group or the interpreter is torn
    down, and then the rank aborts with "terminate called without an active exception" (a rare CI
    failure, pytorch/pytorch#179291) after its checks all passed. Nothing is left to check by then.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _fsdp1_handles(module):
    from torch.distributed.fsdp._traversal_utils import _get_fsdp_handles

    return _get_fsdp_handles(module)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--store", help="file store path shared by the ranks")
    ap.add_argument("--mode")
    ap.add_argument("--out")
    a = ap.parse_args()
    _dist_main(a.rank, a.world, a.store, a.mode, a.out)
