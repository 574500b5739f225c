"""benchmarks/guard_faults_gpu.py on the CPU: its jobs compose and pass the startup checks, and what it
reads from a job's console log (the served-weights error as Ray prints it, the fault module's lines)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))

import guard_faults_gpu as gf  # noqa: E402


def args(**kw):
    ns = gf.argparse.Namespace(trainer="v0", sync_period=3, lr=1e-5, batch=16, response_length=48, n=4, tp=1,
                               gpu_memory_utilization=0.1, kv_cache_gib=2.0, extra=[])  # fmt: skip
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
    from verl_offgrpo.__main__ import config_dir

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
    honest = {"fault": None, "verify": True, "caught": False, "rprime_error": None, "verify_cost": {"check_s": {"n": 9}}}
    assert gf.verdict(honest) and not gf.verdict({**honest, "caught": True})
    assert not gf.verdict({**honest, "verify_cost": {"check_s": None}})  # no lagged wake was checked
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
