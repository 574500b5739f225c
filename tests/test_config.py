"""Hydra composition of verl's ppo_trainer + the shipped yaml, and the startup checks run by verl's
own ``validate_config`` (which the plugin extends). The list of rejected configs lives here."""

import dataclasses
import logging
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin)
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl_offgrpo.__main__ import config_dir
from verl_offgrpo.knobs import OffGRPOKnobs
from verl_offgrpo.validation import OffGRPOConfigError

# what every runnable config needs anyway (verl's own checks)
BASE = [
    "actor_rollout_ref.model.path=/models/none",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
]
V0_MANAGER = "+actor_rollout_ref.rollout.checkpoint_manager_class=verl_offgrpo.sync.checkpoint_manager_v0.LaggedCheckpointManager"


def composed(*overrides):
    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        return compose(config_name="off_grpo_trainer", overrides=BASE + list(overrides))


def validate(config):
    # main_ppo imports it from here at start-up: it must be the plugin's wrapper
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def test_yaml_defaults_are_the_documented_knobs():
    cfg = composed()
    assert OmegaConf.to_container(cfg.algorithm.off_grpo) == dataclasses.asdict(OffGRPOKnobs())


def test_shipped_yaml_wires_estimator_loss_rprime_and_trainer_mode():
    cfg = composed()
    assert cfg.algorithm.adv_estimator == "off_grpo"
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "off_grpo"
    rc = cfg.algorithm.rollout_correction
    assert (rc.rollout_is, float(rc.rollout_is_threshold), rc.rollout_rs, rc.bypass_mode) == (
        "token", float("inf"), None, False)
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True
    assert (cfg.actor_rollout_ref.rollout.top_p, cfg.actor_rollout_ref.rollout.top_k) == (1.0, -1)
    assert cfg.trainer.v1.trainer_mode == "off_grpo_sync"
    # verl's own defaults are still there underneath
    assert cfg.actor_rollout_ref.actor.clip_ratio == 0.2 and cfg.trainer.use_v1 is True


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["algorithm.off_grpo.sync_period=10"],
        ["algorithm.off_grpo.sync_period=10", "actor_rollout_ref.actor.ppo_epochs=1", "algorithm.off_grpo.zero_var_mask=false"],
        ["actor_rollout_ref.actor.ppo_epochs=10"],
        ["trainer.use_v1=false", "algorithm.off_grpo.sync_period=4", V0_MANAGER],
        ["algorithm.rollout_correction.rollout_is_threshold=2.0", "algorithm.off_grpo.allow_truncated_rprime=true"],
        ["algorithm.off_grpo.keep_weights=no_sleep", "algorithm.off_grpo.ref_reset_period=50",
         "actor_rollout_ref.actor.use_kl_loss=true"],
        # on-policy without rollout log-probs: r' = 1
        ["actor_rollout_ref.rollout.calculate_log_probs=false", "algorithm.rollout_correction.rollout_is=null"],
        # no_sleep on the V1 trainer: its mode sets free_cache_engine=false when it is built (test_sync_hooks)
        ["algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.keep_weights=no_sleep"],
        # the mask's rows leave token-sum (no denominator); seq-mean is fine without the mask
        ["actor_rollout_ref.actor.loss_agg_mode=token-sum"],
        ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "algorithm.off_grpo.zero_var_mask=false"],
    ],
)
def test_valid_configs_pass(overrides):
    validate(composed(*overrides))


REJECTED = [
    (["algorithm.rollout_correction.bypass_mode=true"], "bypass_mode=false"),
    (["algorithm.rollout_correction.rollout_is_threshold=2.0"], "untruncated"),
    (["algorithm.rollout_correction.rollout_is_threshold=0.5_2.0"], "untruncated"),
    (["algorithm.rollout_correction.rollout_rs=token_k1", "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0"],
     "rejection"),
    (["algorithm.rollout_correction.rollout_is_batch_normalize=true"], "rescales r'"),
    (["algorithm.rollout_correction.rollout_is=sequence"], "rollout_is=token"),
    (["algorithm.off_grpo.sync_period=4", "algorithm.rollout_correction.rollout_is=null"], "rollout_is=token"),
    (["algorithm.off_grpo.sync_period=4", "actor_rollout_ref.rollout.calculate_log_probs=false"],
     "calculate_log_probs=true"),
    (["algorithm.off_grpo.std_eps=0"], "std_eps must be > 0"),
    (["algorithm.off_grpo.std_eps=-1e-6"], "std_eps must be > 0"),
    (["algorithm.off_grpo.sync_period=0"], "sync_period must be an integer >= 1"),
    (["algorithm.off_grpo.sync_period=2.5"], "sync_period must be an integer >= 1"),
    (["algorithm.off_grpo.ref_reset_period=-1"], "ref_reset_period"),
    (["algorithm.off_grpo.ref_reset_period=3", "actor_rollout_ref.actor.use_kl_loss=false"], "reference"),
    (["algorithm.off_grpo.keep_weights=sleep_level2"], "keep_weights"),
    (["algorithm.off_grpo.max_log_rprime_after_sync=-1"], "max_log_rprime_after_sync must be a number >= 0"),
    (["algorithm.off_grpo.max_log_rprime_lagged=-1"], "max_log_rprime_lagged must be a number >= 0"),
    (["algorithm.off_grpo.empty_cache_on_skip=sometimes"], r"empty_cache_on_skip must be one of \('always', 'if_needed'\)"),
    (["actor_rollout_ref.actor.clip_ratio=0"], "clip_ratio .* must be > 0"),
    (["actor_rollout_ref.actor.clip_ratio_low=-0.1"], "clip_ratio_low .* must be > 0"),
    (["+algorithm.off_grpo.sync_peroid=4"], "Unknown key.*sync_peroid"),
    (["algorithm.off_grpo.sync_period=4", "trainer.v1.trainer_mode=sync"], "trainer_mode=off_grpo_sync"),
    (["trainer.v1.trainer_mode=sync"], "zero_var_mask=true on the V1 trainer"),
    (["trainer.use_v1=false", "algorithm.off_grpo.sync_period=4"], "checkpoint_manager_class"),
    (["algorithm.off_grpo.sync_period=4", "actor_rollout_ref.rollout.name=sglang"], "rollout.name=vllm"),
    (["algorithm.off_grpo.sync_period=4", "actor_rollout_ref.hybrid_engine=false"], "hybrid_engine=true"),
    (["algorithm.off_grpo.sync_period=4", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"],
     "loss_mode=off_grpo"),
    *[([f"actor_rollout_ref.actor.loss_agg_mode={mode}"], "fixed global_batch_size")
      for mode in ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")],
]


@pytest.mark.parametrize("overrides,message", REJECTED, ids=[" ".join(o) for o, _ in REJECTED])
def test_rejected_configs(overrides, message):
    with pytest.raises(OffGRPOConfigError, match=message):
        validate(composed(*overrides))


@pytest.mark.parametrize("override", ["actor_rollout_ref.rollout.top_p=0.9", "actor_rollout_ref.rollout.top_k=20"])
def test_truncated_sampling_warns(override, caplog):
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.validation"):
        validate(composed(override))
    assert "biased" in caplog.text


@pytest.mark.parametrize(
    "overrides,warns",
    [
        (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"], True),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla", "algorithm.off_grpo.zero_var_mask=false"], False),
        ([], False),  # the off_grpo loss: exactly 0 on such a mini-batch (test_policy_loss)
    ],
)
def test_mask_with_another_loss_warns_about_all_masked_mini_batches(overrides, warns, caplog):
    """test_policy_loss shows verl's vanilla loss at 0/0 when every row of a mini-batch is masked."""
    overrides = ["algorithm.rollout_correction.rollout_is=null", *overrides]  # vanilla takes no r'
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.validation"):
        validate(composed(*overrides))
    assert ("divides by 0" in caplog.text) is warns


def _run(*args, env=None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_main_ppo_rejects_bad_config_before_ray():
    """verl's real entry point fails at start-up with the plugin's message (no Ray, no GPU work)."""
    proc = _run("-m", "verl.trainer.main_ppo", "--config-path", config_dir(), "--config-name", "off_grpo_trainer",
                *BASE, "algorithm.rollout_correction.rollout_is_threshold=2.0")
    assert proc.returncode != 0
    assert "OffGRPOConfigError" in proc.stderr and "untruncated" in proc.stderr
    assert "Started a local Ray instance" not in proc.stderr + proc.stdout


def test_compose_cli_prints_validated_config():
    proc = _run("-m", "verl_offgrpo", "compose", *BASE, "algorithm.off_grpo.sync_period=10")
    assert proc.returncode == 0, proc.stderr
    printed = OmegaConf.create(proc.stdout)
    assert printed.algorithm.off_grpo.sync_period == 10 and printed.algorithm.adv_estimator == "off_grpo"
    bad = _run("-m", "verl_offgrpo", "compose", *BASE, "algorithm.off_grpo.sync_period=0")
    assert bad.returncode == 2 and "sync_period must be an integer >= 1" in bad.stderr


def test_check_cli_reports_registrations():
    proc = _run("-m", "verl_offgrpo", "check")
    assert proc.returncode == 0, proc.stderr
    assert "advantage estimator off_grpo: registered" in proc.stdout and "off_grpo_sync: registered" in proc.stdout
    assert "verl.workers.engine.base.BaseEngine.train_batch: live" in proc.stdout  # imported, then read off
    assert "BucketedWeightSender.__init__: not live" in proc.stdout  # only in a selecting job's Ray processes


def test_check_cli_is_loud_when_verl_did_not_load_the_plugin():
    proc = _run("-m", "verl_offgrpo", "check", env={"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert proc.returncode == 1
    assert "verl did not load the plugin" in proc.stderr
    assert "advantage estimator off_grpo is not registered with verl" in proc.stderr


def test_compose_cli_fails_when_verl_did_not_load_the_plugin():
    """Without the plugin verl's own validate_config passes configs the plugin rejects: compose must not
    print "checks passed" then (it did, with exit 0)."""
    bad_for_the_plugin = ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"]  # the mask stays on
    assert _run("-m", "verl_offgrpo", "compose", *BASE, *bad_for_the_plugin).returncode == 2
    proc = _run("-m", "verl_offgrpo", "compose", *BASE, *bad_for_the_plugin, env={"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert proc.returncode == 1 and "did not load the verl-offgrpo plugin" in proc.stderr
    assert "checks passed" not in proc.stderr and proc.stdout == ""


def test_lora_with_lag_rejected():
    from verl_offgrpo.validation import validate_off_grpo_config

    cfg = composed("algorithm.off_grpo.sync_period=4")
    cfg.actor_rollout_ref.model.lora_rank = 8
    with pytest.raises(OffGRPOConfigError, match="not supported with LoRA"):
        validate_off_grpo_config(cfg)
