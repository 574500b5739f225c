"""benchmarks/learning.py's configuration list: every config's job composes through hydra over verl's real
config and passes verl's and the plugin's start-up checks; placeholders are refused; the update-counted
schedule (bigbatch's ten mini-batches a step, reuse's ten passes) reaches the job and the curves."""

from __future__ import annotations

import argparse
import json

import pytest

import learning
import mainppo_job

RUNNABLE = sorted(learning.CONFIGS)
REC_CONFIGS = ["rec_oneside_noIS", "rec_oneside_wide", "red_weight"]


def _args(**kw) -> argparse.Namespace:
    base = dict(batch=32, response_length=48, data_seed=1, lr=1e-5, n=8, temperature=1.0, steps=150, test_freq=10,
                trainer="v0", extra=[], keep_weights="sleep_level1", ckpt_dir=None, ckpt_only=None, save_freq=10)
    return argparse.Namespace(**{**base, **kw})


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    from verl_offgrpo.cli.paths import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        return compose(config_name="off_grpo_trainer", overrides=overrides)


def _hydra_value(value):
    """How an override's value reads back from the composed config."""
    return {"null": None, "false": False, "true": True}.get(value, value) if isinstance(value, str) else value


@pytest.mark.parametrize("name", RUNNABLE)
@pytest.mark.parametrize("trainer", ["v0", "v1"])
def test_every_config_composes_over_verls_config_and_passes_the_startup_checks(tmp_path, name, trainer):
    """Each runnable config's job, with ``--trainer`` v0 and v1 (a config that needs V1 runs V1 either way):
    its knobs arrive, the update-counted schedule becomes global steps, verl's and the plugin's checks pass.
    reuse_i10 also with the results page's update-cost ``--extra`` (no gradient checkpointing, no compile)."""
    import verl  # noqa: F401  (loads the plugin, which wraps validate_config)
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config  # the plugin's wrapper once verl loaded it

    spec = learning.CONFIGS[name]
    extra = (["actor_rollout_ref.model.enable_gradient_checkpointing=False",
              "actor_rollout_ref.actor.use_torch_compile=False"] if name == "reuse_i10" else [])  # fmt: skip
    overrides = learning.job_overrides(_args(trainer=trainer, extra=extra), name, 0, tmp_path / "m", tmp_path / "d")
    cfg = _compose(overrides)
    from verl_offgrpo.patches.selection import config_selects

    # the driver's cheap reading of "plain verl" (two such jobs must not run side by side) agrees with hydra
    assert mainppo_job.selects_plugin(overrides) is config_selects(cfg) is (name != "bigbatch_v10")

    per = spec.updates_per_step
    assert cfg.algorithm.off_grpo.sync_period == spec.v and cfg.actor_rollout_ref.actor.ppo_epochs == spec.i
    assert cfg.algorithm.off_grpo.zero_var_mask is spec.zero_var_mask
    assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.actor.ppo_mini_batch_size) == (32 * spec.batches, 32)
    assert (cfg.trainer.total_training_steps, cfg.trainer.test_freq) == (-(-150 // per), 10 // per)
    assert cfg.trainer.use_v1 is ((spec.trainer or trainer) == "v1")
    assert cfg.reward.custom_reward_function.path == "pkg://verl_offgrpo.rewards"
    for key, value in spec.overrides.items():
        assert OmegaConf.select(cfg, key) == _hydra_value(value), key
    checkpointing_and_compile = (cfg.actor_rollout_ref.model.enable_gradient_checkpointing,
                                 cfg.actor_rollout_ref.actor.use_torch_compile)  # fmt: skip
    assert checkpointing_and_compile == ((False, False) if extra else (True, True))
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def test_the_new_configs_are_what_issue_34_names(tmp_path):
    """window_v10: the plugin's V1 mode with the windowed schedule, v = 10; bigbatch_v10: verl's stock large-batch
    PPO (window_speed.py's ``bigbatch``) over ten batches a step, ten updates of one batch each; the rerun: the
    same job as on_policy_mask under another name."""
    window = _compose(learning.job_overrides(_args(), "window_v10", 0, tmp_path / "m", tmp_path / "d"))
    assert (window.algorithm.off_grpo.rollout_schedule, window.trainer.v1.trainer_mode) == ("window", "off_grpo_sync")
    assert window.algorithm.off_grpo.sync_period == 10 and window.algorithm.adv_estimator == "off_grpo"
    big = _compose(learning.job_overrides(_args(), "bigbatch_v10", 0, tmp_path / "m", tmp_path / "d"))
    assert (big.algorithm.adv_estimator, big.actor_rollout_ref.actor.policy_loss.loss_mode) == ("grpo", "vanilla")
    assert big.algorithm.rollout_correction.rollout_is is None and big.trainer.v1.trainer_mode == "sync"
    assert (big.data.train_batch_size, big.actor_rollout_ref.actor.ppo_mini_batch_size) == (320, 32)
    assert (big.trainer.total_training_steps, big.trainer.test_freq, big.algorithm.off_grpo.sync_period) == (15, 1, 1)

    def without_names(overrides):
        return [o for o in overrides if not o.startswith("trainer.experiment_name=")]

    rerun = learning.job_overrides(_args(), "on_policy_mask_rerun", 3, tmp_path / "m", tmp_path / "d")
    assert without_names(rerun) == without_names(learning.job_overrides(_args(), "on_policy_mask", 3, tmp_path / "m", tmp_path / "d"))
    assert learning.CONFIGS["on_policy_mask_rerun"].entry()["rerun_of"] == "on_policy_mask"


def test_rec_configs_are_the_papers_options_and_stay_out_of_the_default_list(tmp_path):
    """REC-OneSide-NoIS (ε from verl, then the wider (0.6, 2.0)) and RED-Weight (no mask), all on the
    paper's unnormalised advantage and the lag v=10; run by name, not by default (README "Which loss when")."""
    assert not set(REC_CONFIGS) & set(learning.DEFAULT_CONFIGS) and "on_policy_mask_rerun" not in learning.DEFAULT_CONFIGS
    composed = {name: dict(o.split("=", 1) for o in learning.job_overrides(_args(), name, 0, tmp_path / "m", tmp_path / "d"))
                for name in REC_CONFIGS}  # fmt: skip
    loss = "actor_rollout_ref.actor.policy_loss"
    for name, o in composed.items():
        assert o[f"{loss}.loss_mode"] == "rec" and o["algorithm.norm_adv_by_std_in_grpo"] == "false", name
        assert o["algorithm.off_grpo.sync_period"] == "10", name
    assert composed["rec_oneside_noIS"][f"{loss}.rec.clip_mode"] == "one-side" == composed["rec_oneside_wide"][f"{loss}.rec.clip_mode"]
    assert (composed["rec_oneside_wide"]["actor_rollout_ref.actor.clip_ratio_low"],
            composed["rec_oneside_wide"]["actor_rollout_ref.actor.clip_ratio_high"]) == ("0.6", "2.0")  # fmt: skip
    assert (composed["red_weight"][f"{loss}.rec.clip_mode"], composed["red_weight"][f"{loss}.rec.weight"]) == ("none", "red_weight")


@pytest.mark.parametrize("change, config, message", [
    ({"test_freq": 5}, "off_policy_v10", "--test-freq 5: off_policy_v10 needs a multiple of its 1 updates per step and of its sync period 10"),
    ({"test_freq": 5}, "reuse_i10", "--test-freq 5: reuse_i10 needs a multiple of its 10 updates"),
    ({"save_freq": 5, "ckpt_dir": "/ck"}, "bigbatch_v10", "--save-freq 5: bigbatch_v10"),
    ({"save_freq": 4, "ckpt_dir": "/ck"}, "window_v10", "--save-freq 4: window_v10"),
])  # fmt: skip
def test_validation_and_checkpoints_must_fall_on_whole_steps_and_sync_boundaries(change, config, message):
    """A validation syncs vLLM first and a resume restarts the sync cycle and the window: both must fall on a
    window boundary; and a config with U updates a step can only stop on a multiple of U."""
    with pytest.raises(ValueError, match=message):
        learning.job_list(_args(config=config, seeds="0", jobs=None, **change))
    learning.job_list(_args(config=config, seeds="0", jobs=None, save_freq=5, ckpt_dir="/ck", ckpt_only="on_policy"))
    learning.job_list(_args(config=",".join(learning.DEFAULT_CONFIGS), seeds="0,1", jobs=None, ckpt_dir="/ck"))


def test_curve_counts_updates_and_keeps_the_drift_columns():
    """A bigbatch global step g is update 10·g; the bound monitor's drift, the skipped-update fraction and the
    window position are per-step columns; runs recorded before them keep the legacy columns on --rebuild."""
    metrics = {
        0: {"val-core/arithmetic/largest4/reward/mean@1": 0.3},
        1: {"timing_s/step": 50.0, "critic/score/mean": 0.2, "off_grpo/bound/tv_token": 0.01,
            "off_grpo/bound/mean_abs_log_rprime": 0.04, "off_grpo/window/position": 0.0,
            "actor/off_grpo/skipped_optimizer_step_frac": 0.1, "actor/pg_clipfrac": 0.05},
        2: {"timing_s/step": 50.0, "critic/score/mean": 0.3, "val-core/arithmetic/largest4/reward/mean@1": 0.4},
    }  # fmt: skip
    rows = learning.curve(metrics, updates_per_step=10)
    assert [(r["step"], r.get("global_step"), r["train_reward"], r["val_pass1"]) for r in rows] == [
        (0, 0, None, 0.3), (10, 1, 0.2, None), (20, 2, 0.3, 0.4)]
    assert (rows[1]["bound_tv_token"], rows[1]["bound_mean_abs_log_rprime"], rows[1]["window_position"]) == (0.01, 0.04, 0.0)
    assert rows[1]["skipped_update_frac"] == 0.1 and rows[2]["bound_tv_token"] is None
    assert (rows[1]["clipfrac"], rows[2]["clipfrac"]) == (0.05, None)
    assert learning.updates_logged(rows, 10) == 20
    legacy = learning.curve(metrics, columns=learning.run_columns({}))
    assert "bound_tv_token" not in legacy[1] and "global_step" not in legacy[1] and legacy[1]["step"] == 1
    assert learning.run_columns({"step_columns": list(learning.STEP_COLUMNS)}) == learning.STEP_COLUMNS


def test_curve_reads_the_losss_rprime_terms_over_micro_batches_with_a_loss_token():
    """From 8d63c5f the losses log their r' terms as 0 on a micro-batch without a loss token, with
    ``rprime_terms_frac``: the column is term / frac (half the micro-batches masked: 0.02 / 0.5); without the
    fraction (earlier runs) it is the logged value as it was."""
    metrics = {1: {"timing_s/step": 5.0, "critic/score/mean": 0.2, "actor/off_grpo/mean_abs_log_rprime": 0.02,
                   "actor/off_grpo/rprime_terms_frac": 0.5},
               2: {"timing_s/step": 5.0, "critic/score/mean": 0.3, "actor/off_grpo/mean_abs_log_rprime": 0.02},
               3: {"timing_s/step": 5.0, "critic/score/mean": 0.3, "actor/off_grpo/mean_abs_log_rprime": 0.0,
                   "actor/off_grpo/rprime_terms_frac": 0.0}}  # fmt: skip
    rows = learning.curve(metrics)
    assert [r["mean_abs_log_rprime"] for r in rows] == [0.04, 0.02, 0.0]


def test_rebuild_and_merge_keep_each_runs_columns_and_pick_up_the_clip_fraction(tmp_path):
    """A run recorded now (``step_columns`` = every column) gets ``clipfrac`` from its metrics file's
    ``actor/pg_clipfrac`` on --rebuild; a run recorded before the column (its ``step_columns`` without it)
    still merges with it and rebuilds with its own columns, and a legacy run (no ``step_columns``) too."""
    for tag, clipfrac in (("on_policy_s0", 0.125), ("on_policy_s1", 0.25), ("on_policy_s2", 0.5)):
        rows = [{"step": 0, "data": {"val-core/arithmetic/largest4/reward/mean@1": 0.3}},
                {"step": 1, "data": {"timing_s/step": 2.0, "critic/score/mean": 0.2, "actor/pg_clipfrac": clipfrac}}]
        (tmp_path / f"{tag}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    before = [c for c in learning.STEP_COLUMNS if c != "clipfrac"]
    entry = {**learning.CONFIGS["on_policy"].entry(), "seeds": {}}

    def result(*runs):
        return {"task": "t", "model": "m", "settings": {}, "configs": {"on_policy": json.loads(json.dumps(entry))},
                "runs": [{"config": "on_policy", "seed": seed, **run} for seed, run in runs]}  # fmt: skip

    earlier = learning.rebuild(result((1, {"step_columns": before}), (2, {})), tmp_path)
    now = learning.rebuild(result((0, {"step_columns": list(learning.STEP_COLUMNS)})), tmp_path)
    assert now["configs"]["on_policy"]["seeds"]["0"][1]["clipfrac"] == 0.125
    merged = learning.merge(now, earlier)
    assert sorted(r["seed"] for r in merged["runs"]) == [0, 1, 2]
    rebuilt = learning.rebuild(merged, tmp_path)["configs"]["on_policy"]["seeds"]
    assert rebuilt["0"][1]["clipfrac"] == 0.125 and [r["step"] for r in rebuilt["0"]] == [0, 1]
    assert "clipfrac" not in rebuilt["1"][1] and set(before) <= set(rebuilt["1"][1])
    assert "clipfrac" not in rebuilt["2"][1] and set(rebuilt["2"][1]) - {"step", "wall_s", "train_reward", "val_pass1"} == set(
        learning.LEGACY_STEP_COLUMNS)  # fmt: skip


def test_merge_refuses_a_config_whose_definition_changed():
    """reuse_i10's curves count updates since issue 34 (ten a global step); a file whose reuse_i10 counted
    global steps (no ``updates_per_step``: the committed add1 runs) cannot take the new runs."""
    def result(entry):
        return {"task": "t", "model": "m", "configs": {"reuse_i10": {**entry, "seeds": {}}}, "runs": []}

    legacy = result({"v": 1, "i": 10, "zero_var_mask": True, "keep_weights": "sleep_level1"})
    now = result(learning.CONFIGS["reuse_i10"].entry())
    with pytest.raises(ValueError, match="config reuse_i10"):
        learning.merge(now, legacy)
    assert learning.merge(now, now)
    on_policy_legacy = {"task": "t", "model": "m", "configs": {"on_policy": {"v": 1, "i": 1, "zero_var_mask": False, "seeds": {}}}}
    on_policy_now = {"task": "t", "model": "m", "runs": [],
                     "configs": {"on_policy": {**learning.CONFIGS["on_policy"].entry(), "seeds": {}}}}  # fmt: skip
    assert learning.incompatible(on_policy_now, on_policy_legacy) is None  # one batch, one update: the same


def test_the_default_command_runs_the_default_configs_side_by_side_with_their_schedules(tmp_path, monkeypatch):
    """The plan's command on a 4-GPU machine (fake jobs): the six default configs of a seed, four at a time;
    each run records its trainer, updates per step and columns; the task is the held-out-500 largest4."""
    launched = {}

    def fake_run_main_ppo(name, overrides, out, log_dir, timeout, steps, stall_s, **env):
        launched[name] = (steps, sorted(o for o in overrides if o.split("=")[0] in
                                        ("data.train_batch_size", "trainer.total_training_steps", "trainer.use_v1")))
        per = 10 if "data.train_batch_size=320" in overrides or "actor_rollout_ref.actor.ppo_epochs=10" in overrides else 1
        rows = [{"step": 0, "data": {"val-core/arithmetic/largest4/reward/mean@1": 0.3}}]
        rows += [{"step": g, "data": {"timing_s/step": 1.0, "critic/score/mean": 0.1}} for g in range(1, 3 // per + 2)]
        jsonl = log_dir / f"{name}.jsonl"
        jsonl.write_text("\n".join(json.dumps(r) for r in rows))
        return 0, {"startup_s": 1.0, "memory": {}}, jsonl

    monkeypatch.setattr(mainppo_job, "run_main_ppo", fake_run_main_ppo)
    monkeypatch.setattr(mainppo_job, "ON_GPUS_STAGGER_S", 0.0)
    monkeypatch.setattr(mainppo_job, "versions", lambda: {"device": "fake"})
    (tmp_path / "model").mkdir()
    learning.main(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "w"), "--model-path", str(tmp_path / "model"),
                   "--seeds", "0", "--gpus", "0,1,2,3", "--steps", "10"])  # fmt: skip
    result = json.loads((tmp_path / "out" / "learning.json").read_text())
    assert sorted(launched) == sorted(f"{c}_s0" for c in learning.DEFAULT_CONFIGS)
    assert launched["bigbatch_v10_s0"] == (2, ["data.train_batch_size=320", "trainer.total_training_steps=1"])
    assert launched["on_policy_s0"][0] == 11 and "trainer.use_v1=false" in launched["on_policy_s0"][1]
    runs = {r["config"]: r for r in result["runs"]}
    assert {c: (r["trainer"], r["updates_per_step"]) for c, r in runs.items()} == {
        "on_policy": ("v0", 1), "on_policy_mask": ("v0", 1), "off_policy_v10": ("v0", 1), "reuse_i10": ("v0", 10),
        "window_v10": ("v1", 1), "bigbatch_v10": ("v1", 10)}  # fmt: skip
    assert runs["bigbatch_v10"]["steps_logged"] == 10 and runs["on_policy"]["steps_logged"] == 4
    assert all(r["step_columns"] == list(learning.STEP_COLUMNS) and r["concurrent_jobs"] == 4 for r in runs.values())
    assert result["task"] == learning.task_label("largest4", 500, twins_in_train=False)
    assert "no twins in train" in result["task"] and result["configs"]["bigbatch_v10"]["batches"] == 10
    assert [r["step"] for r in result["configs"]["bigbatch_v10"]["seeds"]["0"]] == [0, 10]


def test_agent_workers_changes_only_verls_agent_loop_workers(tmp_path):
    """``--agent-workers`` (timing only, NOTEBOOK §12) sets verl's ``rollout.agent.num_workers`` and nothing
    else; left at 1 the job is the committed runs' job."""
    plain = learning.job_overrides(_args(), "off_policy_v10", 0, tmp_path / "m", tmp_path / "d")
    four = learning.job_overrides(_args(agent_workers=4), "off_policy_v10", 0, tmp_path / "m", tmp_path / "d")
    assert "actor_rollout_ref.rollout.agent.num_workers=1" in plain
    assert learning.job_overrides(_args(agent_workers=1), "off_policy_v10", 0, tmp_path / "m", tmp_path / "d") == plain
    assert set(plain) ^ set(four) == {"actor_rollout_ref.rollout.agent.num_workers=1",
                                      "actor_rollout_ref.rollout.agent.num_workers=4"}
    assert _compose(four).actor_rollout_ref.rollout.agent.num_workers == 4


@pytest.mark.parametrize("line, want", [
    ("[vector-logprobs] pid 7: verl's logprobs_from_logits_v2 replaced", "chunked"),  # the lab module
    (None, "chunked"),  # the package's own patch (its console line)
    ("(TaskRunner pid=1) step:1 - actor/pg_loss:0.1", "verl loop"),
])  # fmt: skip
def test_a_runs_logprobs_field_reads_the_lab_line_or_the_packages_line(tmp_path, line, want):
    from verl_offgrpo.patches.chunked_logprobs import LIVE_MESSAGE

    (tmp_path / "job.log").write_text(f"start\n(WorkerDict pid=9) {line or LIVE_MESSAGE}\nend\n")
    assert learning.logprobs_impl(tmp_path, "job") == want
    assert learning.logprobs_impl(tmp_path, "other") is None


def test_gpu_mem_and_kv_cache_change_only_vllms_share_of_the_gpu(tmp_path):
    """``--gpu-mem`` and ``--kv-cache-gib`` (room for four jobs a GPU; timing only) set vLLM's
    ``gpu_memory_utilization`` and a fixed KV cache, nothing else; unset, the job keeps the base's 0.3 and
    vLLM's profiling (the committed runs')."""
    plain = learning.job_overrides(_args(), "rec_oneside_wide", 0, tmp_path / "m", tmp_path / "d")
    small = learning.job_overrides(_args(gpu_mem=0.2), "rec_oneside_wide", 0, tmp_path / "m", tmp_path / "d")
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.3" in plain
    assert set(plain) ^ set(small) == {"actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
                                       "actor_rollout_ref.rollout.gpu_memory_utilization=0.2"}
    assert _compose(small).actor_rollout_ref.rollout.gpu_memory_utilization == 0.2
    fixed = learning.job_overrides(_args(kv_cache_gib=8.0), "rec_oneside_wide", 0, tmp_path / "m", tmp_path / "d")
    assert set(fixed) - set(plain) == {"+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=8589934592"}
    assert _compose(fixed).actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes == 8 * 2**30


def test_plain_verl_jobs_load_the_labs_chunked_log_probs_and_plugin_jobs_keep_their_env(monkeypatch, tmp_path):
    """bigbatch_v10 is plain verl, which the package's chunked log-probs never reach: its job adds the lab's module
    after any the driver names, with its switch; a plugin job gets only what it was given (its GPU)."""
    import mainppo_job

    gpu = {"CUDA_VISIBLE_DEVICES": "1"}
    assert learning.job_env("bigbatch_v10", gpu) == {
        "CUDA_VISIBLE_DEVICES": "1",
        "VERL_USE_EXTERNAL_MODULES": "benchmarks.diag.vector_logprobs,benchmarks.diag.unique_socket",
        "OFFGRPO_VECTOR_LOGPROBS": "1", "OFFGRPO_UNIQUE_SOCKET": "1"}
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "a.b,benchmarks.diag.vector_logprobs")
    env = mainppo_job.run_env(tmp_path / "m.jsonl", **learning.job_env("bigbatch_v10", gpu))
    assert env["VERL_USE_EXTERNAL_MODULES"] == ("a.b,benchmarks.diag.vector_logprobs,benchmarks.diag.unique_socket,"
                                                "verl_offgrpo.plugin")
    assert learning.job_env("off_policy_v10", gpu) == gpu
    assert learning.PLAIN_VERL <= set(learning.CONFIGS)
