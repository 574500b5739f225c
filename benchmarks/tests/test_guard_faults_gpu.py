"""benchmarks/guard_faults_gpu.py on the CPU: its jobs compose and pass the startup checks, and what it
reads from a job's console log (the served-weights error as Ray prints it, the fault module's lines)."""

from __future__ import annotations

import pytest

import guard_faults_gpu as gf  # benchmarks/ is on sys.path (conftest.py)


def args(**kw):
    ns = gf.argparse.Namespace(trainer="v0", sync_period=3, lr=1e-5, batch=16, response_length=48, n=4, tp=1,
                               gpu_memory_utilization=0.1, kv_cache_gib=2.0, extra=[], task="add1")  # fmt: skip
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


@pytest.mark.parametrize("trainer", ["v0", "v1"])
@pytest.mark.parametrize("verify", [True, False])
def test_jobs_compose_and_pass_the_startup_checks(tmp_path, trainer, verify):
    from hydra import compose, initialize_config_dir

    import verl  # noqa: F401  (loads the plugin, which wraps validate_config)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl_offgrpo.cli.paths import config_dir

    overrides = gf.job_overrides(args(trainer=trainer), "level2", 8, verify, tmp_path / "model", tmp_path / "data")
    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        cfg = compose(config_name="off_grpo_trainer", overrides=overrides)
    assert cfg.algorithm.off_grpo.verify_served_weights is verify and cfg.algorithm.off_grpo.sync_period == 3
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes == 2 * 2**30
    assert cfg.trainer.total_training_steps == 8 and cfg.trainer.use_v1 is (trainer == "v1")
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def test_reads_the_error_and_the_fault_lines_from_the_console():
    message = ("verl-offgrpo: step 5: vLLM does not serve α after its wake without a weight sync, for step 5's rollout: "
               "replica 0, TP rank 0: 1 of 272 parameter tensors differ")  # fmt: skip
    console = "\n".join([
        "(pid=123) [guard-fault] pid 77: perturb: rank 0: model.layers.3.self_attn.qkv_proj.weight (1, 2): one ulp",
        "(pid=123) [guard-fault] pid 77: perturb: rank 0: model.layers.3.self_attn.qkv_proj.weight (1, 2): one ulp",
        "step:4 - actor/pg_loss:0.1",
        "ray.exceptions.RayTaskError(ServedPolicyError): ray::TaskRunner.run() (pid=9, ip=1.2.3.4)",
        f"verl_offgrpo.sync.alpha_guard.ServedPolicyError: {message}",
        f"ServedPolicyError: {message}",
    ])  # fmt: skip
    parsed = gf.parse_console(console)
    assert parsed["caught"] and parsed["caught_step"] == 5 and parsed["message"] == message
    assert len(parsed["fault_lines"]) == 1 and parsed["rprime_error"] is None
    assert gf.parse_console("step:1 - x:1\n")["caught"] is False


def test_expected_steps_and_verdicts():
    assert gf.expected_step("level2", 3, 2) == 2 and gf.expected_step("perturb", 3, 2) == 5
    assert gf.expected_step("noise", 4, 3) == 10 and gf.expected_step(None, 3, 2) is None
    assert gf.expected_step("stale_sync", 3, 2) == 3  # the slot of the 2nd sync, step 3, stops before step 4
    assert gf.expected_step("stale_sync_rank", 3, 2) == 3
    assert gf.expected_step("stale_sync_tensor", 3, 2) == 3
    stale = ("verl-offgrpo: step 3: the weight sync did not reach vLLM: the trainer's weights changed since the sync "
             "of step 0, but the vLLM workers of replica 0 serve the same weights as after it")  # fmt: skip
    assert gf.parse_console(f"ServedPolicyError: {stale}\n")["caught_step"] == 3
    part = "verl-offgrpo: step 3: the weight sync reached vLLM only in part: the trainer changed model.layers.3.x"
    assert gf.parse_console(f"ServedPolicyError: {part}\n")["caught_step"] == 3
    unequal = "verl-offgrpo: step 3: the weight sync reached vLLM's TP ranks unequally: every rank of replica 0 holds x"
    assert gf.parse_console(f"ServedPolicyError: {unequal}\n")["caught_step"] == 3
    assert gf.expected_step("stale_sync_rank_norm", 3, 2) == 3 == gf.expected_step("corrupt_sync_tensor", 3, 2)
    cast = ("verl-offgrpo: step 3: after the weight sync vLLM's replica 0 serves model.layers.3.x (TP rank 0) unlike "
            "the trainer's weights cast to bfloat16")
    assert gf.parse_console(f"ServedPolicyError: {cast}\n")["caught_step"] == 3
    honest = {"fault": None, "verify": True, "caught": False, "rprime_error": None, "verify_cost": {"check_s": {"n": 9}}}
    assert gf.verdict(honest) and not gf.verdict({**honest, "caught": True})
    assert not gf.verdict({**honest, "verify_cost": {"check_s": None}})  # no lagged wake was checked
    window = {**honest, "rollout_schedule": "window", "verify_cost": {"check_s": None, "sync_check_s": {"n": 3}}}
    assert gf.verdict(window) and not gf.verdict({**window, "verify_cost": {"check_s": None, "sync_check_s": None}})
    assert gf.verdict({"fault": "level2", "verify": True, "caught_as_expected": True})
    assert not gf.verdict({"fault": "level2", "verify": True, "caught_as_expected": False})
    assert gf.split_gpus("0,0,0") == ["0", "0", "0"] and gf.split_gpus("0,1;0,1") == ["0,1", "0,1"]
    assert gf.split_gpus("") is None


def test_cost_and_rprime_tables():
    metrics = {
        1: {"timing_s/off_grpo_verify_weights": 0.02, "off_grpo/weights_verified": 1.0, "timing_s/step": 4.0,
            "off_grpo/rollout_lag": 0.0, "off_grpo/bound/mean_abs_log_rprime": 0.04},
        2: {"timing_s/off_grpo_verify_weights": 0.03, "off_grpo/weights_verified": 0.0, "timing_s/step": 4.0,
            "off_grpo/rollout_lag": 1.0, "off_grpo/bound/mean_abs_log_rprime": 0.06},
    }  # fmt: skip
    cost = gf.verify_cost(metrics)
    assert cost["check_s"]["n"] == 1 and cost["record_s"]["median"] == 0.03
    assert cost["share_of_median_step"] == pytest.approx(0.025 / 4.0)
    assert gf.rprime_by_lag(metrics) == {"0": {"median": 0.04, "max": 0.04, "n": 1}, "1": {"median": 0.06, "max": 0.06, "n": 1}}


def test_main_writes_the_results_from_the_jobs_logs(tmp_path, monkeypatch):
    """The whole command with main_ppo replaced by a fake that writes what a job leaves (metrics file,
    console log): three jobs side by side on "GPU 0", the honest one first; the JSON says which fault was
    caught at which step, the check's cost and the verdicts."""
    import json

    import mainppo_job

    monkeypatch.setattr(gf.learning, "smollm2_from_gguf", lambda dest: tmp_path / "model")
    monkeypatch.setattr(gf.learning, "build_task", lambda dest, task, **data: tmp_path / "data")
    started = []

    def fake_run(name, overrides, out, log_dir, timeout, steps, stall_s, **env):
        started.append((name, env.get("OFFGRPO_GUARD_FAULT"), env.get("CUDA_VISIBLE_DEVICES")))
        assert f"algorithm.off_grpo.verify_served_weights={'false' if name.endswith('unchecked') else 'true'}" in overrides
        jsonl = log_dir / f"{name}.jsonl"
        last = {"honest": 30, "level2": 1, "perturb": 4, "level2_unchecked": 8}[name]
        rows = [{"step": s, "data": {"timing_s/step": 3.0, "timing_s/off_grpo_verify_weights": 0.01 if s % 3 else 0.02,
                                     "off_grpo/weights_verified": float(s % 3 != 0), "off_grpo/rollout_lag": float((s - 1) % 3),
                                     "off_grpo/bound/mean_abs_log_rprime": 0.05}} for s in range(1, last + 1)]  # fmt: skip
        jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        caught = {"level2": 2, "perturb": 5}.get(name)
        text = "[guard-fault] pid 1: level2: rank 0: ...\n" if env.get("OFFGRPO_GUARD_FAULT") else ""
        if caught:
            text += f"ServedPolicyError: verl-offgrpo: step {caught}: vLLM does not serve α after its wake ...\n"
        (log_dir / f"{name}.log").write_text(text)
        return (1 if caught else 0), {"startup_s": 100.0}, jsonl

    monkeypatch.setattr(mainppo_job, "run_main_ppo", fake_run)
    monkeypatch.setattr(mainppo_job, "ON_GPUS_STAGGER_S", 0.0)
    rc = gf.main(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--stagger-s", "0",
                  "--runs", "perturb,level2,honest,level2_unchecked"])  # fmt: skip
    result = json.loads((tmp_path / "out" / gf.RESULTS).read_text())
    assert rc == 0 and result["ok"] and result["concurrent_jobs"] == 3
    assert sorted(started) == sorted([("honest", None, "0"), ("level2", "level2", "0"), ("level2_unchecked", "level2", "0"),
                                      ("perturb", "perturb", "0")])  # fmt: skip
    runs = {r["name"]: r for r in result["runs"]}
    assert [r["name"] for r in result["runs"]][0] == "honest"
    assert runs["level2"]["caught_step"] == 2 == runs["level2"]["expected_step"] and runs["perturb"]["caught_step"] == 5
    assert runs["honest"]["complete"] and runs["honest"]["verify_cost"]["check_s"]["n"] == 20
    assert runs["honest"]["verify_cost"]["share_of_median_step"] == pytest.approx(0.01 / 3.0)
    assert runs["level2_unchecked"]["expected_step"] is None and runs["level2_unchecked"]["passed"]


def test_the_digit_task_keeps_its_own_data_and_reward(tmp_path):
    """--task digit (the default with --shape): sync_e2e's val file and graded reward, not the arithmetic task's."""
    overrides = gf.job_overrides(args(task=gf.DIGIT_TASK), "stale_sync", 8, True, tmp_path / "model", tmp_path / "d")
    assert f"data.val_files={tmp_path / 'd' / 'val.parquet'}" in overrides
    assert f"reward.custom_reward_function.path={tmp_path / 'd' / 'reward.py'}" in overrides
    arith = gf.job_overrides(args(task="add1"), "stale_sync", 8, True, tmp_path / "model", tmp_path / "d")
    assert "reward.custom_reward_function.path=pkg://verl_offgrpo.rewards" in arith


def test_an_extra_override_replaces_the_base_key(tmp_path):
    """--trainer v1 --extra algorithm.off_grpo.rollout_schedule=window: the window, not sync_e2e's pinned per_step
    beside it: one value for the key."""
    overrides = gf.job_overrides(args(trainer="v1", extra=["algorithm.off_grpo.rollout_schedule=window"]),
                                 "corrupt_sync_tensor", 8, True, tmp_path / "model", tmp_path / "d")
    assert [o for o in overrides if "rollout_schedule" in o] == ["algorithm.off_grpo.rollout_schedule=window"]
    kept = gf.job_overrides(args(extra=["+trainer.x=1", "~trainer.y"]), "honest", 8, True, tmp_path / "m", tmp_path / "d")
    assert kept[-2:] == ["+trainer.x=1", "~trainer.y"]  # appended as given


def test_a_stale_sync_over_weights_that_did_not_move_is_untestable():
    """The 1.5B random-init shape on add1 scored 0, every group was masked, no update ran: putting the old weights
    back left vLLM serving α, so 'not caught' there says nothing about the check."""
    run = {"fault": "stale_sync_rank", "verify": True, "caught": False, "caught_as_expected": False}
    assert gf.untestable({**run, "trainer_changed_at_fault": 0.0}) and not gf.verdict({**run, "trainer_changed_at_fault": 0.0})
    assert not gf.untestable({**run, "trainer_changed_at_fault": 1.0})  # a miss, a real failure
    assert not gf.untestable({**run, "caught": True, "trainer_changed_at_fault": 0.0})
    assert not gf.untestable({"fault": "perturb", "verify": True, "caught": False, "trainer_changed_at_fault": 0.0})
    # the trainer moved, but not the tensor put back (a norm of ones under an update below bf16's resolution)
    line = ("[guard-fault] pid 7: stale_sync_rank_norm: rank 1: sync #2 received, then the 1 parameter tensor(s) from "
            "before it put back (model.layers.3.input_layernorm.weight, ...); moved {}")
    moved = {**run, "fault": "stale_sync_rank_norm", "trainer_changed_at_fault": 1.0}
    assert gf.untestable({**moved, "fault_lines": [line.format(0)]})
    assert not gf.untestable({**moved, "fault_lines": [line.format(1)]})


def test_a_shape_run_defaults_to_the_digit_task(tmp_path, monkeypatch):
    """--shape (a random-init model, which scores 0 on add1) builds sync_e2e's digit task and hands its reward to
    the jobs; a faulted sync that found the trainer unchanged is marked untestable in the JSON."""
    import json

    import mainppo_job
    import sync_e2e
    import throughput

    built = []
    monkeypatch.setattr(throughput, "build_model", lambda dest, shape: built.append(("model", shape)))
    monkeypatch.setattr(sync_e2e, "build_data", lambda dest: built.append(("digit", dest)) or dest)
    monkeypatch.setattr(gf.learning, "build_task", lambda *a, **k: pytest.fail("the arithmetic task was built"))

    def fake_run(name, overrides, out, log_dir, timeout, steps, stall_s, **env):
        assert any(o.startswith("reward.custom_reward_function.path=") and o.endswith("reward.py") for o in overrides)
        jsonl = log_dir / f"{name}.jsonl"
        jsonl.write_text(json.dumps({"step": 3, "data": {"off_grpo/trainer_changed": 0.0, "timing_s/step": 1.0}}) + "\n")
        (log_dir / f"{name}.log").write_text("")
        return 0, {"startup_s": 1.0}, jsonl

    monkeypatch.setattr(mainppo_job, "run_main_ppo", fake_run)
    rc = gf.main(["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--shape", "qwen2.5-1.5b",
                  "--runs", "stale_sync_rank_norm", "--gpus", "0", "--stagger-s", "0"])
    result = json.loads((tmp_path / "out" / gf.RESULTS).read_text())
    assert rc == 1 and result["settings"]["task"] == gf.DIGIT_TASK and [b[0] for b in built] == ["model", "digit"]
    run = result["runs"][0]
    assert run["trainer_changed_at_fault"] == 0.0 and run["untestable"] and not run["passed"]
