"""Windowed rollout (``algorithm.off_grpo.rollout_schedule=window``) through verl's real V1 ``fit`` loop.

The trainer is the plugin's ``off_grpo_sync`` mode running verl 0.9.1's own ``PPOTrainer.fit`` /
``step`` / ``_step_once`` on CPU. What needs GPUs is replaced by fakes: the vLLM servers are
``test_sync_hooks.FakeVLLMServer`` Ray actors (level 2 discards the weights: a woken engine without a
sync serves "garbage"), ``_add_prompts_to_generate`` samples from them (records which weights served
each prompt), the replay buffer hands out B of those groups per step, and the model stages
(old log-prob, advantage, update) count their calls. verl's ``Tracking`` is replaced by a recorder,
so every assertion on metrics is on what verl would log.
"""

import importlib.util
import logging
import os
import sys
import time
from types import SimpleNamespace

import pytest
import ray

import verl  # noqa: F401
from verl.checkpoint_engine.base import CheckpointEngineManager
from verl.utils.config import omega_conf_to_dataclass

from verl_offgrpo.sync import register_sync_hooks
from verl_offgrpo.config import OffGRPOConfigError, check_window_config, validate_off_grpo_config
from verl_offgrpo.sync.window import WindowSchedule, window_length

_spec = importlib.util.spec_from_file_location("offgrpo_sync_fakes", os.path.join(os.path.dirname(__file__), "test_sync_hooks.py"))
fakes = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fakes
_spec.loader.exec_module(fakes)

B = 2  # prompts per step


@pytest.fixture(scope="module")
def ray_local():
    fakes.start_ray()
    import ray.cloudpickle as rcp

    rcp.register_pickle_by_value(fakes)
    yield
    fakes.release_actors()


# ----------------------------------------------------------------------------- pure schedule
@pytest.mark.parametrize(
    "step, period, total, k",
    [(1, 4, None, 4), (5, 4, None, 4), (6, 4, None, 3), (8, 4, None, 1), (9, 4, 10, 2), (1, 1, None, 1), (3, 10, 5, 3)],
)
def test_window_length_ends_at_the_next_sync_or_the_last_step(step, period, total, k):
    assert window_length(step, period, total) == k


def test_window_schedule_lag_counts_from_the_sync_before_the_window():
    ws = WindowSchedule(3, total_steps=7)
    starts, lags = [], []
    for s in range(1, 8):
        if ws.starts_window(s):
            starts.append((s, ws.begin(s, s - 1).length))
        ws.draw()
        lags.append(ws.rollout_lag(s))
    assert starts == [(1, 3), (4, 3), (7, 1)]
    assert lags == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(RuntimeError, match="used up"):
        ws.draw()


# ----------------------------------------------------------------------------- verl's fit on fakes
class Recorder:
    """Stands for verl's ``Tracking``: keeps what ``fit`` logs per step."""

    logged: dict = {}

    def __init__(self, *args, **kwargs):
        Recorder.logged = {}

    def log(self, data, step, backend=None):
        Recorder.logged.setdefault(step, {}).update(data)


class FakeLoader:
    """verl's StatefulDataLoader as the trainer uses it here: its state is how many prompts were fetched."""

    def __init__(self):
        self.fetched = 0

    def state_dict(self):
        return {"fetched": self.fetched}


class FakeBatch(SimpleNamespace):
    """What verl's replay buffer hands a step: keys (one per sample row), tags, partition, extra_info."""

    def __len__(self):
        return len(self.keys)


def run_fit(monkeypatch, *overrides, start=0, total=10, rprime=None, unfinished=0, schedule="window", extra_rows=0,
            steps_per_epoch=1000, rprime_seq=None, submit_s=0.0):
    """verl's V1 ``fit`` of the off_grpo_sync trainer over the fake cluster (``schedule``: the
    ``rollout_schedule`` set, None for the default). Returns a record of what happened: generations (one per
    submission: the step its prompts are tagged with, prompts, weights served), per-step batches' weights, validations (step, weights), actor updates per
    step, the sync calls, the logged metrics and the servers' logs, and per step the value of verl's
    ``algorithm.rollout_correction.bypass_mode`` that verl's ``_compute_old_log_prob`` and
    ``_compute_advantage`` (both stand-ins) saw. A batch holds n rows per prompt plus ``extra_rows``; the
    update's stand-in logs the loss's mean |log r'| as ``rprime`` (or the served weights) gives it; ``rprime_seq``
    (step → value) adds the largest response's mean to the advantage stage's metrics; each step's submission of its
    prompts takes ``submit_s`` seconds more."""
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls, trainer_base
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    import verl_offgrpo.sync.advantage_v1 as zvm
    from verl_offgrpo.sync.alpha_guard import SEQ_STATISTIC, STATISTIC

    register_sync_hooks()
    cfg = fakes.compose_cfg(
        "algorithm.off_grpo.sync_period=4",
        *([f"algorithm.off_grpo.rollout_schedule={schedule}"] if schedule else []),
        f"data.train_batch_size={B}",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        *overrides,
    )
    trainer = get_trainer_cls(cfg.trainer.v1.trainer_mode)(config=cfg)
    servers, workers, replicas, wg = fakes.make_cluster()
    engine_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)
    rec = SimpleNamespace(generations=[], batches={}, batch_tags={}, validations=[], updates={}, buffer=[], bypass={})

    def fake_setup(self):
        self.actor_rollout_wg = wg
        self.checkpoint_manager = CheckpointEngineManager(config=engine_cfg, actor_wg=wg, replicas=replicas)
        self.checkpoint_manager.sleep_replicas()
        self.global_steps = start
        self.total_training_steps = total
        self.steps_per_epoch = steps_per_epoch
        self.train_dataloader = FakeLoader()
        self._init_dump_executor()

    def add_prompts(num_prompts):
        time.sleep(submit_s)
        served = ray.get(servers[0].generate.remote())
        rec.generations.append((trainer.global_steps, num_prompts, served))
        trainer.train_dataloader.fetched += num_prompts
        rec.buffer.extend([(trainer.global_steps, served)] * num_prompts)  # verl tags prompts with global_steps
        return num_prompts

    def sample(global_steps, partition_id, batch_size):
        # verl's sync ReplayBuffer serves the lowest tags first (_select_prompt_uids)
        assert len(rec.buffer) >= batch_size, f"step {global_steps}: buffer holds {len(rec.buffer)} < {batch_size}"
        rec.buffer.sort(key=lambda entry: entry[0])
        taken, rec.buffer[:batch_size] = rec.buffer[:batch_size], []
        rec.batch_tags[global_steps] = [tag for tag, _ in taken]
        served = rec.batches[global_steps] = [weights for _, weights in taken]
        rows = batch_size * int(cfg.actor_rollout_ref.rollout.n) + extra_rows
        batch = FakeBatch(keys=[f"k{global_steps}_{i}" for i in range(rows)],
                          tags=[{} for _ in range(rows)], partition_id="train", extra_info={}, served=served)
        return batch, {}

    def statistic(batch):
        if rprime is not None:
            return rprime(trainer.global_steps)
        honest = all(isinstance(w, str) and w.startswith("pi_") for w in batch.served)
        return 0.01 if honest else 11.0

    def advantage(tq, batch, algorithm_cfg):
        seq = {} if rprime_seq is None else {SEQ_STATISTIC: rprime_seq(trainer.global_steps)}
        return {STATISTIC: statistic(batch), **seq}

    def validate(self):
        rec.validations.append((self.global_steps, ray.get(servers[0].generate.remote())))
        return {"val/score": 1.0}

    def update(self, batch, metrics):
        rec.updates[trainer.global_steps] = rec.updates.get(trainer.global_steps, 0) + 1
        # the loss's own r' terms as verl logs them: means over every micro-batch, half of which had no loss
        # token (0 there); the trainer reads term / rprime_terms_frac
        metrics["actor/off_grpo/mean_abs_log_rprime"] = statistic(batch) * 0.5
        metrics["actor/off_grpo/tv_token"], metrics["actor/off_grpo/tv_seq"] = 0.01, 0.15
        metrics["actor/off_grpo/rprime_terms_frac"] = 0.5
        return batch

    monkeypatch.setattr(PPOTrainer, "_setup", fake_setup)
    monkeypatch.setattr(PPOTrainer, "_validate", validate)
    monkeypatch.setattr(PPOTrainer, "_compute_metrics", lambda self, *a, **k: None)
    def stage(name):
        def seen(self, batch, metrics=None, **kw):
            bypass = self.config.algorithm.rollout_correction.bypass_mode
            rec.bypass.setdefault(self.global_steps, {})[name] = bypass
            return batch
        return seen

    monkeypatch.setattr(PPOTrainerSync, "_compute_advantage", stage("advantage"), raising=False)
    monkeypatch.setattr(PPOTrainer, "_compute_old_log_prob", stage("old_log_prob"))
    monkeypatch.setattr(PPOTrainer, "_update_actor", update)
    monkeypatch.setattr(zvm, "after_advantage_v1", advantage)
    monkeypatch.setattr(trainer_base, "Tracking", Recorder)
    monkeypatch.setattr(trainer_base.tq, "kv_clear", lambda **kw: None)
    trainer.init()
    trainer._add_prompts_to_generate = add_prompts
    trainer.replay_buffer.sample = sample
    # what the window's first step waits on (verl's ReplayBuffer metadata): every generated group is
    # finished here except, with ``unfinished``, that many of the window's groups on the first poll
    polls = []

    def sync_metadata():
        polls.append(trainer.global_steps)
        late = unfinished if polls.count(trainer.global_steps) == 1 else 0
        trainer.replay_buffer.finished_keys["train"] = {f"g{i}" for i in range(len(rec.buffer) - late)}
        trainer.replay_buffer.running_keys["train"] = {f"r{i}" for i in range(late)}

    trainer.replay_buffer._sync_metadata_from_transfer_queue = sync_metadata
    rec.polls = polls
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=["remote reward"])
    for name in ("_balance_batch", "_compute_ref_log_prob"):
        setattr(trainer, name, lambda batch, metrics=None, **kw: batch)
    trainer.fit(agent_loop_manager=None)
    rec.syncs = [c[0] for c in wg.sync_calls]
    rec.logged = Recorder.logged
    rec.server_log = ray.get(servers[0].get_log.remote())
    rec.servers = servers
    rec.trainer = trainer
    return rec


def series(rec, key, steps):
    return [rec.logged[s].get(key) for s in steps]


def window(start, length, served):
    """The submissions of one window: a batch of B prompts per step, tagged with that step."""
    return [(start + j, B, served) for j in range(length)]


def test_window_generates_once_per_window_and_trains_once_per_step(ray_local, monkeypatch):
    """v=4, 10 steps, validation after steps 6 and 10: windows 1-4 (π_0), 5-8 (π_4), 9-10 (π_8, the short
    last window). A validation inside the window 5-8 syncs π_6 for itself, yet steps 7-8 still train on
    π_4's buffered samples with their true lag, and vLLM goes back to sleep until the window's end."""
    rec = run_fit(monkeypatch, "trainer.test_freq=6", total=10, submit_s=0.05)
    steps = range(1, 11)
    assert rec.generations == window(1, 4, "pi_0") + window(5, 4, "pi_4") + window(9, 2, "pi_8")
    assert [rec.batches[s] for s in steps] == [["pi_0"] * B] * 4 + [["pi_4"] * B] * 4 + [["pi_8"] * B] * 2
    assert rec.batch_tags == {s: [s] * B for s in steps}  # each step trains on its own batch, as per_step
    assert rec.updates == {s: 1 for s in steps}  # one global step = one update
    assert rec.syncs == [0, 4, 6, 8, 10]
    assert rec.validations == [(6, "pi_6"), (10, "pi_10")]
    assert series(rec, "off_grpo/window/generated", steps) == [1, 0, 0, 0, 1, 0, 0, 0, 1, 0]
    assert series(rec, "off_grpo/window/position", steps) == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert series(rec, "off_grpo/window/length", steps) == [4] * 8 + [2] * 2
    # each window's generation phase (from submitting its k steps' prompts, 0.05 s each here, to vLLM's sleep) spread
    # over its steps: one value a window, k·0.05 s and a little more over k
    per_step = series(rec, "off_grpo/window/generation_s_per_step", steps)
    assert per_step[0:4] == [per_step[0]] * 4 and per_step[4:8] == [per_step[4]] * 4 and per_step[8] == per_step[9]
    assert all(0.05 <= per_step[s - 1] < 0.05 + 1.0 / k for s, k in ((1, 4), (5, 4), (9, 2))), per_step
    # the phase over k, not over v nor undivided (which the bounds above also let through at k = 4 and 2): the last
    # window (9-10, k = 2 < v) logs exactly half its timed phase
    assert per_step[8] == rec.trainer.window_schedule.current.generation_s / 2
    assert series(rec, "off_grpo/rollout_lag", steps) == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert series(rec, "off_grpo/synced", steps) == [0, 0, 0, 1, 0, 1, 0, 1, 0, 1]
    assert all(rec.logged[s]["off_grpo/bound/mean_abs_log_rprime"] == 0.01 for s in steps)
    # vLLM wakes only inside real syncs (no wake without a transfer), sleeps at verl's level 2 after each
    # window's generation and after the validation inside a window
    wakes = [e for e in rec.server_log if e[0] == "wake"]
    assert len(wakes) == 2 * len(rec.syncs)
    assert [e for e in rec.server_log if e[0] == "sleep"] == [("sleep", 2)] * 5  # init, 3 windows, step 6's validation
    # each sleep is timed on its step, the validation's inside the window 5-8 too: fit merged step 6's sync
    # metrics before validating, so _validate returns it with the validation's metrics
    assert [s for s in steps if "timing_s/off_grpo_sleep" in rec.logged[s]] == [1, 5, 6, 9]


def test_a_windows_first_step_waits_for_every_group_of_the_window(ray_local, monkeypatch):
    """verl's buffer would sample as soon as B groups are done, and the sleep after it only drains what
    vLLM holds; the window's first step polls until no group is pending or running."""
    rec = run_fit(monkeypatch, "trainer.test_freq=-1", total=4, unfinished=3)
    assert rec.polls == [1, 1]  # one poll saw 3 groups still running, the next none
    assert rec.generations == window(1, 4, "pi_0")


def test_resume_mid_window_starts_a_shorter_window(ray_local, monkeypatch):
    """Resumed at step 5 (v=4): the first slot syncs π_5, the window 6-8 ends at the next period sync."""
    rec = run_fit(monkeypatch, "trainer.test_freq=-1", start=5, total=10)
    assert rec.generations == window(6, 3, "pi_5") + window(9, 2, "pi_8")
    assert rec.syncs == [5, 8]
    assert series(rec, "off_grpo/rollout_lag", range(6, 11)) == [0, 1, 2, 0, 1]  # the new window's first batch: lag 0


def test_the_last_window_ends_where_verls_epochs_end(ray_local, monkeypatch):
    """verl's fit also stops after trainer.total_epochs epochs (7 steps here) when total_training_steps is larger:
    the window 5-8 is cut to 5-7 and generates no batch that no step would train on."""
    rec = run_fit(monkeypatch, "trainer.test_freq=-1", "trainer.total_epochs=1", total=10, steps_per_epoch=7)
    assert rec.generations == window(1, 4, "pi_0") + window(5, 3, "pi_4")
    assert rec.updates == {s: 1 for s in range(1, 8)}
    assert rec.buffer == []


def test_a_resumes_reference_reset_is_logged_with_the_next_step(ray_local, monkeypatch):
    """Resumed at step 4 with R = 2: the first slot sets π_ref ← π_θ (the reference is not checkpointed) and logs
    nothing of its own, so step 5 carries off_grpo/ref_reset_on_resume = 1 and ref_resume_exact = 1 (4 % 2 = 0)
    beside its own off_grpo/ref_reset = 0; step 6 resets by the period."""
    from verl_offgrpo.ref_reset import trainer as ref_trainer

    copies = []
    monkeypatch.setattr(ref_trainer, "actor_workers", lambda trainer: ["worker"])
    monkeypatch.setattr(ref_trainer, "run_reset_on_workers",
                        lambda workers, verify=False: copies.append(workers) or [{"bytes_written": 2e9}])
    rec = run_fit(monkeypatch, "trainer.test_freq=-1", "algorithm.off_grpo.ref_reset_period=2",
                  "actor_rollout_ref.actor.use_kl_loss=true", start=4, total=6)
    assert len(copies) == 2  # the resume's and step 6's
    assert series(rec, "off_grpo/ref_reset_on_resume", [5, 6]) == [1.0, None]
    assert series(rec, "off_grpo/ref_resume_exact", [5]) == [1.0]
    assert series(rec, "off_grpo/ref_reset", [5, 6]) == [0.0, 1.0]
    assert series(rec, "off_grpo/ref_num_resets", [5, 6]) == [1.0, 2.0]
    assert series(rec, "off_grpo/ref_resume_gb", [5, 6]) == [2.0, None]  # the resume's copy, beside step 5's none
    assert series(rec, "off_grpo/ref_reset_gb", [5, 6]) == [None, 2.0]
    assert series(rec, "timing_s/off_grpo_ref_reset_on_resume", [6]) == [None]


def test_the_default_schedule_runs_the_window_at_v_above_one(ray_local, monkeypatch):
    """rollout_schedule=auto (the default) on the V1 trainer: the trainer and the lagged manager both take
    the window (one generation per window, vLLM asleep at verl's level 2, never woken without a sync)."""
    rec = run_fit(monkeypatch, "trainer.test_freq=-1", total=8, schedule=None)
    assert rec.trainer.windowed and rec.trainer.checkpoint_manager.windowed
    assert rec.generations == window(1, 4, "pi_0") + window(5, 4, "pi_4")
    assert rec.syncs == [0, 4, 8]
    assert [e for e in rec.server_log if e[0] == "sleep"] == [("sleep", 2)] * 3  # init, 2 windows


def test_period_one_window_is_per_step(ray_local, monkeypatch):
    rec = run_fit(monkeypatch, "algorithm.off_grpo.sync_period=1", "trainer.test_freq=-1", total=4)
    assert rec.generations == [(s, B, f"pi_{s - 1}") for s in range(1, 5)]
    assert rec.syncs == [0, 1, 2, 3, 4]


def test_guard_uses_the_windows_lag_after_a_forced_sync(ray_local, monkeypatch):
    """Step 7 trains on π_4's samples after validation synced π_6: lag 2, so the lagged limit applies (a
    lag-0 reading would stop this honest run at max_log_rprime_after_sync=0.3)."""
    rec = run_fit(monkeypatch, "trainer.test_freq=6", "algorithm.off_grpo.max_log_rprime_after_sync=0.3",
                  total=8, rprime=lambda step: 0.5 if step == 7 else 0.01)
    assert rec.updates == {s: 1 for s in range(1, 9)}
    assert rec.logged[7]["off_grpo/bound/mean_abs_log_rprime"] == 0.5


def test_lag_is_the_next_batchs_staleness_after_a_forced_sync(ray_local, monkeypatch):
    """v=4, validation after step 6 syncs π_6 inside the window 5-8; steps 7 and 8 still train on π_4's buffered
    samples, so off_grpo/lag at steps 6 and 7 says 2 and 3 (each step's lag is the next batch's rollout_lag, as
    with per_step), not the 0 and 1 of vLLM's weights age."""
    rec = run_fit(monkeypatch, "trainer.test_freq=6", total=8)
    assert series(rec, "off_grpo/lag", range(1, 8)) == [1, 2, 3, 0, 1, 2, 3]
    assert series(rec, "off_grpo/rollout_lag", range(2, 9)) == [1, 2, 3, 0, 1, 2, 3]
    assert series(rec, "off_grpo/synced", [6, 8]) == [1.0, 1.0]


@pytest.mark.parametrize("free_cache_engine", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_a_windows_lagged_batch_over_the_lagged_limit_warns_as_per_step_does(ray_local, monkeypatch, caplog,
                                                                            free_cache_engine):
    """A window's lagged batches come from the generation phase whose lag-0 batch met the strict limit, with no
    wake or transfer since, so a lagged batch over max_log_rprime_lagged is drift: a warning that says why and
    off_grpo/guard/lagged_over_limit, as per_step with the exact check gives, not a stop blaming vLLM's wake.
    With vLLM never sleeping (rollout.free_cache_engine=false) too; either way vLLM is never checked after a wake."""
    import functools

    monkeypatch.setattr(fakes, "make_cluster", functools.partial(fakes.make_cluster, free_cache_engine=free_cache_engine))
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        rec = run_fit(monkeypatch, "trainer.test_freq=-1",
                      f"actor_rollout_ref.rollout.free_cache_engine={free_cache_engine}",
                      total=4, rprime=lambda step: 2.0 if step == 3 else 0.01)
    assert rec.updates == {s: 1 for s in range(1, 5)}
    assert series(rec, "off_grpo/guard/lagged_over_limit", range(1, 5)) == [None, 0.0, 1.0, 0.0]
    [line] = [r.getMessage() for r in caplog.records if "max_log_rprime_lagged" in r.getMessage()]
    assert "step 3" in line and "generated in the phase whose lag-0 batch met" in line and "exact" not in line
    assert not rec.trainer.checkpoint_manager.verify_weights
    # no wake without a sync to check: vLLM sees only the record at each real sync, whose answers say whether its
    # weights changed with the trainer's (the check that each sync reached it)
    rpcs = [(action, step) for method, action, step, rank in ray.get(rec.servers[0].get_rpcs.remote())]
    assert rpcs == [("record", 0), ("record", 4)]
    assert series(rec, "off_grpo/trainer_changed", [4]) == [1.0]
    # the trainer's four tensors (same names in the fakes' vLLM) each changed on both replicas: 2 × 4 checked
    assert series(rec, "off_grpo/sync_tensors_checked", [4]) == [8.0]
    # and each of them is the trainer's cast, bit for bit
    assert series(rec, "off_grpo/sync_tensors_exact", [4]) == [8.0]


def test_a_window_whose_first_batch_cannot_reach_every_engine_keeps_the_lagged_limit_an_error(ray_local, monkeypatch,
                                                                                             caplog):
    """B·n = 8 samples a step on 16 one-GPU vLLM engines: some engine may sample only lagged batches, which then no
    lag-0 batch vouches for, so the lagged limit stops the run (said once at start-up), as per_step without the
    exact check does."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError
    from verl_offgrpo.config.readers import lag0_batch_reaches_every_engine

    layout16 = ("trainer.test_freq=-1", "trainer.n_gpus_per_node=16", "actor_rollout_ref.rollout.n=4",
                "actor_rollout_ref.rollout.tensor_model_parallel_size=1")
    with pytest.raises(ServedPolicyError, match="step 3"):
        run_fit(monkeypatch, *layout16, total=4, rprime=lambda step: 2.0 if step == 3 else 0.01)
    # said once, by the start-up checks (compose too), before any GPU work
    for lagged_limit, end in (("1.5", "over algorithm.off_grpo.max_log_rprime_lagged they stop the run."),
                              ("0", "with algorithm.off_grpo.max_log_rprime_lagged=0 nothing checks them.")):
        caplog.clear()
        cfg = fakes.compose_cfg("algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.rollout_schedule=window",
                                f"data.train_batch_size={B}", *layout16,
                                f"algorithm.off_grpo.max_log_rprime_lagged={lagged_limit}")
        with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
            validate_off_grpo_config(cfg)
        told = [r.getMessage() for r in caplog.records if "smaller than the number of vLLM engines" in r.getMessage()]
        assert len(told) == 1 and told[0].endswith(end), told
    layout = {"trainer": {"n_gpus_per_node": 8, "nnodes": 1}, "data": {"train_batch_size": 2},
              "actor_rollout_ref": {"rollout": {"n": 4, "tensor_model_parallel_size": 1}}}
    assert lag0_batch_reaches_every_engine(layout)  # 8 samples, 8 engines
    layout["actor_rollout_ref"]["rollout"]["data_parallel_size"] = 2
    layout["trainer"]["n_gpus_per_node"] = 16
    assert not lag0_batch_reaches_every_engine(layout)  # 16 engines (8 replicas × 2 data-parallel ranks)


def test_a_window_whose_lag_0_check_is_off_keeps_the_lagged_limit_an_error(ray_local, monkeypatch, caplog):
    """A window's lagged batches only warn because its lag-0 batch met max_log_rprime_after_sync: with that limit off
    (0) nothing vouches for the phase, so a lagged batch over max_log_rprime_lagged stops the run (found by an audit:
    it warned, naming a lag-0 check that never ran)."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"), pytest.raises(ServedPolicyError, match="step 2"):
        run_fit(monkeypatch, "trainer.test_freq=-1", "algorithm.off_grpo.max_log_rprime_after_sync=0", total=4,
                rprime=lambda step: 5.0)
    assert not [r for r in caplog.records if "generated in the phase whose lag-0 batch met" in r.getMessage()]


def test_one_response_far_from_the_trainer_stops_a_windows_lag_0_batch_only(ray_local, monkeypatch):
    """The batch's mean at the floor (0.01) and one response at 1.5 > max_seq_log_rprime_after_sync = 1.0: V1's fit
    stops at the first batch of rollout lag 0 that has it (step 5, the second window's first), and runs through
    lagged batches that have it (steps 2-4: a lag's drift per response is allowed). per_step: the v0 test."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    with pytest.raises(ServedPolicyError, match=r"step 5: .*one response's mean .* 1\.5 "):
        run_fit(monkeypatch, "trainer.test_freq=-1", total=8, rprime=lambda step: 0.01,
                rprime_seq=lambda step: 0.2 if step == 1 else 1.5)


def test_the_lag_0_limit_still_stops_a_window(ray_local, monkeypatch):
    """The strict limit on a window's first batch stays an error (it is what vouches for the lagged ones)."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    with pytest.raises(ServedPolicyError, match="step 5"):
        run_fit(monkeypatch, "trainer.test_freq=-1", total=8, rprime=lambda step: 0.9 if step == 5 else 0.01)


def trainer_policies(monkeypatch, policy_of):
    """The fake clusters' trainer holds policy ``policy_of(step)`` at each sync (a constant: it never moves)."""
    make = fakes.make_cluster

    def made(*args, **kwargs):
        servers, workers, replicas, wg = make(*args, **kwargs)
        wg.policy_of = policy_of
        return servers, workers, replicas, wg

    monkeypatch.setattr(fakes, "make_cluster", made)


def serve_at_sync_4(monkeypatch, policies, tp=1):
    """At the sync of step 4 each fake vLLM server's TP rank r loads the weights of policy ``policies[r]`` instead
    of the one sent: a sync that did not reach (part of) the engine, or brought it other weights."""
    import functools

    monkeypatch.setattr(fakes, "make_cluster", functools.partial(fakes.make_cluster, tp=tp, load_at={4: policies}))


def stops_at_sync_4(monkeypatch, schedule, stopped, steps=8):
    """Run ``steps`` steps at v = 4 inside ``stopped`` (a ``pytest.raises``): the window on V1's fit; per_step in
    v0's order (its lagged manager, level-1 sleep and the wake check), which must have synced every 4th step only,
    up to the stop at the last sync."""
    if schedule == "window":
        with stopped:
            run_fit(monkeypatch, "trainer.test_freq=-1", total=steps)
        return
    cfg = fakes.compose_cfg(*fakes.V0_OVERRIDES, "algorithm.off_grpo.sync_period=4", "trainer.test_freq=-1")
    servers, _, replicas, wg = fakes.make_cluster()
    manager = fakes.FakeV0Trainer(cfg, wg).init_workers(replicas)
    with stopped:
        fakes.run_v0_loop(manager.trainer, manager, servers, range(1, steps + 1))
    assert [c[0] for c in wg.sync_calls] == list(range(0, steps - 3, 4))


def one_replica_loads_a_wrong_tensor_from(monkeypatch, first_version):
    """From the sync of ``first_version`` on, replica 0's vLLM loads ``layers.0.weight`` with bits the trainer never
    sent (another policy's, new at every sync); replica 1 and every other tensor are exact."""
    import functools

    original, policy_tensors = fakes.FakeVLLMServer.receive_weights, fakes.policy_tensors

    async def lossy(self, version, policy=None):
        import torch

        await original(self, version, policy)
        start = self.load_at.get("wrong_from")
        if start is not None and version is not None and version >= start:
            wrong = policy_tensors(1000 + version)["layers.0.weight"]
            with torch.no_grad():
                for worker in self.workers:
                    dict(worker.model_runner.model.named_parameters())["layers.0.weight"].copy_(wrong)

    monkeypatch.setattr(fakes.FakeVLLMServer, "receive_weights", lossy)
    monkeypatch.setattr(fakes, "make_cluster", functools.partial(
        fakes.make_cluster, per_server=[{"load_at": {"wrong_from": first_version}}, {}]))


@pytest.mark.parametrize("schedule, first_version", [("window", 0), pytest.param("window", 4, marks=pytest.mark.slow), ("per_step", 0)])
def test_a_replica_unlike_another_at_a_calibrating_sync_is_stopped(ray_local, monkeypatch, schedule, first_version):
    """A calibrating sync (the first checked, the first after the trainer moved) leaves out the tensors an engine's
    loader stores otherwise than the cast; but every replica gets the same weights through the same loader, so a
    tensor replica 0 serves unlike the cast while replica 1 serves it exactly is replica 0 not serving α. Stopped at
    that sync (window on V1's fit; per_step in v0's order, whose wake check compares each wake with that sync's record
    and would pass it for the run)."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    one_replica_loads_a_wrong_tensor_from(monkeypatch, first_version)
    stopped = pytest.raises(ServedPolicyError, match=r"replica 0 of 2 serves layers\.0\.weight \(TP rank 0\) unlike the "
                                                     r"trainer's weights cast to \S+, which another replica serves exactly")
    if schedule == "window":
        with stopped:
            run_fit(monkeypatch, "trainer.test_freq=-1", total=12)
        return
    cfg = fakes.compose_cfg(*fakes.V0_OVERRIDES, "algorithm.off_grpo.sync_period=4", "trainer.test_freq=-1")
    servers, _, replicas, wg = fakes.make_cluster()
    manager = fakes.FakeV0Trainer(cfg, wg).init_workers(replicas)
    with stopped:
        fakes.run_v0_loop(manager.trainer, manager, servers, range(1, 13))


@pytest.mark.parametrize("schedule", ["window", pytest.param("per_step", marks=pytest.mark.slow)])
def test_a_sync_that_leaves_vllm_on_the_old_weights_stops_before_the_next_rollout(ray_local, monkeypatch, schedule):
    """At the sync of step 4 every vLLM rank keeps π_0's weights while the trainer moved to π_4: the lag-0 limit would
    see only the drift of four updates, the exact check sees that no served weight changed with the trainer's.
    The window on V1's fit; per_step in v0's order (its lagged manager, level-1 sleep and the wake check)."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    serve_at_sync_4(monkeypatch, {0: 0})
    stopped = pytest.raises(ServedPolicyError, match=r"step 4: the weight sync did not reach vLLM: the trainer's weights "
                                                     r"changed since the sync of step 0, but the vLLM workers of replica 0")
    stops_at_sync_4(monkeypatch, schedule, stopped)


def test_a_sync_that_changes_vllm_while_the_trainer_did_not_move_stops_in_both_schedules(ray_local, monkeypatch):
    """The trainer never moves (think: a zero learning rate), yet at the sync of step 4 vLLM's rank 0 loads other
    weights: per_step (level-1 sleep keeps every weight) stops there on "changed although the trainer did not"; a
    window (level-2 sleep, where "changed" tells nothing) stops there too, on the rule that each tensor vLLM holds
    whole is the trainer's cast (:mod:`verl_offgrpo.sync.served_cast`), which rank 0's four tensors break."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    trainer_policies(monkeypatch, lambda step: 0)
    serve_at_sync_4(monkeypatch, {0: 7})
    cfg = fakes.compose_cfg(*fakes.V0_OVERRIDES, "algorithm.off_grpo.sync_period=4", "trainer.test_freq=-1")
    servers, _, replicas, wg = fakes.make_cluster()
    manager = fakes.FakeV0Trainer(cfg, wg).init_workers(replicas)
    with pytest.raises(ServedPolicyError, match=r"step 4: vLLM's weights changed at the sync although the trainer's "
                                                r"did not since the sync of step 0 \(replica 0 of 2, TP rank 0\)"):
        fakes.run_v0_loop(manager.trainer, manager, servers, range(1, 9))
    with pytest.raises(ServedPolicyError, match=r"step 4: after the weight sync vLLM's replica 0 of 2 \(2 of 2 replicas "
                                                r"alike\) serves layers.0.bias \(TP rank 0\); layers.0.weight \(TP rank "
                                                r"0\); layers.1.bias \(TP rank 0\); and 1 more unlike the trainer's "
                                                r"weights cast to bfloat16, which it matched at the sync of step 0"):
        run_fit(monkeypatch, "trainer.test_freq=-1", total=8)


def test_the_sync_check_reads_every_tp_rank(ray_local, monkeypatch):
    """Rollout TP = 2 (verl's yaml): both ranks of a replica keep π_0's weights at the sync of step 4 while the
    trainer moved: stopped there. A trainer that does not move and a vLLM that does not either: no false alarm, on
    one rank or two."""
    import functools

    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    serve_at_sync_4(monkeypatch, {0: 0, 1: 0}, tp=2)
    with pytest.raises(ServedPolicyError, match=r"step 4: the weight sync did not reach vLLM: .* the vLLM workers of "
                                                r"replica 0 of 2 \(TP ranks 0, 1\) \(2 of 2 replicas alike\)"):
        run_fit(monkeypatch, "trainer.test_freq=-1", total=8)
    monkeypatch.undo()
    for tp in (1, 2):
        trainer_policies(monkeypatch, lambda step: 0)
        monkeypatch.setattr(fakes, "make_cluster", functools.partial(fakes.make_cluster, tp=tp))
        rec = run_fit(monkeypatch, "trainer.test_freq=-1", total=8)
        assert rec.updates == {s: 1 for s in range(1, 9)}
        assert series(rec, "off_grpo/trainer_changed", [4, 8]) == [0.0, 0.0]
        monkeypatch.undo()
    # a trainer that moves, TP = 2: every tensor changed on both ranks; per tensor 4 checked on each of 2 replicas
    monkeypatch.setattr(fakes, "make_cluster", functools.partial(fakes.make_cluster, tp=2))
    rec = run_fit(monkeypatch, "trainer.test_freq=-1", total=8)
    assert rec.updates == {s: 1 for s in range(1, 9)}
    assert series(rec, "off_grpo/sync_tensors_checked", [4, 8]) == [8.0, 8.0]
    # the one tensor both ranks hold whole (layers.1.bias) compared across them, on each of 2 replicas
    assert series(rec, "off_grpo/sync_copies_compared", [4, 8]) == [2.0, 2.0]
    # and with the trainer's cast: that bias whole on each rank, the three sliced tensors by their two parts' sums;
    # 4 tensors × 2 ranks × 2 replicas
    assert series(rec, "off_grpo/sync_tensors_exact", [4, 8]) == [16.0, 16.0]


def test_a_window_sync_that_leaves_a_tensor_unloaded_stops_on_the_trainers_cast(ray_local, monkeypatch):
    """Window (level-2 sleep between windows), TP = 1: at the sync of step 8 rank 0 loads π_8 except layers.0.weight,
    which keeps what the wake left in its memory. Every rule on "changed" passes (that memory is not π_4's either),
    but the tensor is not the trainer's cast: stopped at step 8, naming it and nothing else."""
    import functools

    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    monkeypatch.setattr(fakes, "make_cluster",
                        functools.partial(fakes.make_cluster, load_at={8: {0: (8, ("layers.0.weight",))}}))
    with pytest.raises(ServedPolicyError, match=r"step 8: after the weight sync vLLM's replica 0 of 2 \(2 of 2 replicas "
                                                r"alike\) serves layers.0.weight \(TP rank 0\) unlike the trainer's "
                                                r"weights cast to bfloat16, which it matched at the sync of step 4"):
        run_fit(monkeypatch, "trainer.test_freq=-1", total=12)


def fit_telling(monkeypatch, caplog, about, total=8):
    """Run the fake cluster's V1 fit for ``total`` steps; the run and the plugin's warnings that contain ``about``."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        rec = run_fit(monkeypatch, "trainer.test_freq=-1", total=total)
    return rec, [r.getMessage() for r in caplog.records if about in r.getMessage()]


def test_the_cast_rule_says_when_it_compares_nothing_and_fails_alone(ray_local, monkeypatch, caplog):
    """Nothing comparable (no trainer tensor placed in a vLLM tensor held whole): one warning at the first sync, no
    ``sync_tensors_exact``, the other rules on. The comparison itself failing: a warning, this rule off, the others
    still checking every sync."""
    from verl_offgrpo.sync import served_cast

    monkeypatch.setattr(served_cast, "composed_fingerprints", lambda *args: {})
    rec, told = fit_telling(monkeypatch, caplog, "compares no tensor")
    assert len(told) == 1 and "the other sync rules stay on" in told[0]
    assert series(rec, "off_grpo/sync_tensors_exact", [4, 8]) == [None, None]
    assert series(rec, "off_grpo/sync_tensors_checked", [4, 8]) == [8.0, 8.0]

    def broken(*args):
        raise AttributeError("'DeviceMesh' object has no attribute 'size'")

    monkeypatch.setattr(served_cast, "composed_fingerprints", broken)
    rec, told = fit_telling(monkeypatch, caplog, "could not compare vLLM's weights")
    assert len(told) == 1 and "'DeviceMesh' object has no attribute 'size'" in told[0]
    assert rec.updates == {s: 1 for s in range(1, 9)}
    assert series(rec, "off_grpo/sync_tensors_checked", [4, 8]) == [8.0, 8.0]
    assert series(rec, "off_grpo/sync_verify_failed", [4, 8]) == [None, None]


def test_the_first_sync_after_the_trainer_moved_reads_the_engines_layout(ray_local, monkeypatch, caplog):
    """The first sync whose trainer weights changed (step 4: π_0 → π_4, values off the bf16 grid for the first time)
    is read as the engine's layout, as the first sync is: a tensor unlike the cast there (layers.0.weight left
    unloaded on rank 0 of both replicas) is left out with a warning naming it, and the run goes on, comparing the other
    three tensors of each replica at step 8."""
    serve_at_sync_4(monkeypatch, {0: (4, ("layers.0.weight",))})
    rec, told = fit_telling(monkeypatch, caplog, "unlike the trainer's cast", total=12)
    assert rec.updates == {s: 1 for s in range(1, 13)}
    assert series(rec, "off_grpo/sync_tensors_exact", [4, 8]) == [6.0, 6.0]
    assert told == ["verl-offgrpo: at the sync of step 4 vLLM holds 1 tensor(s) unlike the trainer's cast to bfloat16 "
                    "(layers.0.weight): its loader stores something else for them, or the sync did not reach them; the "
                    "exact check of each sync leaves them out for this run (6 tensor copies still compared)."]


def test_tensors_an_engine_stores_other_than_the_cast_are_left_out_at_the_first_sync(ray_local, monkeypatch, caplog):
    """An engine whose loader stores layers.1.bias one ulp off the cast (as a model's own loader or a float32 tensor
    would differ): the first sync reads that as the engine's layout, one warning names the tensor, and the run goes
    on comparing the other three tensors on each replica (no second warning at step 4, the first sync after the
    trainer moved: the bias was left out already)."""
    original = fakes.FakeVLLMServer.receive_weights

    async def transforming(self, version, policy=None):
        await original(self, version, policy)
        for worker in self.workers:
            worker.perturb(param=3, element=0)

    monkeypatch.setattr(fakes.FakeVLLMServer, "receive_weights", transforming)
    rec, told = fit_telling(monkeypatch, caplog, "unlike the trainer's cast")
    assert rec.updates == {s: 1 for s in range(1, 9)}
    assert series(rec, "off_grpo/sync_tensors_exact", [4, 8]) == [6.0, 6.0]
    assert told == ["verl-offgrpo: at the sync of step 0 vLLM holds 1 tensor(s) unlike the trainer's cast to "
                    "bfloat16 (layers.1.bias): its loader stores something else for them, or the sync did not reach "
                    "them; the exact check of each sync leaves them out for this run (6 tensor copies still compared)."]


@pytest.mark.parametrize("schedule", ["window", pytest.param("per_step", marks=pytest.mark.slow)])
def test_a_sliced_tensor_the_sync_left_stale_on_one_tp_rank_stops(ray_local, monkeypatch, schedule):
    """Rollout TP = 2: at the sync of step 8 rank 1 keeps its slice of layers.1.weight (a row-parallel matrix: each
    rank holds half its columns), everything else arrives. Rank 1 changed (its other tensors), rank 0 changed that
    tensor, and a 2-D tensor is not compared across ranks: only the sums of the two parts against the trainer's
    tensor show it. Stopped at step 8 in either schedule (per_step: rank 1 keeps π_4's slice; a window: what the
    wake left in its memory)."""
    import functools

    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    monkeypatch.setattr(fakes, "make_cluster", functools.partial(
        fakes.make_cluster, tp=2, load_at={8: {1: (8, ("layers.1.weight",))}}))
    stopped = pytest.raises(ServedPolicyError, match=r"step 8: after the weight sync vLLM's replica 0 of 2 \(2 of 2 "
                                                     r"replicas alike\) serves layers.1.weight \(TP ranks 0, 1\) unlike")
    stops_at_sync_4(monkeypatch, schedule, stopped, steps=12)


@pytest.mark.parametrize("schedule", ["per_step", pytest.param("window", marks=pytest.mark.slow)])
def test_a_sync_that_reaches_only_some_tp_ranks_stops(ray_local, monkeypatch, schedule):
    """Rollout TP = 2: at the sync of step 4 rank 0 loads π_4 as sent, rank 1 keeps π_0. The replica as a whole
    changed, but rank 1 would sample with four-update-old shards: stopped, naming the rank, in either schedule."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    serve_at_sync_4(monkeypatch, {1: 0}, tp=2)
    stopped = pytest.raises(ServedPolicyError, match=r"step 4: the weight sync did not reach vLLM: .* the vLLM workers "
                                                     r"of replica 0 of 2 \(TP rank 1\) \(2 of 2 replicas alike\) serve")
    stops_at_sync_4(monkeypatch, schedule, stopped)


def test_a_sync_that_reaches_every_rank_with_some_tensors_only_stops(ray_local, monkeypatch):
    """At the sync of step 4 every vLLM rank loads π_4 except ``layers.1.bias``, which keeps π_0's: each rank changed
    (the rank rule passes) but a tensor the trainer changed did not arrive: stopped, naming it (per_step, level-1
    sleep, where the old tensor would be served). Rollout TP = 2 with one rank missing it is left to the rank rule:
    the other rank's copy changed, and a slice may honestly keep its bits."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    serve_at_sync_4(monkeypatch, {0: (4, ("layers.1.bias",))})
    stopped = pytest.raises(ServedPolicyError, match=r"^verl-offgrpo: step 4: the weight sync reached vLLM only in part: "
                                                     r"the trainer changed layers\.1\.bias since the sync of step 0, "
                                                     r"but no vLLM worker of replica 0 of 2 \(2 of 2 replicas alike\)")
    stops_at_sync_4(monkeypatch, "per_step", stopped)


@pytest.mark.parametrize("schedule", ["per_step", pytest.param("window", marks=pytest.mark.slow)])
def test_a_sync_that_reaches_one_tp_rank_without_a_tensor_it_holds_whole_stops(ray_local, monkeypatch, schedule):
    """Rollout TP = 2: at the sync of step 4 rank 1 loads π_4 except ``layers.1.bias`` (held whole on both ranks),
    which keeps π_0's. Each rank changed (the rank rule passes) and rank 0 changed the bias (the per-tensor rule
    passes), but the two copies now differ: stopped, naming the tensor and the rank."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    serve_at_sync_4(monkeypatch, {1: (4, ("layers.1.bias",))}, tp=2)
    stopped = pytest.raises(ServedPolicyError, match=r"^verl-offgrpo: step 4: the weight sync reached vLLM's TP ranks "
                                                     r"unequally: every rank of replica 0 of 2 \(2 of 2 replicas alike\) "
                                                     r"holds layers\.1\.bias whole, but TP rank 1 serves a copy unlike "
                                                     r"the first rank's, so the sync reached some of them")
    stops_at_sync_4(monkeypatch, schedule, stopped)


def test_a_tp_run_with_no_whole_tensor_named_as_the_trainers_says_so_once(ray_local, monkeypatch, caplog):
    """Rollout TP = 2 where no 1-D tensor both ranks hold whole has the trainer's name and size (think: a multimodal
    model's other naming; here the trainer's sizes hidden): one warning (the rule is off: a user who runs with the
    check must see it), no metric, the run goes on."""
    import functools

    from verl_offgrpo.sync import sync_reached

    monkeypatch.setattr(sync_reached, "trainer_numels", lambda tensors: {})
    monkeypatch.setattr(fakes, "make_cluster", functools.partial(fakes.make_cluster, tp=2))
    with caplog.at_level(logging.INFO, logger="verl_offgrpo"):
        rec = run_fit(monkeypatch, "trainer.test_freq=-1", total=8)
    assert rec.updates == {s: 1 for s in range(1, 9)}
    assert series(rec, "off_grpo/sync_copies_compared", [4, 8]) == [None, None]
    told = [r.getMessage() for r in caplog.records if "does not compare the ranks' copies" in r.getMessage()]
    assert len(told) == 1 and told[0].startswith("verl-offgrpo: no 1-D tensor that every vLLM TP rank holds whole")
    assert [r.levelno for r in caplog.records if "does not compare the ranks' copies" in r.getMessage()] == [logging.WARNING]


def test_without_the_answers_the_sync_check_is_off_loudly(ray_local, monkeypatch, caplog):
    """verl's own collective_rpc drops vLLM's answers (the plugin's patch not in place): the check cannot tell, so
    it says so in a warning, logs off_grpo/sync_verify_failed once and is off; the run goes on."""
    monkeypatch.setattr(fakes.FakeVLLMServer, "collective_rpc", fakes.VERL_COLLECTIVE_RPC)
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        rec = run_fit(monkeypatch, "trainer.test_freq=-1", total=8)
    assert rec.updates == {s: 1 for s in range(1, 9)}
    assert series(rec, "off_grpo/sync_verify_failed", [4, 8]) == [1.0, None]
    assert series(rec, "off_grpo/trainer_changed", [4, 8]) == [None, None]
    [line] = [r.getMessage() for r in caplog.records if "could not check that the sync" in r.getMessage()]
    assert "step 4" in line and "instead of one record per vLLM worker" in line


SKIP = ("algorithm.off_grpo.skip_old_log_prob=true", f"actor_rollout_ref.actor.ppo_mini_batch_size={B}")


@pytest.mark.parametrize("overrides", [(), pytest.param(SKIP, marks=pytest.mark.slow)], ids=["default", "skip_old_log_prob"])
def test_guard_stops_a_window_sampled_from_lost_weights(ray_local, monkeypatch, overrides):
    """If vLLM served garbage for a window (here: weights discarded behind the plugin's back after the
    sync), the window's first step stops before its update; with ``skip_old_log_prob`` too, since that
    lag-0 batch keeps verl's pass."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    original = fakes.FakeVLLMServer.receive_weights

    async def lossy(self, version, policy=None):
        await original(self, version, policy)
        if version == 4:
            self.weights = "garbage"

    monkeypatch.setattr(fakes.FakeVLLMServer, "receive_weights", lossy)
    with pytest.raises(ServedPolicyError, match="step 5"):
        run_fit(monkeypatch, *overrides, "trainer.test_freq=-1", total=8)


def test_skip_old_log_prob_bypasses_verls_pass_on_lagged_batches_only(ray_local, monkeypatch):
    """v=4, 8 steps, validation after step 6 (a forced sync inside the window 5-8): verl's old-log-prob pass
    and advantage run in verl's bypass mode exactly on the lagged batches (lag 1-3 by the window's own
    count), normal on the lag-0 batches the guard checks; the bound monitor's r' terms of a skipped batch are the
    loss's, read after its update (the advantage stage's are dropped); the flag is restored after each call; the
    actor's loss is told (policy_loss.pi_k_from_forward)."""
    from verl_offgrpo.sync.alpha_guard import SEQ_STATISTIC, STATISTIC
    from verl_offgrpo.sync.old_log_prob_skip import SKIPPED

    rec = run_fit(monkeypatch, *SKIP, "trainer.test_freq=6", total=8, rprime_seq=lambda step: 0.05)
    steps = range(1, 9)
    lagged = [False, True, True, True, False, True, True, True]
    assert series(rec, "off_grpo/rollout_lag", steps) == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [rec.bypass[s] for s in steps] == [{"old_log_prob": b, "advantage": b} for b in lagged]
    assert series(rec, SKIPPED, steps) == [float(b) for b in lagged]
    assert all(rec.logged[s][STATISTIC] == 0.01 for s in steps)  # lag 0: the advantage stage's; else the loss's
    assert [rec.logged[s].get("off_grpo/bound/tv_token") for s in steps] == [0.02 if b else None for b in lagged]
    assert [rec.logged[s].get("off_grpo/bound/tv_seq") for s in steps] == [0.3 if b else None for b in lagged]
    # the largest response's mean: the advantage stage's at lag 0; none after a skipped batch's update (not 0)
    assert [rec.logged[s].get(SEQ_STATISTIC) for s in steps] == [None if b else 0.05 for b in lagged]
    assert rec.updates == {s: 1 for s in steps}
    assert rec.trainer.config.algorithm.rollout_correction.bypass_mode is False
    assert rec.trainer.config.actor_rollout_ref.actor.policy_loss.pi_k_from_forward is True


def test_a_skipped_batch_meets_the_guard_after_its_update(ray_local, monkeypatch):
    """No r' before the update of a skipped batch: the guard reads the loss's mean |log r'| after it, one update
    late: in a window the lagged limit marks it (off_grpo/guard/lagged_over_limit), a NaN stops the run."""
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    rec = run_fit(monkeypatch, *SKIP, "trainer.test_freq=-1", total=4, rprime=lambda step: 5.0 if step == 3 else 0.01)
    assert series(rec, "off_grpo/guard/lagged_over_limit", range(1, 5)) == [None, 0.0, 1.0, 0.0]
    assert series(rec, "off_grpo/old_log_prob_skipped", range(1, 5)) == [0.0, 1.0, 1.0, 1.0]
    with pytest.raises(ServedPolicyError, match=r"step 2: .* is nan"):
        run_fit(monkeypatch, *SKIP, "trainer.test_freq=-1", total=8,
                rprime=lambda step: float("nan") if step == 2 else 0.01)


def test_a_batch_of_more_than_one_optimizer_step_keeps_verls_pass_with_one_warning(ray_local, monkeypatch, caplog):
    """One row more than ppo_mini_batch_size × n (an agent loop with two outputs a session, a critic's padding):
    π_θ would move before the second mini-batch, so verl's pass runs on every batch, said once."""
    import logging

    from verl_offgrpo.sync.old_log_prob_skip import SKIPPED

    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.sync.trainer_v1"):
        rec = run_fit(monkeypatch, *SKIP, "trainer.test_freq=-1", total=5, extra_rows=1)
    assert [rec.bypass[s]["old_log_prob"] for s in range(1, 6)] == [False] * 5
    assert series(rec, SKIPPED, range(1, 6)) == [0.0] * 5
    lines = [r.getMessage() for r in caplog.records if "skip_old_log_prob" in r.getMessage()]
    assert len(lines) == 1 and "9 rows are more than one optimizer step" in lines[0]


def test_skip_old_log_prob_off_runs_verls_pass_every_step_and_logs_nothing_new(ray_local, monkeypatch):
    from verl_offgrpo.sync.old_log_prob_skip import SKIPPED

    rec = run_fit(monkeypatch, "trainer.test_freq=-1", total=4)
    assert [rec.bypass[s] for s in range(1, 5)] == [{"old_log_prob": False, "advantage": False}] * 4
    assert all(SKIPPED not in rec.logged[s] for s in range(1, 5))
    assert "pi_k_from_forward" not in rec.trainer.config.actor_rollout_ref.actor.policy_loss


CUSTOM_SAMPLER = ["+trainer.v1.sampler.custom_sampler.path=my_sampler.py", "+trainer.v1.sampler.custom_sampler.name=MySampler"]


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "overrides, match",
    [
        (["trainer.use_v1=false", f"+actor_rollout_ref.rollout.checkpoint_manager_class={fakes.V0_MANAGER_FQN}"],
         "V1 trainer"),
        (["+trainer.v1.sync.parameter_sync_step=2"], "parameter_sync_step"),
        # verl's async modes generate on their own schedule: the window is the plugin's synchronous mode's
        *[([f"trainer.v1.trainer_mode={mode}"], rf"^algorithm.off_grpo.rollout_schedule=window needs "
           rf"trainer.v1.trainer_mode=off_grpo_sync \(got '{mode}'\): set it, or ") for mode in ("colocate_async", "separate_async")],
        (["algorithm.filter_groups.enable=true"], "filter_groups"),
        (["trainer.test_freq=5", "algorithm.off_grpo.sync_before_validate=false"], "sync_before_validate"),
        # a gen_batch_size that does not divide the batch: verl's V1 fetch fails (refill_checks), window or not
        (["data.train_batch_size=6", "+data.gen_batch_size=4"], r"^data.gen_batch_size=4 must divide data.train_batch_size=6"),
        (CUSTOM_SAMPLER, r"not a custom sampler .*: drop trainer.v1.sampler.custom_sampler, or "),
        # validating after step 5 (test_freq 5, v 4): step 5's batch and steps 6-8's, 4·10·5 = 200, plus 10·5 of a
        # validation batch = 250 > 249 (≥ 200 = v·B·n, the window alone)
        (["trainer.test_freq=5", "data.train_batch_size=10", "actor_rollout_ref.rollout.n=5",
          "data.val_batch_size=10", "actor_rollout_ref.rollout.val_kwargs.n=5",
          "transfer_queue.backend.SimpleStorage.total_storage_size=249"],
         r"validation batch .* beside the window's samples still in verl's TransferQueue, 250 in all, more than .*=249: raise it \(host memory\), "
         r"lower data.val_batch_size, or algorithm.off_grpo.rollout_schedule=per_step\.$"),
        (["data.train_batch_size=10", "actor_rollout_ref.rollout.n=5",
          "transfer_queue.backend.SimpleStorage.total_storage_size=199"],
         r"^algorithm.off_grpo.rollout_schedule=window holds a window's v·B·n = 200 samples .*: raise it \(host memory\), "
         r"or algorithm.off_grpo.rollout_schedule=per_step\.$"),
    ],
)
def test_window_rejects_what_it_cannot_honour_in_the_driver(overrides, match):
    """Through the plugin's startup check (what main_ppo's driver runs before Ray starts)."""
    cfg = fakes.compose_cfg("algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.rollout_schedule=window", *overrides)
    with pytest.raises(OffGRPOConfigError, match=match):
        validate_off_grpo_config(cfg)


@pytest.mark.parametrize("test_freq, period, held", [(5, 4, 4), (4, 4, 1), (2, 4, 3), (6, 4, 3), (3, 10, 10)])
def test_the_validation_peak_counts_the_batches_a_window_still_holds(test_freq, period, held):
    """By hand: verl validates after step s before clearing its batch, and the window runs to the next multiple
    of v. test_freq 5, v 4: after step 5, steps 5-8 (4 batches); test_freq 4: only step 4's own; test_freq 2
    (or 6), v 4: after steps 2, 6, 10, ... (6-8: 3 batches); test_freq 3, v 10: after step 21, steps 21-30 (10)."""
    from verl_offgrpo.config.window_checks import validation_peak

    assert validation_peak(period, test_freq, 50, 7) == held * 50 + 7


@pytest.mark.parametrize("test_freq, total, held", [(4, 10, 7), (10, 10, 1), (20, 10, 1), (1, 10, 10)])
def test_the_validation_peak_of_a_run_shorter_than_v_is_its_one_window(test_freq, total, held):
    """T below v: one window, steps 1..T. test_freq 4, T 10: after step 4, steps 4-10 (7 batches; the periodic
    formula at v = 1000 would say 1000 − 4 + 1); test_freq 10 or 20: only the last step's validation, 1 batch."""
    from verl_offgrpo.config.window_checks import validation_peak

    assert validation_peak(1000, test_freq, 50, 7, total) == held * 50 + 7


@pytest.mark.parametrize("test_freq, period, total, held", [(3, 4, 6, 2), (3, 4, 11, 3), (3, 4, 12, 4), (3, 4, 20, 4),
                                                       (2, 4, 9, 3), (5, 4, 7, 3), (4, 4, 6, 1)])
def test_the_validation_peak_of_a_run_that_ends_before_the_periodic_worst_case(test_freq, period, total, held):
    """By hand, windows 1-4, 5-8, 9-12, … cut at T; verl validates after every test_freq-th step and after T.
    test_freq 3, v 4: after step 3 steps 3-4 are held (2), after 6 steps 6-8 (3), after 9 steps 9-12 (4, the
    periodic worst case v − gcd + 1). T = 6: 2 (and 1 after 6 = T); T = 11: 3 (9-11); T = 12 or 20: 4.
    test_freq 2, v 4, T 9: after 2, steps 2-4 (3). test_freq 5, v 4, T 7: after 5, steps 5-7 (3; 4 needs step 8).
    The periodic formula alone said 4 for T = 6, 11 and the test_freq 5 run, refusing a storage that holds them.
    test_freq 4, v 4, T 6: after step 4 only its own batch (a multiple of v ends its window), after 6 = T only step
    6's (the window 5-8 cut at T): 1."""
    from verl_offgrpo.config.window_checks import validation_peak

    assert validation_peak(period, test_freq, 50, 7, total) == held * 50 + 7


def test_a_validation_batch_that_fits_beside_the_window_passes():
    """Validating only at a window's end (test_freq 4 = v) leaves step s's batch alone: 50 + 10·5·3 = 200 fits a
    storage of 200 (as does the window's v·B·n = 200); without test_freq or with an unknown val_batch_size
    (verl's null: the whole val set) it adds nothing."""
    common = ("algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.rollout_schedule=window", "data.train_batch_size=10",
              "actor_rollout_ref.rollout.n=5", "actor_rollout_ref.rollout.val_kwargs.n=5")
    for extra in (["trainer.test_freq=4", "data.val_batch_size=30", "transfer_queue.backend.SimpleStorage.total_storage_size=200"],
                  ["trainer.test_freq=-1", "data.val_batch_size=20", "transfer_queue.backend.SimpleStorage.total_storage_size=200"],
                  ["trainer.test_freq=5", "transfer_queue.backend.SimpleStorage.total_storage_size=200"]):
        assert validate_off_grpo_config(fakes.compose_cfg(*common, *extra)).rollout_schedule == "window"
    # one more validation sample than fits
    cfg = fakes.compose_cfg(*common, "trainer.test_freq=4", "data.val_batch_size=31",
                            "transfer_queue.backend.SimpleStorage.total_storage_size=204")
    with pytest.raises(OffGRPOConfigError, match="205 in all, more than .*=204"):
        validate_off_grpo_config(cfg)
    # test_freq 3 over T = 6 steps: at most steps 3-4 held beside the validation, 2·50 + 150 = 250, not 4·50 + 150
    short = ("trainer.test_freq=3", "data.val_batch_size=30", "trainer.total_training_steps=6")
    cfg = fakes.compose_cfg(*common, *short, "transfer_queue.backend.SimpleStorage.total_storage_size=250")
    assert validate_off_grpo_config(cfg).rollout_schedule == "window"
    cfg = fakes.compose_cfg(*common, *short, "transfer_queue.backend.SimpleStorage.total_storage_size=249")
    with pytest.raises(OffGRPOConfigError, match="250 in all, more than .*=249"):
        validate_off_grpo_config(cfg)


def test_window_with_period_one_is_allowed_and_per_step_is_untouched():
    cfg = fakes.compose_cfg("algorithm.off_grpo.rollout_schedule=window")
    assert check_window_config(cfg).rollout_schedule == "window"
    cfg = fakes.compose_cfg("algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.rollout_schedule=per_step",
                            "+trainer.v1.sync.parameter_sync_step=2")
    assert check_window_config(cfg).rollout_schedule == "per_step"


def test_a_config_the_lagged_sync_refuses_gets_its_error_with_no_line_on_how_vllm_generates_first(caplog):
    """SGLang at v > 1 is refused by the sync checks; auto's line ("vLLM generates the rollouts of each
    window ...") must not come before that error, nor any other advisory."""
    import logging

    cfg = fakes.compose_cfg("algorithm.off_grpo.sync_period=4", "actor_rollout_ref.rollout.name=sglang")
    with caplog.at_level(logging.INFO), pytest.raises(OffGRPOConfigError, match="rollout.name=vllm only"):
        validate_off_grpo_config(cfg)
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("off_grpo")] == []
    # nor before a later check's error: a reference reset without a reference model
    caplog.clear()
    cfg = fakes.compose_cfg("algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.ref_reset_period=5",
                            "actor_rollout_ref.actor.use_kl_loss=false")
    with caplog.at_level(logging.INFO), pytest.raises(OffGRPOConfigError):
        validate_off_grpo_config(cfg)
    assert [r.getMessage() for r in caplog.records if "rollout_schedule" in r.getMessage()] == []


@pytest.mark.parametrize(
    "overrides, reason",
    [
        ([], None),
        (["algorithm.off_grpo.sync_period=1"], None),
        (["trainer.use_v1=false", f"+actor_rollout_ref.rollout.checkpoint_manager_class={fakes.V0_MANAGER_FQN}"],
         "runs in the V1 trainer mode off_grpo_sync only"),
        (["algorithm.filter_groups.enable=true"], "cannot refill filtered groups"),
        (["trainer.test_freq=5", "algorithm.off_grpo.sync_before_validate=false"], "validation needs a sync"),
        # a gen_batch_size that divides the batch: each step's batch is fetched in chunks, as per_step fetches it
        (["data.train_batch_size=6", "+data.gen_batch_size=3"], None),
        (CUSTOM_SAMPLER, "through verl's ReplayBuffer, not a custom sampler"),
        # dynamic sampling: verl fetches prompts one at a time (gen_batch_size 1), so the refill is the cause
        (["algorithm.filter_groups.enable=true", "data.train_batch_size=6", "+data.gen_batch_size=4"],
         "cannot refill filtered groups"),
        (["data.train_batch_size=10", "actor_rollout_ref.rollout.n=5",
          "transfer_queue.backend.SimpleStorage.total_storage_size=199"],
         "v·B·n = 200 samples at once in verl's TransferQueue, more than "
         "transfer_queue.backend.SimpleStorage.total_storage_size=199"),
    ],
)
def test_auto_takes_the_window_where_it_can_run_and_says_why_not(caplog, overrides, reason):
    """The default auto resolves, in the driver's check, to window at v > 1 where an explicit window would
    pass, else to per_step with one info line giving the window's refusal; never an error of its own."""
    import logging

    from verl_offgrpo.config import window_checks

    cfg = fakes.compose_cfg("algorithm.off_grpo.sync_period=4", *overrides)
    assert cfg.algorithm.off_grpo.rollout_schedule == "auto"
    with caplog.at_level(logging.INFO, logger=window_checks.logger.name):
        knobs = validate_off_grpo_config(cfg)
    lines = [r.getMessage() for r in caplog.records if "rollout_schedule=auto" in r.getMessage()]
    if knobs.sync_period == 1:
        assert knobs.rollout_schedule == "per_step" and lines == []
    elif reason is None:
        assert knobs.rollout_schedule == "window"
        assert lines == ["off_grpo: algorithm.off_grpo.rollout_schedule=auto: vLLM generates the rollouts of each "
                         "window of 4 steps at once (window); algorithm.off_grpo.rollout_schedule=per_step generates "
                         "every step."]
    else:
        assert knobs.rollout_schedule == "per_step"
        assert len(lines) == 1 and "generates every step at sync_period=4: the window (vLLM generating" in lines[0]
        assert "rollout_schedule=per_step" not in lines[0]  # the explicit window's fix: auto already does it
        assert [r.levelno for r in caplog.records if "rollout_schedule=auto" in r.getMessage()] == [logging.WARNING]
        assert reason in lines[0]
        # the fix the explicit window's error gives, without its "or per_step" (auto already generates every step)
        fix = lines[0].split("; for the window: ")[1].removesuffix(".")
        with pytest.raises(OffGRPOConfigError) as explicit:
            validate_off_grpo_config(fakes.compose_cfg("algorithm.off_grpo.sync_period=4", *overrides,
                                                       "algorithm.off_grpo.rollout_schedule=window"))
        assert f": {fix}" in str(explicit.value)


def documented_metric_names() -> set[str]:
    """Every name docs/metrics.md writes in backticks, ``{a,b}`` alternatives expanded."""
    import itertools
    import re
    from pathlib import Path

    names = set()
    for token in re.findall(r"`([^`\s]+)`", (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()):
        parts = re.split(r"(\{[^}]*\})", token)
        names.update("".join(c) for c in itertools.product(*[p[1:-1].split(",") if p.startswith("{") else [p]
                                                              for p in parts]))
    return names


def test_every_metric_the_plugins_trainer_logs_is_documented(ray_local, monkeypatch):
    """A run of the V1 trainer mode (window, a reference reset with its copy verified, resumed), one call of each
    loss, and every full name the package spells out: each plugin metric (``off_grpo/``, ``timing_s/off_grpo``,
    ``actor/off_grpo/``, ``actor/rec/``) is in docs/metrics.md."""
    import torch
    from test_policy_loss import actor_config, call_ppo_loss

    from verl_offgrpo.ref_reset import trainer as ref_trainer

    monkeypatch.setenv(ref_trainer.VERIFY_ENV, "1")
    monkeypatch.setattr(ref_trainer, "actor_workers", lambda trainer: ["worker"])
    monkeypatch.setattr(ref_trainer, "run_reset_on_workers",
                        lambda workers, verify=False: [{"bytes_written": 8, "max_abs_diff": 0.0}])
    rec = run_fit(monkeypatch, "trainer.test_freq=4", "algorithm.off_grpo.ref_reset_period=2",
                  "actor_rollout_ref.actor.use_kl_loss=true", start=2, total=8)
    logged = {key for row in rec.logged.values() for key in row}
    # and every full metric name the package's code spells out (per_step's served-weights check among them)
    import re
    from pathlib import Path

    import verl_offgrpo

    for path in Path(verl_offgrpo.__file__).parent.rglob("*.py"):
        logged |= set(re.findall(r'"((?:off_grpo/|timing_s/off_grpo|actor/off_grpo/|actor/rec/)[a-z_/]+)"',
                                 path.read_text()))
    for loss_mode in ("off_grpo", "rec"):
        n = 4
        _, metrics = call_ppo_loss(actor_config(loss_mode=loss_mode), log_prob=torch.full((1, n), -1.0, requires_grad=True),
                                   old_log_prob=torch.full((1, n), -1.0),
                                   advantages=torch.ones(1, n), response_mask=torch.ones(1, n, dtype=torch.int64),
                                   rollout_is_weights=torch.tensor([[1.5, 1.0, 1.0, 1.0]]))
        logged |= set(metrics)
    ours = sorted(k for k in logged if k.startswith(("off_grpo/", "timing_s/off_grpo", "actor/off_grpo/", "actor/rec/"))
                  and not k.endswith("/"))  # a prefix the code builds names from
    assert "off_grpo/ref_reset_on_resume" in ours and "off_grpo/weights_verified" in ours
    assert [k for k in ours if k not in documented_metric_names()] == []


# ----------------------------------------------------------------------------- which prompts a step trains on
def prompt_pipeline(monkeypatch, num_prompts=24, gen_batch_size=None):
    """verl's own ``_add_prompts_to_generate`` (dataloader fetch in ``gen_batch_size`` chunks, prompt tags) and sync
    ``ReplayBuffer.sample`` over a TransferQueue stand-in where every submitted group finishes at once; a seeded
    ``StatefulDataLoader`` (verl's: batches of gen_batch_size or B) over prompts whose ``idx`` is their dataset
    position. Returns (trainer stand-in, sample(step) -> idx list, make_loader)."""
    import torch
    from omegaconf import OmegaConf
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.v1 import replay_buffer as rbm
    from verl.trainer.ppo.v1 import trainer_base
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils.dataset.rl_dataset import collate_fn

    store: dict = {"train": {}}
    tq = SimpleNamespace(
        kv_list=lambda partition_id=None: {p: dict(items) for p, items in store.items()},
        kv_clear=lambda keys, partition_id: [store[partition_id].pop(k, None) for k in keys],
        kv_batch_put=lambda keys, partition_id, tags, **kw: store[partition_id].update(zip(keys, tags)),
    )
    monkeypatch.setattr(rbm, "tq", tq)
    monkeypatch.setattr(trainer_base, "tq", tq)
    dataset = [{"raw_prompt": f"p{i}", "idx": torch.tensor(i)} for i in range(num_prompts)]
    idx_of = {}

    def finish(batch):  # the agent loop: n=2 samples a prompt, finished at once, the prompt's tag kept
        for uid, idx in zip(batch["uid"], batch["idx"].tolist()):
            store["train"][uid] = {**store["train"][uid], "status": "finished"}
            idx_of[uid] = idx
            for session in range(2):
                store["train"][f"{uid}_{session}_0"] = {"seq_len": 8}

    def make_loader():
        return StatefulDataLoader(dataset, batch_size=gen_batch_size or B, drop_last=True, collate_fn=collate_fn,
                                  sampler=torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(0)))

    trainer = SimpleNamespace(config=OmegaConf.create({"data": {"train_batch_size": B, "gen_batch_size": gen_batch_size}}),
                              train_dataloader=make_loader(), train_dataloader_it=None, global_steps=0,
                              trainer_mode="sync", agent_loop_manager=SimpleNamespace(generate_sequences=finish))
    for name in ("_fetch_one_gen_batch", "_next_train_batch", "_submit_batch_to_rollout", "_add_prompts_to_generate"):
        setattr(trainer, name, getattr(PPOTrainer, name).__get__(trainer))
    buffer = rbm.ReplayBuffer(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
                              max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}),
                              train_batch_size=B, gen_batch_size=gen_batch_size or B)

    def sample(step):
        batch, _ = buffer.sample(global_steps=step, partition_id="train", batch_size=B)
        tq.kv_clear(batch.keys, "train")
        return sorted({idx_of[key.split("_")[0]] for key in batch.keys})

    return trainer, sample, make_loader


@pytest.mark.parametrize("gen_batch_size", [None, 1])
def test_each_step_of_a_window_trains_on_the_batch_per_step_would_give_it(monkeypatch, gen_batch_size):
    """Through verl's real prompt submission and sync replay buffer: the window's v batches are tagged with their
    steps, so step s of the window samples exactly the dataloader batch step s samples with per_step (one tag for
    the whole window would let the buffer split it at random); also where verl fetches each batch in
    ``data.gen_batch_size`` chunks (1 of B = 2 here: two fetches a step)."""
    from verl_offgrpo.sync.trainer_v1 import submit_window

    trainer, sample, _ = prompt_pipeline(monkeypatch, gen_batch_size=gen_batch_size)
    per_step = []
    for step in range(1, 5):
        trainer.global_steps = step
        trainer._add_prompts_to_generate(B)
        per_step.append(sample(step))
    assert trainer.train_dataloader.state_dict()["_num_yielded"] == 4 * B // (gen_batch_size or B)
    trainer, sample, _ = prompt_pipeline(monkeypatch, gen_batch_size=gen_batch_size)
    trainer.global_steps = 1
    submit_window(trainer, 1, 4)
    assert trainer.global_steps == 1
    assert [sample(step) for step in range(1, 5)] == per_step
    assert len({i for batch in per_step for i in batch}) == 4 * B


def test_a_checkpoint_inside_a_window_resumes_with_the_prompts_not_yet_trained(monkeypatch):
    """A checkpoint at step 2 of the window 1-4 saves the dataloader state after step 2's batch, not after the
    window's: a resume fetches steps 3-4's prompts again, so the epoch's prompts are each trained once."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from verl_offgrpo.sync.trainer_v1 import OffGRPOSyncTrainer, submit_window

    trainer, sample, make_loader = prompt_pipeline(monkeypatch)
    trainer.global_steps = 1
    states = submit_window(trainer, 1, 4)
    window = [sample(step) for step in range(1, 5)]
    saved = []
    monkeypatch.setattr(PPOTrainerSync, "_save_checkpoint", lambda self: saved.append(self.train_dataloader.state_dict()))
    plugin = object.__new__(OffGRPOSyncTrainer)
    plugin.windowed, plugin.window_data_states = True, states
    plugin.global_steps, plugin.train_dataloader = 2, trainer.train_dataloader
    plugin._save_checkpoint()
    assert "state_dict" not in vars(trainer.train_dataloader)  # verl's own method again after the save
    resumed, sample, _ = prompt_pipeline(monkeypatch)
    resumed.train_dataloader.load_state_dict(saved[0])
    resumed.global_steps = 3
    submit_window(resumed, 3, 2)
    assert [sample(step) for step in (3, 4)] == window[2:]
    plugin.windowed = False  # per_step: verl's save as it is
    plugin._save_checkpoint()
    assert saved[1] == trainer.train_dataloader.state_dict() != saved[0]


def test_a_window_is_at_most_the_runs_steps_long(caplog):
    """trainer.total_training_steps = T below v ends the one window at T (``window.window_length``): the storage
    check counts T·B·n (the newcomer's v = 1000, T = 100 was refused for v·B·n), one step more than fits is still
    refused, and a warning says vLLM serves the first step's weights all run."""
    common = ("algorithm.off_grpo.rollout_schedule=window", "data.train_batch_size=10", "actor_rollout_ref.rollout.n=5",
              "trainer.test_freq=-1", "transfer_queue.backend.SimpleStorage.total_storage_size=200")
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.config"):
        knobs = validate_off_grpo_config(fakes.compose_cfg("algorithm.off_grpo.sync_period=1000",
                                                           "trainer.total_training_steps=4", *common))
    assert knobs.rollout_schedule == "window"
    assert ("algorithm.off_grpo.sync_period=1000 is not below trainer.total_training_steps=4: vLLM serves the first "
            "step's weights the whole run (a lag of up to 3 steps") in caplog.text
    with pytest.raises(OffGRPOConfigError, match=r"holds a window's T·B·n = 250 samples .*=200"):
        validate_off_grpo_config(fakes.compose_cfg("algorithm.off_grpo.sync_period=1000",
                                                   "trainer.total_training_steps=5", *common))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.config"):  # v = T: the sync would come after the run
        validate_off_grpo_config(fakes.compose_cfg("algorithm.off_grpo.sync_period=4", "trainer.total_training_steps=4",
                                                   *common))
    assert "sync_period=4 is not below trainer.total_training_steps=4" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.config"):  # v below T: no warning, v·B·n counted
        validate_off_grpo_config(fakes.compose_cfg("algorithm.off_grpo.sync_period=4", "trainer.total_training_steps=5",
                                                   *common))
    assert "is not below trainer.total_training_steps" not in caplog.text


@pytest.mark.parametrize("quantized", ["+actor_rollout_ref.rollout.engine_kwargs.vllm.quantization=awq",
                                       "actor_rollout_ref.rollout.quantization=fp8",
                                       "actor_rollout_ref.actor.fsdp_config.qat.enable=true"])
def test_a_quantized_rollout_turns_the_per_tensor_rules_off_whichever_key_sets_it(ray_local, monkeypatch, quantized):
    """vLLM quantizes with ``engine_kwargs.vllm.quantization`` as with ``rollout.quantization`` (verl merges
    engine_kwargs last; its knob takes fp8/torchao/ascend only): a quantized tensor may keep its bits through an honest
    change, so neither per-tensor rule runs (no ``sync_tensors_checked`` / ``_exact``), the run goes on."""
    rec = run_fit(monkeypatch, "trainer.test_freq=-1", quantized, total=8)
    assert rec.updates == {s: 1 for s in range(1, 9)}
    assert series(rec, "off_grpo/sync_tensors_checked", [4, 8]) == [None, None]
    assert series(rec, "off_grpo/sync_tensors_exact", [4, 8]) == [None, None]


@pytest.mark.parametrize("v, total, warns", [(5, 5, True), (6, 5, True), (4, 5, False), (1, 1, False), (10, 1, True), (10, 0, False),
                                             (10, None, False)])
def test_the_period_spans_the_run_exactly_when_v_is_not_below_t(caplog, v, total, warns):
    """v ≥ T (T set, ≥ 1) and v > 1: the next periodic sync would come at or after the last step. v = 1 syncs every
    step; T unset (verl derives it from the data) or 0 says nothing."""
    from verl_offgrpo.config.off_grpo import OffGRPOConfig
    from verl_offgrpo.config.sync_checks import tell_if_the_period_spans_the_run
    from verl_offgrpo.config.window_checks import longest_window

    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.config"):
        tell_if_the_period_spans_the_run({"trainer": {"total_training_steps": total}}, OffGRPOConfig(sync_period=v))
    assert ("is not below trainer.total_training_steps" in caplog.text) is warns
    assert longest_window({"trainer": {"total_training_steps": total}}, v) == (min(v, total) if total else v)


def test_a_run_shorter_than_v_validates_inside_its_one_window_and_says_its_length(caplog):
    """v = 1000, T = 4, test_freq 2: the one window's peak is after step 2, (4 − 2 + 1)·50 + 10·5 = 200 samples,
    which a storage of 200 holds (the periodic formula at v would count ≈ 1000 batches); the auto line names a window
    of 4 steps."""
    common = ("data.train_batch_size=10", "actor_rollout_ref.rollout.n=5", "data.val_batch_size=10",
              "actor_rollout_ref.rollout.val_kwargs.n=5", "transfer_queue.backend.SimpleStorage.total_storage_size=200",
              "algorithm.off_grpo.sync_period=1000", "trainer.total_training_steps=4", "trainer.test_freq=2")
    with caplog.at_level(logging.INFO, logger="verl_offgrpo.config"):
        assert validate_off_grpo_config(fakes.compose_cfg(*common)).rollout_schedule == "window"
    assert "vLLM generates the rollouts of each window of 4 steps at once (window)" in caplog.text
    with pytest.raises(OffGRPOConfigError, match="250 in all, more than .*=200"):  # test_freq 1: steps 1-4 + val
        validate_off_grpo_config(fakes.compose_cfg(*common, "trainer.test_freq=1",
                                                   "algorithm.off_grpo.rollout_schedule=window"))


def test_an_fsdp2_actor_takes_the_lag():
    from verl_offgrpo.config import check_sync_config

    cfg = fakes.compose_cfg("algorithm.off_grpo.sync_period=4", "actor_rollout_ref.actor.strategy=fsdp2")
    assert check_sync_config(cfg).sync_period == 4


@pytest.mark.parametrize("unchecked", ["algorithm.off_grpo.verify_served_weights=false",
                                       "actor_rollout_ref.rollout.data_parallel_size=2"])
def test_a_window_whose_sync_is_not_checked_on_every_engine_keeps_the_lagged_limit_an_error(ray_local, monkeypatch,
                                                                                          unchecked):
    """A window's lagged batches may only warn where the exact check saw its sync reach every vLLM worker: a stale
    data-parallel engine among E moves the lag-0 batch's mean |log r'| by 1/E of its drift only. With the check off
    (by the knob, or at rollout.data_parallel_size > 1, where collective_rpc answers for one engine only) the lagged
    limit stops the run, as per_step without the exact check does (start-up says so at DP > 1: the test below)."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl_offgrpo.sync.alpha_guard import ServedPolicyError

    # the fakes' sampler asks for train_batch_size prompts a step (verl's asks for gen_batch_size × DP)
    monkeypatch.setattr(PPOTrainer, "_add_batch_to_generate",
                        lambda self: self._add_prompts_to_generate(int(self.config.data.train_batch_size)))
    with pytest.raises(ServedPolicyError, match="step 3"):
        run_fit(monkeypatch, "trainer.test_freq=-1", unchecked, "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                "trainer.n_gpus_per_node=2", total=4, rprime=lambda step: 2.0 if step == 3 else 0.01)


def test_a_window_without_vllm_sleep_mode_needs_vllm_awake_through_the_updates():
    """The window puts vLLM to sleep between windows (verl's ``sleep`` while ``free_cache_engine``), which an engine
    started with ``enable_sleep_mode=false`` cannot; ``keep_weights=no_sleep`` does not change that in a window (the
    per_step refusal's advice): one line naming what does; with ``free_cache_engine=false`` it runs."""
    from _overrides import shipped_config

    no_sleep_mode = ("algorithm.off_grpo.sync_period=10", "+actor_rollout_ref.rollout.enable_sleep_mode=false")
    said = (r"with algorithm.off_grpo.rollout_schedule=window puts vLLM to sleep between windows, which "
            r"actor_rollout_ref.rollout.enable_sleep_mode=false cannot: set it true, or set "
            r"actor_rollout_ref.rollout.free_cache_engine=false \(vLLM then keeps its memory through every update\).$")
    for extra in ((), ("algorithm.off_grpo.keep_weights=no_sleep",), ("algorithm.off_grpo.rollout_schedule=window",)):
        with pytest.raises(OffGRPOConfigError, match=said):
            validate_off_grpo_config(shipped_config(*no_sleep_mode, *extra))
    validate_off_grpo_config(shipped_config(*no_sleep_mode, "actor_rollout_ref.rollout.free_cache_engine=false"))
    with pytest.raises(OffGRPOConfigError, match=r"cannot sleep vLLM at level 1; set it true, or use "
                                                 r"algorithm.off_grpo.keep_weights=no_sleep.$"):  # per_step's own
        validate_off_grpo_config(shipped_config(*no_sleep_mode, "algorithm.off_grpo.rollout_schedule=per_step"))


def test_a_window_across_an_epoch_boundary_trains_on_the_prompts_per_step_would(monkeypatch):
    """6 prompts, B = 2: 3 steps an epoch; the window of steps 1-4 crosses into epoch 2 (the dataloader rolls over as
    verl's does). Window and per_step train on the same prompts in the same order, and each step's saved dataloader
    state is the one per_step saves (from an audit)."""
    from verl_offgrpo.sync.trainer_v1 import submit_window

    trainer, sample, _ = prompt_pipeline(monkeypatch, num_prompts=6)
    per_step, per_step_states = [], {}
    for step in range(1, 9):
        trainer.global_steps = step
        trainer._add_prompts_to_generate(B)
        per_step_states[step] = trainer.train_dataloader.state_dict()
        per_step.append(sample(step))
    trainer, sample, _ = prompt_pipeline(monkeypatch, num_prompts=6)
    states = {}
    for start in (1, 5):
        trainer.global_steps = start
        states.update(submit_window(trainer, start, 4))
    assert [sample(step) for step in range(1, 9)] == per_step
    assert sorted(sum(per_step[:3], [])) == list(range(6))  # one epoch is every prompt once
    assert {s: str(states[s]) for s in range(1, 9)} == {s: str(per_step_states[s]) for s in range(1, 9)}


def test_vllm_data_parallelism_is_said_at_start_up_for_a_window(caplog):
    """With rollout.data_parallel_size = 2 vLLM's collective_rpc answers for each replica's leader shard only: the
    start-up checks say the exact sync check is off and what then stops a lagged batch."""
    cfg = fakes.compose_cfg("algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.rollout_schedule=window",
                            f"data.train_batch_size={B}", "actor_rollout_ref.rollout.data_parallel_size=2")
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate_off_grpo_config(cfg)
    told = [r.getMessage() for r in caplog.records if "data_parallel_size" in r.getMessage()]
    assert told == ["off_grpo: actor_rollout_ref.rollout.data_parallel_size=2: vLLM's collective_rpc answers for each "
                    "replica's leader shard only, so the exact check that each sync reached vLLM is off: a lagged batch over algorithm.off_grpo.max_log_rprime_lagged stops the run."]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):  # the check off by its knob: nothing narrowed
        validate_off_grpo_config(fakes.compose_cfg("algorithm.off_grpo.sync_period=4", f"data.train_batch_size={B}",
                                                   "actor_rollout_ref.rollout.data_parallel_size=2",
                                                   "algorithm.off_grpo.rollout_schedule=window",
                                                   "algorithm.off_grpo.verify_served_weights=false"))
    assert not [r for r in caplog.records if "collective_rpc" in r.getMessage()]


@pytest.mark.parametrize("schedule, end", [
    # per_step: the leader's shard is checked exactly at each wake, the other shards' lagged batches by nothing
    ("per_step", "with algorithm.off_grpo.max_log_rprime_lagged=0 nothing checks the other shards' lagged batches."),
    # a window: no wake to check and its sync unchecked, so no shard's lagged batch is checked, the leader's included
    ("window", "with algorithm.off_grpo.max_log_rprime_lagged=0 nothing checks the window's lagged batches."),
])
def test_vllm_data_parallelism_without_the_lagged_limit_says_which_batches_go_unchecked(caplog, schedule, end):
    cfg = fakes.compose_cfg("algorithm.off_grpo.sync_period=4", f"algorithm.off_grpo.rollout_schedule={schedule}",
                            f"data.train_batch_size={B}", "actor_rollout_ref.rollout.data_parallel_size=2",
                            "algorithm.off_grpo.max_log_rprime_lagged=0")
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate_off_grpo_config(cfg)
    told = [r.getMessage() for r in caplog.records if "collective_rpc" in r.getMessage()]
    assert len(told) == 1 and told[0].endswith(end), told

