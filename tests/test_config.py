"""Hydra composition of verl's ppo_trainer + the shipped yaml, and the startup checks run by verl's
own ``validate_config`` (which the plugin extends). The list of rejected configs lives here."""

import dataclasses
import logging
import os
import re
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.cli.paths import config_dir
from verl_offgrpo.config import OffGRPOConfig, OffGRPOConfigError, check_window_config, validate_off_grpo_config

from _background import module_jobs
from _cases import slow_after
from _overrides import BASE, V0_MANAGER, shipped_config, validate_as_main_ppo

LOGGER = "verl_offgrpo.config"  # the check modules (loss_estimator_checks, window_checks, ...) log below it

REC = "actor_rollout_ref.actor.policy_loss.loss_mode=rec"
REC_KNOB = "actor_rollout_ref.actor.policy_loss.rec."


composed = shipped_config
validate = validate_as_main_ppo  # main_ppo imports it from verl.utils.config at start-up: the plugin's wrapper


def test_yaml_defaults_are_the_documented_knobs():
    cfg = composed()
    assert OmegaConf.to_container(cfg.algorithm.off_grpo) == dataclasses.asdict(OffGRPOConfig())


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
        # no_sleep on the V1 trainer: per_step's mode sets free_cache_engine=false when it is built
        # (test_sync_hooks); the window (auto's pick here) has no α to keep and leaves it
        ["algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.keep_weights=no_sleep"],
        # the mask's rows leave token-sum (no denominator); seq-mean is fine without the mask
        ["actor_rollout_ref.actor.loss_agg_mode=token-sum"],
        ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "algorithm.off_grpo.zero_var_mask=false"],
        # the window (V1 off_grpo_sync), with any gen_batch_size that divides train_batch_size (verl fetches each
        # step's batch in such chunks, window or not)
        ["algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.sync_period=4"],
        ["algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.sync_period=4",
         "data.gen_batch_size=1024"],  # = verl's default train_batch_size
        ["algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.sync_period=4", "data.train_batch_size=512",
         "data.gen_batch_size=256"],
        # auto with a gen_batch_size that divides the batch; dynamic sampling with any (verl's V1 trainer then
        # fetches one prompt at a time)
        ["algorithm.off_grpo.sync_period=4", "data.train_batch_size=512", "data.gen_batch_size=256"],
        ["algorithm.off_grpo.sync_period=4", "data.train_batch_size=512", "data.gen_batch_size=768",
         "algorithm.filter_groups.enable=true"],
        # integers where a float is expected are floats
        ["algorithm.off_grpo.std_eps=1", "algorithm.off_grpo.max_log_rprime_lagged=0"],
        # the REC / RED family under the lag, with the mask, guard and monitor on (V1 and v0)
        [REC, f"{REC_KNOB}clip_mode=ring", f"{REC_KNOB}weight=is", "algorithm.adv_estimator=red_drop",
         "algorithm.off_grpo.sync_period=4"],
        [REC, f"{REC_KNOB}weight=red_weight", f"{REC_KNOB}tau=1", f"{REC_KNOB}anchor=rprime",
         "algorithm.norm_adv_by_std_in_grpo=false", "trainer.use_v1=false", "algorithm.off_grpo.sync_period=4", V0_MANAGER],
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
    (["algorithm.off_grpo.std_eps=0"], "std_eps must be finite and > 0"),
    (["algorithm.off_grpo.std_eps=-1e-6"], "std_eps must be finite and > 0"),
    (["algorithm.off_grpo.std_eps=inf"], r"std_eps must be finite and > 0 \(got inf\)"),
    # a quoted number (hydra keeps it a string) is told to drop its quotes, as the rec knobs are
    *[([f"algorithm.off_grpo.{knob}='{value}'"], rf"off_grpo.{knob} must be {what} \(got the string '{value}'\): drop the quotes")
      for knob, value, what in (("sync_period", "10", "an integer"), ("red_drop_seed", "3", "an integer"),
                                ("ref_reset_period", "5", "an integer"), ("std_eps", "1e-3", "a number"),
                                ("max_log_rprime_after_sync", "2", "a number"), ("max_log_rprime_lagged", "2.5", "a number"),
                                ("max_seq_log_rprime_after_sync", "1.5", "a number"))],
    (["algorithm.off_grpo.sync_period=ten"], r"sync_period must be an integer >= 1 \(got 'ten'\)"),
    (["algorithm.off_grpo.sync_period=0"], "sync_period must be an integer >= 1"),
    (["algorithm.off_grpo.sync_period=2.5"], "sync_period must be an integer >= 1"),
    (["algorithm.off_grpo.ref_reset_period=-1"], "ref_reset_period"),
    (["algorithm.off_grpo.ref_reset_period=3", "actor_rollout_ref.actor.use_kl_loss=false"], "reference"),
    (["algorithm.off_grpo.keep_weights=sleep_level2"], "keep_weights"),
    (["algorithm.off_grpo.max_log_rprime_after_sync=-1"], "max_log_rprime_after_sync must be a finite number >= 0"),
    (["algorithm.off_grpo.max_log_rprime_lagged=-1"], "max_log_rprime_lagged must be a finite number >= 0"),
    (["algorithm.off_grpo.max_seq_log_rprime_after_sync=-1"], "max_seq_log_rprime_after_sync must be a finite number >= 0"),
    (["algorithm.off_grpo.max_seq_log_rprime_after_sync=abc"], "max_seq_log_rprime_after_sync"),
    # inf would switch a limit off without the start-up warning that 0 gets
    *[([f"algorithm.off_grpo.{knob}=inf"], rf"{knob} must be a finite number >= 0 \(got inf\); 0 turns the guard off")
      for knob in ("max_log_rprime_after_sync", "max_seq_log_rprime_after_sync", "max_log_rprime_lagged")],
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
    # booleans are booleans: "no" is not read as true (it would switch the safety check off)
    (["algorithm.off_grpo.allow_truncated_rprime=no", "algorithm.rollout_correction.rollout_is_threshold=2.0"],
     r"allow_truncated_rprime must be true or false \(got 'no'\)"),
    (["algorithm.off_grpo.zero_var_mask=maybe"], r"zero_var_mask must be true or false \(got 'maybe'\)"),
    (["algorithm.off_grpo.std_unbiased=1"], r"std_unbiased must be true or false \(got 1\)"),
    (["algorithm.off_grpo.sync_before_validate=yes"], "sync_before_validate must be true or false"),
    (["algorithm.off_grpo.std_eps=nan"], "std_eps must be finite and > 0"),
    (["algorithm.off_grpo.sync_period=true"], "sync_period must be an integer >= 1"),
    (["algorithm.off_grpo.rollout_schedule=windowed"], "rollout_schedule must be one of"),
    (["algorithm.off_grpo=5"], r"^algorithm\.off_grpo=5 replaces a section of the plugin's config"),
    # groups of one: no group statistics
    (["actor_rollout_ref.rollout.n=1"], r"rollout.n=1 with algorithm.adv_estimator=off_grpo: a group of one response "
                                        r"has no group mean or std to compare against; set .*>= 2"),  # no "negatives"
    (["actor_rollout_ref.rollout.n=0"], r"rollout.n=0 with algorithm.adv_estimator=off_grpo: no response per prompt "
                                        r"leaves no group mean or std.*>= 2"),
    # the window runs in the V1 mode off_grpo_sync
    (["algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.sync_period=4", "trainer.use_v1=false",
      V0_MANAGER], "rollout_schedule=window runs in the V1 trainer mode off_grpo_sync only"),
    (["algorithm.off_grpo.rollout_schedule=window", "trainer.v1.trainer_mode=sync", "algorithm.off_grpo.zero_var_mask=false"],
     "rollout_schedule=window needs trainer.v1.trainer_mode=off_grpo_sync"),
    # verl's V1 trainer fetches a step's prompts in whole gen_batch_size chunks (at the first step otherwise)
    (["algorithm.off_grpo.sync_period=4", "data.train_batch_size=64", "data.gen_batch_size=96"],
     r"^data.gen_batch_size=96 must divide data.train_batch_size=64: verl's V1 trainer fetches each step's prompts "
     r"in whole gen_batch_size chunks"),
    # RED-Drop: groups to drop from, rows that leave the denominator, the V1 write-back, its seed
    (["algorithm.adv_estimator=red_drop", "actor_rollout_ref.rollout.n=1"],
     r"rollout.n=1 with algorithm.adv_estimator=red_drop: .* \(nor negatives to drop\); set .*>= 2"),
    (["algorithm.adv_estimator=red_drop", "algorithm.off_grpo.zero_var_mask=false",
      "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"], "dropped rows would stay in the denominator"),
    (["algorithm.adv_estimator=red_drop", "algorithm.off_grpo.zero_var_mask=false", "trainer.v1.trainer_mode=sync"],
     "adv_estimator=red_drop on the V1 trainer needs trainer.v1.trainer_mode=off_grpo_sync"),
    (["algorithm.off_grpo.red_drop_seed=-1"], "red_drop_seed must be an integer >= 0"),
    # REC: ε′ inside the ε band, τ, unknown modes, a ratio against α without α's log-probs, bypass
    ([REC, f"{REC_KNOB}clip_mode=ring", f"{REC_KNOB}eps_low_prime=0.2"], "eps_low_prime=0.2 must exceed ε_low=0.2"),
    ([REC, f"{REC_KNOB}clip_mode=ring", "actor_rollout_ref.actor.clip_ratio_high=2.5"],
     "eps_high_prime=2.0 must exceed ε_high=2.5"),
    ([REC, f"{REC_KNOB}weight=red_weight", f"{REC_KNOB}tau=0"], r"rec.tau \(τ of RED-Weight\) must be > 0"),
    ([REC, f"{REC_KNOB}clip_mode=ring", f"{REC_KNOB}eps_low_prime='0.7'"],
     r"rec.eps_low_prime must be a number \(got the string '0.7'\): drop the quotes"),
    ([REC, f"{REC_KNOB}clip_mode=sideways"], "rec.clip_mode must be one of"),
    (["+algorithm.off_grpo.sync_perod=3"], "'sync_perod': did you mean 'sync_period'"),
    ([REC, f"{REC_KNOB}weight=importance_sampling"], "rec.weight must be one of"),
    ([REC, f"{REC_KNOB}anchor=rprime", "algorithm.rollout_correction.rollout_is=null"],
     "anchor=rprime measures ρ against α"),
    # the default anchor (alpha) without rollout log-probs: the escape is named
    ([REC, "actor_rollout_ref.rollout.calculate_log_probs=false", "algorithm.rollout_correction.rollout_is=null"],
     r"anchor=alpha measures ρ against α.*or actor_rollout_ref.actor.policy_loss.rec.anchor=pi_k"),
    ([REC, "algorithm.rollout_correction.bypass_mode=true"], "loss rec needs π_k"),
    # rec knobs that would not act: another loss, or verl's own PolicyLossConfig (no rec field in the workers)
    ([f"{REC_KNOB}clip_mode=ring"], r"rec sets clip_mode=ring, which only the rec loss reads, but .*loss_mode=off_grpo"),
    ([REC, f"{REC_KNOB}weight=is", "actor_rollout_ref.actor.policy_loss._target_=verl.workers.config.PolicyLossConfig"],
     r"policy_loss._target_=verl.workers.config.PolicyLossConfig, which has no rec field"),
    # a ratio against α reads α off r': a truncated r' is not α, whatever allow_truncated_rprime says
    ([REC, f"{REC_KNOB}anchor=rprime", "algorithm.off_grpo.allow_truncated_rprime=true",
      "algorithm.rollout_correction.rollout_is_threshold=2.0"], r"anchor=rprime needs α exactly"),
    ([REC, f"{REC_KNOB}anchor=alpha", "algorithm.off_grpo.allow_truncated_rprime=true",
      "algorithm.rollout_correction.rollout_is_batch_normalize=true"], r"rescales r'.*anchor=alpha needs α exactly"),
    # the mode presents itself to verl as "sync": verl's trainer reads trainer.v1.sync, not trainer.v1.off_grpo_sync
    (["algorithm.off_grpo.sync_period=4", "+trainer.v1.off_grpo_sync.parameter_sync_step=3"],
     r"trainer.v1.off_grpo_sync.parameter_sync_step=3 is not where verl's trainer reads.*\+trainer.v1.sync.parameter_sync_step=3"),
    # verl's local updates on sub-batches of one generation: each but the first is lagged by the updates before it
    (["algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.rollout_schedule=per_step",
      "+trainer.v1.sync.parameter_sync_step=2"],
     r"^algorithm.off_grpo.sync_period=4 \(vLLM serves the lagged weights α between syncs\) does not combine with "
     r"trainer.v1.sync.parameter_sync_step=2 \(verl's local "
     r"updates on sub-batches of one generation, each but the first lagged by the updates before it, which the "
     r"served-policy guard's lag does not count\): drop that override.$"),
    # the lag's forced syncs (and the window's check) must find verl's validation steps: s % test_freq == 0
    (["algorithm.off_grpo.sync_period=4", "trainer.test_freq=5.0"],
     r"trainer.test_freq must be an integer \(got 5.0\)"),
    (["algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.sync_before_validate=false", "trainer.test_freq=2.5"],
     r"trainer.test_freq must be an integer \(got 2.5\)"),
    # the group size of the plugin's estimators: not a number verl's own checks trip over with a TypeError
    (["actor_rollout_ref.rollout.n=abc"], r"rollout.n must be an integer >= 2 \(got 'abc'\) with algorithm.adv_estimator=off_grpo"),
    (["actor_rollout_ref.rollout.n=2.5"], r"rollout.n must be an integer >= 2 \(got 2.5\)"),
    (["actor_rollout_ref.rollout.n='8'"], r"rollout.n must be an integer \(got the string '8'\): drop the quotes"),
    # the plugin's estimators read it: a quoted 'false' would be true
    (["algorithm.norm_adv_by_std_in_grpo='false'"],
     r"algorithm.norm_adv_by_std_in_grpo must be true or false \(got 'false', a quoted string, which verl reads as "
     r"true: write it without quotes\) with algorithm.adv_estimator=off_grpo, which reads it"),
    # a null is read as verl reads it, not as the check's default: each would pass and fail after the first rollout
    (["actor_rollout_ref.actor.policy_loss.loss_mode=null"],
     r"^actor_rollout_ref.actor.policy_loss.loss_mode is null, which is no policy loss: set it \(the plugin's: "
     r"off_grpo, rec\); verl would fail at the first actor update"),
    (["algorithm.adv_estimator=null"], r"^algorithm.adv_estimator is null, which is no advantage estimator"),
    (["actor_rollout_ref.rollout.n=null"], r"rollout.n must be an integer >= 2 \(got None\)"),  # verl: a TypeError
    (["actor_rollout_ref.actor.ppo_epochs=null"], r"ppo_epochs=None is i, .* must be an integer >= 1"),
    (["actor_rollout_ref.actor.clip_ratio_low=null", "actor_rollout_ref.actor.clip_ratio=null"],
     r"clip_ratio_low and clip_ratio are both null: ε_low of the off_grpo clip window needs one of them"),
    (["algorithm.off_grpo.sync_period=4", "actor_rollout_ref.rollout.name=null"],
     r"implemented for actor_rollout_ref.rollout.name=vllm only \(got None\): set actor_rollout_ref.rollout.name=vllm, "
     r"or algorithm.off_grpo.sync_period=1 \(on-policy\)\.$"),
    # main_ppo runs v0 for a null (the checks read V1) and V1 for a quoted 'false' (verl's `if use_v1:`)
    (["algorithm.off_grpo.sync_period=4", "trainer.use_v1=null"], r"^trainer.use_v1 must be true or false \(got None\)\.$"),
    # verl's flags the checks read: a quoted one is true in verl, whatever it says
    (["algorithm.rollout_correction.bypass_mode='false'"],
     r"^algorithm.rollout_correction.bypass_mode must be true or false \(got 'false', a quoted string, which verl "
     r"reads as true: write it without quotes\)\.$"),
    (["algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.sync_period=4",
      "algorithm.filter_groups.enable='true'"], r"^algorithm.filter_groups.enable must be true or false \(got 'true'"),
    # verl 0.9.1's v0 trainer reads no refill option: dynamic sampling would silently not happen
    (["trainer.use_v1=false", "algorithm.filter_groups.enable=true"],
     r"^algorithm.filter_groups.enable=true \(refill filtered groups\) is read only by verl's V1 trainer; with "
     r"trainer.use_v1=false verl 0.9.1 ignores it and trains every group unfiltered: set trainer.use_v1=true, or "
     r"algorithm.filter_groups.enable=false\.$"),
    (["trainer.use_v1=false", "trainer.v1.sampler.sync_refill_failed_groups=true"],
     r"^trainer.v1.sampler.sync_refill_failed_groups=true \(refill failed groups\) is read only by verl's V1"),
    # verl's first rollout would find -inf (its upper bound must be positive): not "untruncated"
    (["algorithm.rollout_correction.rollout_is_threshold=-inf"], r"rollout_is_threshold=-inf truncates it: set it to inf"),
    # verl reads it with DictConfig.get(..., 2.0), which a null does not default: a TypeError at its first batch
    (["algorithm.rollout_correction.rollout_is_threshold=null"],
     r"rollout_is_threshold=null, which verl's rollout correction refuses at its first batch \(a TypeError\): set it "
     r"to inf, or set algorithm.off_grpo.allow_truncated_rprime=true"),
    # verl loads the v0 manager by its dotted path only in Ray's TaskRunner
    (["trainer.use_v1=false", "algorithm.off_grpo.sync_period=4",
      "+actor_rollout_ref.rollout.checkpoint_manager_class=verl_offgrpo.sync.lagged_manager.LaggedCheckpointManagr"],
     r"needs actor_rollout_ref.rollout.checkpoint_manager_class=verl_offgrpo.sync.lagged_manager.LaggedCheckpointManager "
     r"\(got 'verl_offgrpo.sync.lagged_manager.LaggedCheckpointManagr'\)"),
    # what vLLM would refuse when it starts or at its first request, and a temperature π_k cannot divide by
    (["actor_rollout_ref.rollout.logprobs_mode=processed_logprob"],
     r"logprobs_mode='processed_logprob' is not a log-prob mode of vLLM's \('processed_logprobs', 'raw_logprobs'\)"),
    (["actor_rollout_ref.rollout.temperature=0"],
     r"rollout.temperature must be a number > 0 \(got 0\): π_k divides the actor's logits by it"),
    (["actor_rollout_ref.rollout.top_p=1.5"], r"rollout.top_p must be a number in \(0, 1\] \(got 1.5\)"),
    # the message names the whole key
    (["algorithm.off_grpo.sync_period=4", "actor_rollout_ref.model.lora_rank=abc"],
     r"^actor_rollout_ref.model.lora_rank must be an integer \(got 'abc'\)"),
]


#: more values of a rule the default run already checks with one (a number's type, sign, range): ``-m slow`` only
#: (sync_period=true stays: a bool is no integer; rollout.n='8' stays: a quoted count is told to drop its quotes)
VARIANTS = {("algorithm.off_grpo.sync_period='10'",), ("algorithm.off_grpo.sync_period=2.5",),
            ("algorithm.off_grpo.std_eps=-1e-6",), ("algorithm.off_grpo.std_eps=inf",),
            ("algorithm.off_grpo.std_eps='1e-3'",), ("actor_rollout_ref.rollout.n=2.5",),
            ("actor_rollout_ref.rollout.n=null",)}


@pytest.mark.parametrize("overrides,message", [
    pytest.param(o, m, marks=pytest.mark.slow) if tuple(o) in VARIANTS else (o, m) for o, m in REJECTED
], ids=[" ".join(o) for o, _ in REJECTED])
def test_rejected_configs(overrides, message):
    """Each rejected config fails with its message, in one line that names the knob and the value."""
    with pytest.raises(OffGRPOConfigError, match=message) as err:
        validate(composed(*overrides))
    assert "\n" not in str(err.value), overrides


VERLS_GRPO = ("algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla")
UNTRUNCATED_UNDER_VERL = (
    "off_grpo: actor_rollout_ref.actor.policy_loss.loss_mode=vanilla is verl's loss, which verl multiplies per token "
    "by its rollout IS weights (algorithm.rollout_correction.rollout_is=token), untruncated here "
    "(rollout_is_threshold=inf, which the plugin's yaml sets for its own losses): for verl's behaviour set "
    "algorithm.rollout_correction.rollout_is_threshold=2.0 (verl's default) or rollout_is=null."
)


@pytest.mark.parametrize("overrides", slow_after(1, [VERLS_GRPO, VERLS_GRPO[1:], (*VERLS_GRPO, "trainer.v1.trainer_mode=sync")],
                                                  one_name=True),
                         ids=["grpo+vanilla", "off_grpo+vanilla", "grpo+vanilla, sync mode (plain verl)"])
def test_verls_loss_under_the_yamls_untruncated_is_weights_warns_once(caplog, overrides):
    """The plugin's yaml keeps r' untruncated for its losses (rollout_is=token, threshold inf); verl's own losses
    multiply each token's loss by those weights: verl's vanilla loss composed from the plugin's yaml is not verl's
    GRPO. One warning line (a job that does not select the plugin at all gets it too), naming the fix."""
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate(composed(*overrides))
    said = [r.getMessage() for r in caplog.records if "rollout IS weights" in r.getMessage()]
    assert said == [UNTRUNCATED_UNDER_VERL]


@pytest.mark.parametrize("fix", slow_after(1, ["algorithm.rollout_correction.rollout_is_threshold=2.0",
                                 "algorithm.rollout_correction.rollout_is=null",
                                 "actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo"]))
def test_verls_loss_with_truncated_or_no_is_weights_or_the_plugins_loss_does_not_warn(caplog, fix):
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate(composed(*VERLS_GRPO, fix))
    assert "rollout IS weights" not in caplog.text


def test_a_plain_verl_config_with_untruncated_is_weights_is_left_alone(caplog):
    """verl's own yaml with a threshold of inf set by hand: the user's choice, no line of the plugin's."""
    from _overrides import verl_config

    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate(verl_config("algorithm.rollout_correction.rollout_is=token",
                             "algorithm.rollout_correction.rollout_is_threshold=inf",
                             "actor_rollout_ref.rollout.calculate_log_probs=true"))
    assert "rollout IS weights" not in caplog.text


def test_the_v0_manager_on_the_v1_trainer_is_refused():
    """verl's V1 trainer never reads ``rollout.checkpoint_manager_class`` (only v0's RayPPOTrainer does): the README's
    v0 recipe with ``trainer.use_v1=false`` forgotten would mark the job the plugin's and run no lag. One line naming
    both ways out; the same override on the v0 trainer passes."""
    from _overrides import validate_as_main_ppo, verl_config

    with pytest.raises(OffGRPOConfigError, match=(
            r"^actor_rollout_ref.rollout.checkpoint_manager_class=verl_offgrpo.sync.checkpoint_manager_v0."
            r"LaggedCheckpointManager is the v0 trainer's: verl's V1 trainer \(trainer.v1.trainer_mode='sync'\) never "
            r"reads it. Add trainer.use_v1=false, or drop it and set trainer.v1.trainer_mode=off_grpo_sync. \(The plugin's yaml sets this")):
        validate_as_main_ppo(verl_config(V0_MANAGER))
    validate_as_main_ppo(verl_config(V0_MANAGER, "trainer.use_v1=false"))
    validate_as_main_ppo(verl_config(V0_MANAGER, "trainer.v1.trainer_mode=off_grpo_sync"))  # its own manager runs
    misspelt = V0_MANAGER.replace("LaggedCheckpointManager", "LaggedManager")  # selects the plugin all the same
    with pytest.raises(OffGRPOConfigError, match=r"LaggedManager is no manager of the plugin's \(verl_offgrpo\.sync\."):
        validate_as_main_ppo(verl_config(misspelt))


VERLS_ALGORITHM = ("off_grpo: this job runs verl's 'grpo' estimator and 'vanilla' loss, not the plugin's: only its "
                   "trainer and vLLM settings apply, not algorithm.off_grpo.std_eps, std_unbiased or zero_var_mask "
                   "(set algorithm.adv_estimator=off_grpo and "
                   "actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo for off-policy GRPO).")


@pytest.mark.parametrize("selecting", ["trainer.v1.trainer_mode=off_grpo_sync", "+algorithm.off_grpo.final_outputs_only=true"])
def test_a_job_selecting_the_plugin_without_its_algorithm_is_told_so(selecting, caplog):
    """The plugin's trainer mode or final outputs alone select the plugin (its patches go on) over verl's GRPO: one
    line says verl's estimator and loss run; a job with the plugin's estimator and loss (the shipped yaml) gets none."""
    from _overrides import validate_as_main_ppo, verl_config

    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate_as_main_ppo(verl_config(selecting))
    assert [r.getMessage() for r in caplog.records if "not the plugin's" in r.getMessage()] == [VERLS_ALGORITHM]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(composed())
    assert "not the plugin's" not in caplog.text
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(composed("algorithm.adv_estimator=grpo"))  # the plugin's loss runs: its own line says so
    assert "not the plugin's" not in caplog.text
    enum = verl_config(selecting)  # verl's AdvantageEstimator (a str enum) named as its value
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    enum.algorithm.adv_estimator = AdvantageEstimator.GRPO
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate_as_main_ppo(enum)
    assert [r.getMessage() for r in caplog.records if "not the plugin's" in r.getMessage()] == [VERLS_ALGORITHM]


V0_UNWIRED = ("off_grpo: trainer.use_v1=false without the plugin's checkpoint manager (got None): on the v0 trainer the "
              "served-policy guard (algorithm.off_grpo.max_log_rprime_*) and the off_grpo/bound/* metrics run only "
              "through it; add +actor_rollout_ref.rollout.checkpoint_manager_class="
              "verl_offgrpo.sync.lagged_manager.LaggedCheckpointManager to run them.")


def test_the_v0_trainer_without_the_plugins_manager_warns_that_the_guard_and_bound_metrics_do_not_run(caplog):
    """At v = 1 the v0 trainer runs the plugin's estimator and loss without its checkpoint manager, but the
    served-policy guard and the off_grpo/bound/* metrics are wired through that manager: one warning naming the
    override (the README's); with the manager, or on V1, none."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed("trainer.use_v1=false"))
    assert [r.getMessage() for r in caplog.records if "checkpoint manager" in r.getMessage()] == [V0_UNWIRED]
    for overrides in (("trainer.use_v1=false", V0_MANAGER), ()):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            validate(composed(*overrides))
        assert "checkpoint manager" not in caplog.text, overrides


def test_clip_ratio_alone_warns_that_the_per_side_values_win(caplog):
    """verl's yaml sets clip_ratio_low/high to 0.2: clip_ratio=0.3 alone would leave ε at 0.2."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed("actor_rollout_ref.actor.clip_ratio=0.3"))
    assert "clip_ratio=0.3 is not used: clip_ratio_low=0.2 and clip_ratio_high=0.2 are set" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed("actor_rollout_ref.actor.clip_ratio_low=0.3", "actor_rollout_ref.actor.clip_ratio_high=0.3"))
    assert "is not used" not in caplog.text


@pytest.mark.parametrize("loss", ["off_grpo", "rec"])
def test_a_dual_clip_from_a_vanilla_script_warns_that_the_loss_has_none(caplog, loss):
    """DAPO-style scripts set clip_ratio_c (verl's vanilla dual clip); the off_grpo and rec losses read no such
    bound: one warning naming it; verl's default 3.0 says nothing."""
    policy = f"actor_rollout_ref.actor.policy_loss.loss_mode={loss}"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed(policy, "actor_rollout_ref.actor.clip_ratio_c=10.0"))
    assert f"{loss}: actor_rollout_ref.actor.clip_ratio_c=10.0 is not used: the {loss} loss has no dual clip" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed(policy))
    assert "clip_ratio_c" not in caplog.text


@pytest.mark.parametrize("override", ["actor_rollout_ref.rollout.top_p=0.9", "actor_rollout_ref.rollout.top_k=20"])
def test_truncated_sampling_warns(override, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed(override))
    assert "biased" in caplog.text


@pytest.mark.parametrize(
    "overrides,warns",
    [
        (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"], True),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla", "algorithm.off_grpo.zero_var_mask=false"], False),
        ([], False),  # the off_grpo loss: exactly 0 on such a mini-batch (test_policy_loss)
        # RED-Drop's dropped rows leave the loss even without the mask
        (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla", "algorithm.off_grpo.zero_var_mask=false",
          "algorithm.adv_estimator=red_drop"], True),
    ],
)
def test_mask_with_another_loss_warns_about_all_masked_mini_batches(overrides, warns, caplog):
    """test_policy_loss shows verl's vanilla loss at 0/0 when every row of a mini-batch is masked."""
    overrides = ["algorithm.rollout_correction.rollout_is=null", *overrides]  # vanilla takes no r'
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed(*overrides))
    assert ("divides by 0" in caplog.text) is warns


def test_rec_and_red_drop_selected_by_overrides_reach_verl():
    """Hydra overrides alone select the family: verl's registries hand out the plugin's functions, and the
    actor config verl builds in each worker (hydra instantiate through the yaml's _target_) carries the knobs."""
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass

    from verl_offgrpo.advantage import compute_red_drop_advantage
    from verl_offgrpo.config import RECConfig
    from verl_offgrpo.rec_loss import compute_policy_loss_rec

    cfg = composed(REC, f"{REC_KNOB}clip_mode=ring", f"{REC_KNOB}eps_high_prime=3", f"{REC_KNOB}weight=red_weight",
                   f"{REC_KNOB}tau=0.5", "algorithm.adv_estimator=red_drop", "algorithm.off_grpo.red_drop_seed=5")
    assert validate_off_grpo_config(cfg).red_drop_seed == 5
    assert get_adv_estimator_fn(cfg.algorithm.adv_estimator) is compute_red_drop_advantage
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert get_policy_loss_fn(actor.policy_loss.loss_mode) is compute_policy_loss_rec
    assert actor.policy_loss.rec == RECConfig(clip_mode="ring", eps_high_prime=3.0, weight="red_weight", tau=0.5)
    # the shipped defaults are the documented ones
    assert RECConfig.from_mapping(composed().actor_rollout_ref.actor.policy_loss.rec) == RECConfig()


def test_a_rejected_config_does_not_print_verls_success_banner(capsys):
    """The plugin's check runs first: verl's "All configuration checks passed" is for passing configs only."""
    with pytest.raises(OffGRPOConfigError):
        validate(composed("algorithm.off_grpo.zero_var_mask=maybe"))
    assert "checks passed" not in capsys.readouterr().out
    validate(composed())
    assert "All configuration checks passed" in capsys.readouterr().out


def test_off_grpo_loss_over_verls_grpo_estimator_says_what_it_gets(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed("algorithm.adv_estimator=grpo"))
    told = [r.getMessage() for r in caplog.records if "adv_estimator=grpo" in r.getMessage()]
    assert len(told) == 1 and "verl's grpo advantage" in told[0] and "do not apply" in told[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed())
    assert "adv_estimator" not in caplog.text


def test_window_with_period_one_is_on_policy(caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(composed("algorithm.off_grpo.rollout_schedule=window"))
    assert "window with sync_period=1 is on-policy GRPO" in caplog.text


WINDOW_10 = ("algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.sync_period=10")
PER_STEP_10 = ("algorithm.off_grpo.rollout_schedule=per_step", "algorithm.off_grpo.sync_period=10")
ONE_GPU = ("data.train_batch_size=32", "actor_rollout_ref.rollout.n=8", "trainer.n_gpus_per_node=1",
           "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.actor.ppo_mini_batch_size=32")


def _wave_lines(caplog, *overrides):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(composed(*overrides))
    told = [r for r in caplog.records if "rounds)" in r.getMessage()]
    assert all(r.levelno == logging.INFO for r in told)  # advice, not a warning
    return [r.getMessage() for r in told]


def test_window_larger_than_max_num_seqs_says_how_many_waves(caplog):
    """10 steps × 32 prompts × n=8 = 2560 samples on one engine; verl's max_num_seqs=256 → 10 waves."""
    told = _wave_lines(caplog, *WINDOW_10, *ONE_GPU)
    assert len(told) == 1
    assert "each vLLM engine runs its 2560 window samples 256 at a time (≈ 10 rounds)" in told[0]
    # information, not an instruction: more at once helps only an engine not yet busy at max_num_seqs
    assert ("where it is not busy at 256, a larger actor_rollout_ref.rollout.max_num_seqs shortens generation, at a "
            "GPU-memory cost: raise it in a short run first") in told[0]
    assert "2560 shortens" not in told[0]  # no number to copy: the window's whole count can take the GPU's memory
    assert len(told[0]) < 300  # one line, not a paragraph
    # a window that fits, per_step, and a window of one step: silent
    assert _wave_lines(caplog, *WINDOW_10, *ONE_GPU, "actor_rollout_ref.rollout.max_num_seqs=2560") == []
    assert _wave_lines(caplog, *PER_STEP_10, *ONE_GPU) == []
    # a run of 4 steps is one window of 4: 4 × 32 × 8 = 1024 samples, 4 rounds of 256
    told = _wave_lines(caplog, *WINDOW_10, *ONE_GPU, "trainer.total_training_steps=4")
    assert len(told) == 1 and "runs its 1024 window samples 256 at a time (≈ 4 rounds)" in told[0]
    assert _wave_lines(caplog, "algorithm.off_grpo.rollout_schedule=window", *ONE_GPU) == []


@pytest.mark.parametrize("v, test_freq, longest", [(10, 5, 4), (10, 4, 3), (10, 3, 2), (4, 10, 3), (10, 15, 9)])
def test_longest_lag_with_validation_syncs_is_what_the_sync_schedule_gives(v, test_freq, longest):
    """Syncs on the multiples of v and of test_freq: (10, 5) syncs every 5 steps (lag ≤ 4); (10, 4) at
    0 4 8 10 12 16 20 (≤ 3); (4, 10) at 0 4 8 10 12 16 20 (≤ 3 = v − 1). Checked against the real schedule."""
    from verl_offgrpo.config.validation_lag import longest_lag
    from verl_offgrpo.sync.schedule import simulate

    assert longest_lag(v, test_freq) == longest
    steps = range(1, 3 * v * test_freq + 1)
    decisions = simulate(v, steps, forced={s for s in steps if s % test_freq == 0})
    assert max(d.step - d.version_before for d in decisions[1:]) - 1 == longest  # rollout lag of step s+1


def test_validation_that_restarts_the_lag_is_told(caplog):
    """v = 10 with test_freq = 5 (the recipes' 5 once): per_step syncs at every validation, so the lag never
    passes 4: a warning; the window keeps its samples from α: an info line on the extra transfer."""
    def told(level, *overrides):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=LOGGER):
            validate(composed(*ONE_GPU, *overrides))
        return [r.getMessage() for r in caplog.records if "test_freq" in r.getMessage() and r.levelno == level]

    lines = told(logging.WARNING, *PER_STEP_10, "trainer.test_freq=5")
    assert len(lines) == 1 and "samples are at most 4 steps stale, not 9" in lines[0]
    assert "Set trainer.test_freq to a multiple of 10" in lines[0]
    lines = told(logging.INFO, *WINDOW_10, "trainer.test_freq=5")
    assert len(lines) == 1 and "each one costs a weight transfer and a vLLM wake more" in lines[0]
    per_step = "algorithm.off_grpo.rollout_schedule=per_step"
    # v = 4, test_freq = 10: syncs at 4, 8, 10, 12, 16, 20, ...: some periods shorter, the longest lag still 3
    shorter = (per_step, "algorithm.off_grpo.sync_period=4", "trainer.test_freq=10")
    assert told(logging.WARNING, *shorter) == []
    lines = told(logging.INFO, *shorter)
    assert len(lines) == 1 and "the lag restarts there and some periods are shorter (the longest still gives a lag of 3)" in lines[0]
    for quiet in ((*PER_STEP_10, "trainer.test_freq=20"),
                  (*PER_STEP_10, "trainer.test_freq=5", "algorithm.off_grpo.sync_before_validate=false")):  # fmt: skip
        assert told(logging.WARNING, *quiet) == [] and told(logging.INFO, *quiet) == []


def test_window_says_when_checkpoints_fall_inside_windows(caplog):
    """save_freq 3 with v = 10: a resume from step 3 starts a new window and generates up to 9 steps' prompts again."""
    def told(*overrides):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=LOGGER):
            validate(composed(*ONE_GPU, *overrides))
        return [r.getMessage() for r in caplog.records if "save_freq" in r.getMessage()]

    lines = told(*WINDOW_10, "trainer.save_freq=3")
    assert len(lines) == 1 and "trainer.save_freq=3 is not a multiple of sync_period=10" in lines[0]
    assert [r.levelno for r in caplog.records if "save_freq" in r.getMessage()] == [logging.INFO]  # nothing lost, generation redone
    assert "up to 9 steps' worth" in lines[0]
    assert told(*WINDOW_10, "trainer.save_freq=20") == []  # checkpoints on window boundaries
    assert told(*WINDOW_10, "trainer.save_freq=-1") == []
    assert told(*PER_STEP_10, "trainer.save_freq=3") == []  # per_step: no buffer


def test_lag_with_verls_sync_mode_says_it_syncs_every_step():
    with pytest.raises(OffGRPOConfigError, match="got 'sync'.*verl's sync mode syncs after every step") as err:
        validate(composed("algorithm.off_grpo.sync_period=10", "trainer.v1.trainer_mode=sync"))
    assert "async" not in str(err.value)


def test_window_waves_count_engines_and_vllms_token_budget(caplog):
    """8 GPUs at TP=2 are 4 engines: 10 × 1024 × 4 / 4 = 10240 samples each, 40 waves of 256; vLLM refuses
    max_num_batched_tokens (8192) < max_num_seqs, so the advice names both."""
    told = _wave_lines(caplog, *WINDOW_10)
    assert len(told) == 1 and "its 10240 window samples" in told[0] and "(≈ 40 rounds)" in told[0]
    assert "a larger actor_rollout_ref.rollout.max_num_seqs (and max_num_batched_tokens, as large) shortens" in told[0]
    # a token budget that holds the window's samples already: only max_num_seqs is named
    told = _wave_lines(caplog, *WINDOW_10, "actor_rollout_ref.rollout.max_num_batched_tokens=16384")
    assert "a larger actor_rollout_ref.rollout.max_num_seqs shortens" in told[0]
    # TP=4 halves the engines: 20480 each
    told = _wave_lines(caplog, *WINDOW_10, "actor_rollout_ref.rollout.tensor_model_parallel_size=4")
    assert "its 20480 window samples" in told[0] and "(≈ 80 rounds)" in told[0]


@pytest.mark.parametrize("overrides, per_engine", [
    ((), 10240),  # 8 GPUs / TP 2 = 4 engines; 10 × 1024 × 4 = 40960 samples
    (("trainer.nnodes=2",), 5120),  # 16 GPUs: 8 engines
    (("actor_rollout_ref.rollout.pipeline_model_parallel_size=2",), 20480),  # replicas of TP·PP = 4 GPUs: 2
    (("actor_rollout_ref.rollout.data_parallel_size=2",), 10240),  # 2 replicas of 4 GPUs, 2 DP engines each
    (("trainer.n_gpus_per_node=4", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
      "actor_rollout_ref.rollout.data_parallel_size=4"), 10240),  # one replica of 4 GPUs: 4 engines
    (("trainer.n_gpus_per_node=6",), 13654),  # 6 GPUs / TP 2 = 3 engines: ⌈40960 / 3⌉ = ⌈13653.3⌉
])
def test_window_samples_per_engine(overrides, per_engine):
    from verl_offgrpo.config.window_checks import window_samples_per_engine

    assert window_samples_per_engine(composed(*WINDOW_10, *overrides), 10) == per_engine


@pytest.mark.parametrize("size", ["tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size"])
def test_a_null_rollout_size_is_no_layout_for_either_reader(size):
    """verl multiplies the three sizes as written (a null is its TypeError, after Ray): neither the window's count
    nor the GPU-split check reads a null as 1 (one reader, :func:`rollout_layout`, for both)."""
    from verl_offgrpo.config.readers import rollout_layout
    from verl_offgrpo.config.verl_counts import check_rollout_fits_the_gpus
    from verl_offgrpo.config.window_checks import window_samples_per_engine

    config = composed(*WINDOW_10, "trainer.n_gpus_per_node=3", f"actor_rollout_ref.rollout.{size}=null")
    assert rollout_layout(config) is None
    assert window_samples_per_engine(config, 10) is None
    check_rollout_fits_the_gpus(config)  # left to verl: no error here
    layout = rollout_layout(composed(*WINDOW_10, "trainer.n_gpus_per_node=3"))
    assert (layout.gpus, layout.replica_gpus, layout.engines) == (3, 2, 1)  # verl's TP = 2 on 3 GPUs: one replica


@pytest.mark.parametrize("overrides, says", [
    (("trainer.n_gpus_per_node=1",),  # verl's yaml: rollout TP = 2
     "actor_rollout_ref.rollout.tensor_model_parallel_size=2 makes a vLLM replica of 2 GPUs, which the trainer's 1 "
     "(trainer.n_gpus_per_node=1 × trainer.nnodes=1) cannot be split into, and verl would stop at its workers' "
     "start-up, after Ray and the model: set actor_rollout_ref.rollout.tensor_model_parallel_size to one that "
     "divides 1 (verl's yaml sets 2)."),
    (("trainer.n_gpus_per_node=6", "actor_rollout_ref.rollout.tensor_model_parallel_size=4"),
     "a vLLM replica of 4 GPUs, which the trainer's 6 (trainer.n_gpus_per_node=6 × trainer.nnodes=1) cannot be split "
     "into, and verl would stop at its workers' start-up, after Ray and the model: set "
     "actor_rollout_ref.rollout.tensor_model_parallel_size to one that divides 6."),
    (("trainer.n_gpus_per_node=3", "trainer.nnodes=2", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
      "actor_rollout_ref.rollout.data_parallel_size=4"),
     "tensor_model_parallel_size=1 × data_parallel_size=4 makes a vLLM replica of 4 GPUs, which the trainer's 6 "
     "(trainer.n_gpus_per_node=3 × trainer.nnodes=2)"),
])
def test_a_rollout_replica_that_does_not_divide_the_gpus_is_one_line_before_ray(overrides, says):
    """verl's actor-rollout workers assert that their world divides into replicas of TP × DP × PP GPUs, at start-up
    on the GPUs; a selecting config hears it before Ray (v = 1 and v = 10 alike), a plain verl config is left to
    verl, and layouts that divide pass."""
    for v in (1, 10):
        with pytest.raises(OffGRPOConfigError, match="^" + re.escape(says) if says.startswith("actor") else re.escape(says)):
            validate(composed(f"algorithm.off_grpo.sync_period={v}", *overrides))
    plain = ("algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla")
    validate_off_grpo_config(composed(*plain, *overrides))  # not the plugin's to refuse
    # outside the hybrid engine verl puts the rollout in a pool of its own: not these GPUs
    separate = ("trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.hybrid_engine=false",
                "algorithm.off_grpo.zero_var_mask=false")
    validate_off_grpo_config(composed(*separate, *overrides))
    for fits in (("trainer.n_gpus_per_node=2",), ("trainer.n_gpus_per_node=6",),
                 ("trainer.n_gpus_per_node=4", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                  "actor_rollout_ref.rollout.data_parallel_size=4")):
        validate_off_grpo_config(composed(*fits))


def test_window_advice_is_printed_once_per_job(caplog):
    """The driver's validate_config advises; the trainer's re-checks (TaskRunner, checkpoint manager) of the
    same config stay quiet but still raise."""
    from verl_offgrpo.config import advisories_silenced
    from verl_offgrpo.sync.trainer_v1 import prepare_v1_config

    cfg = composed(*WINDOW_10, *ONE_GPU)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(cfg)
        prepare_v1_config(cfg)
        with advisories_silenced():
            check_window_config(cfg)
    assert len([r for r in caplog.records if "rounds)" in r.getMessage()]) == 1
    with pytest.raises(OffGRPOConfigError, match="trainer.use_v1=false"), advisories_silenced():
        check_window_config(composed(*WINDOW_10, "trainer.use_v1=false"))


def test_max_num_seqs_above_the_token_budget_fails_before_vllm_does():
    """vLLM refuses max_num_batched_tokens < max_num_seqs at startup; raising max_num_seqs for a window alone
    would pass every check and fail there. Without chunked prefill verl raises the budget to max_model_len (an
    unset one: the model's max_position_embeddings, not known here, so not checked)."""
    seqs = "actor_rollout_ref.rollout.max_num_seqs=20480"
    with pytest.raises(OffGRPOConfigError, match=r"max_num_seqs=20480 is more than .*max_num_batched_tokens=8192, "
                                                 r"which vLLM refuses at startup: set .*max_num_batched_tokens=20480"):
        validate(composed(*WINDOW_10, *ONE_GPU, seqs))
    validate(composed(*WINDOW_10, *ONE_GPU, seqs, "actor_rollout_ref.rollout.max_num_batched_tokens=20480"))
    no_chunks = ("actor_rollout_ref.rollout.enable_chunked_prefill=false", "actor_rollout_ref.rollout.max_model_len=32768")
    validate(composed(*WINDOW_10, *ONE_GPU, seqs, *no_chunks))  # verl raises the budget to 32768 itself
    no_chunks = ("actor_rollout_ref.rollout.enable_chunked_prefill=false", "actor_rollout_ref.rollout.max_model_len=16384",
                 "actor_rollout_ref.rollout.max_num_batched_tokens=20480")
    validate(composed(*WINDOW_10, *ONE_GPU, seqs, *no_chunks))  # raised, never lowered: max(20480, 16384) holds 20480
    no_chunks = ("actor_rollout_ref.rollout.enable_chunked_prefill=false", "actor_rollout_ref.rollout.max_model_len=null",
                 "data.max_prompt_length=256", "data.max_response_length=512")
    validate(composed(*WINDOW_10, *ONE_GPU, seqs, *no_chunks))  # verl raises it to the model's max_position_embeddings
    with pytest.raises(OffGRPOConfigError, match=r"max_num_seqs=20480 is more than .*max_num_batched_tokens=16384 "
                                                 r"\(verl raises it to max_model_len without chunked prefill\)"):
        validate(composed(*WINDOW_10, *ONE_GPU, seqs, "actor_rollout_ref.rollout.enable_chunked_prefill=false",
                          "actor_rollout_ref.rollout.max_model_len=16384"))  # the larger of the two, still too few


def test_an_unset_max_model_len_is_the_local_models_max_position_embeddings(tmp_path):
    """Without chunked prefill verl raises the token budget to max_model_len, which unset is the model's
    max_position_embeddings (its config.json, or its text_config's; model.override_config first): read from a
    local model folder; a hub id is not known before verl downloads it, so nothing is checked there."""
    import json

    from verl_offgrpo.config.window_checks import model_max_position_embeddings

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"max_position_embeddings": 16384}))
    (tmp_path / "vlm").mkdir()
    (tmp_path / "vlm" / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 4096}}))
    no_chunks = (*WINDOW_10, *ONE_GPU, "actor_rollout_ref.rollout.enable_chunked_prefill=false",
                 "actor_rollout_ref.rollout.max_model_len=null", "actor_rollout_ref.rollout.max_num_seqs=20480")
    with pytest.raises(OffGRPOConfigError, match=r"max_num_seqs=20480 is more than .*max_num_batched_tokens=16384 \(verl"):
        validate(composed(*no_chunks, f"actor_rollout_ref.model.path={tmp_path / 'm'}"))
    validate(composed(*no_chunks, f"actor_rollout_ref.model.path={tmp_path / 'm'}",
                      "+actor_rollout_ref.model.override_config.max_position_embeddings=32768"))
    assert model_max_position_embeddings(composed(f"actor_rollout_ref.model.path={tmp_path / 'vlm'}")) == 4096
    assert model_max_position_embeddings(composed("actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct")) is None


def test_empty_cache_on_skip_always_does_nothing_with_the_window(caplog):
    """A window has no skipped sync to wake vLLM for: said, as keep_weights=no_sleep is (a newcomer's trial)."""
    cfg = composed(*WINDOW_10, *ONE_GPU, "algorithm.off_grpo.empty_cache_on_skip=always")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(cfg)
    assert ("off_grpo: algorithm.off_grpo.empty_cache_on_skip=always does nothing with algorithm.off_grpo."
            "rollout_schedule=window: a window wakes vLLM only to sync, never on a skipped sync.") in caplog.text


def test_keep_weights_no_sleep_does_nothing_with_the_window(caplog):
    """The window never wakes vLLM without a sync: no_sleep must not turn off verl's sleep there (vLLM would
    hold its weights and KV cache through every update); per_step still gets free_cache_engine=false."""
    from verl_offgrpo.sync.trainer_v1 import prepare_v1_config

    cfg = composed(*WINDOW_10, *ONE_GPU, "algorithm.off_grpo.keep_weights=no_sleep")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(cfg)
    assert ("off_grpo: algorithm.off_grpo.keep_weights=no_sleep does nothing with algorithm.off_grpo.rollout_schedule="
            "window: a window's rollouts are all generated right after its sync, so vLLM holds no α that a later step "
            "needs.") in caplog.text
    prepare_v1_config(cfg)
    assert cfg.actor_rollout_ref.rollout.free_cache_engine is True
    auto = composed("algorithm.off_grpo.sync_period=10", *ONE_GPU, "algorithm.off_grpo.keep_weights=no_sleep")
    assert prepare_v1_config(auto).rollout_schedule == "window"  # the default resolves before the setting
    assert auto.actor_rollout_ref.rollout.free_cache_engine is True
    per_step = composed(*PER_STEP_10, *ONE_GPU, "algorithm.off_grpo.keep_weights=no_sleep")
    sets_it = ("off_grpo: algorithm.off_grpo.keep_weights=no_sleep: the V1 trainer sets "
               "actor_rollout_ref.rollout.free_cache_engine=false, so vLLM keeps its weights and KV cache on the GPU "
               "through every update.")
    assert sets_it not in caplog.text  # the window's validation above
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(per_step)  # the driver says so before the trainer does it
    assert sets_it in caplog.text
    prepare_v1_config(per_step)
    assert per_step.actor_rollout_ref.rollout.free_cache_engine is False
    caplog.clear()  # free_cache_engine=false already: nothing for the trainer to set, no line
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(composed(*PER_STEP_10, *ONE_GPU, "algorithm.off_grpo.keep_weights=no_sleep",
                          "actor_rollout_ref.rollout.free_cache_engine=false"))
    assert "keep_weights=no_sleep" not in caplog.text


def test_window_rules_callable_alone():
    """The trainer mode calls check_window_config itself; per_step ignores the window's rules."""
    ok = composed("algorithm.off_grpo.rollout_schedule=window", "algorithm.off_grpo.sync_period=3")
    assert check_window_config(ok).sync_period == 3
    per_step_v0 = composed("trainer.use_v1=false")
    assert check_window_config(per_step_v0).rollout_schedule == "per_step"
    with pytest.raises(OffGRPOConfigError, match="trainer.use_v1=false"):
        check_window_config(composed("algorithm.off_grpo.rollout_schedule=window", "trainer.use_v1=false"))


def test_knobs_read_from_a_mapping():
    """Unknown keys are refused with a hint; None is the defaults; values are typed (test_knob_docs: their docs)."""
    with pytest.raises(OffGRPOConfigError, match="Unknown key"):
        OffGRPOConfig.from_mapping({"sync_peroid": 4})
    assert OffGRPOConfig.from_mapping(None) == OffGRPOConfig()
    assert OffGRPOConfig.from_algorithm({"off_grpo": {"std_eps": 1}}).std_eps == 1.0


def _job(*args, env=None) -> dict:
    return dict(args=[sys.executable, *args], timeout=300, env={**os.environ, **(env or {})})


def _run(*args, env=None):
    return subprocess.run(capture_output=True, text=True, **_job(*args, env=env))


HYDRA_TAIL = "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."
MAIN_PPO_REJECTS = ("-m", "verl.trainer.main_ppo", "--config-path", config_dir(), "--config-name", "off_grpo_trainer",
                    *BASE, "algorithm.rollout_correction.rollout_is_threshold=2.0")
VLLM = "actor_rollout_ref.rollout.name=vllm"
#: the plugin rejects it (a window needs the V1 trainer): compose and check <overrides> say so alike
WINDOW_ON_V0 = ("algorithm.off_grpo.sync_period=10", "algorithm.off_grpo.rollout_schedule=window", "trainer.use_v1=false")
WINDOW_ON_V0_SAYS = "off_grpo config error: algorithm.off_grpo.rollout_schedule=window runs in the V1 trainer mode"
#: verl's validate_config reads actor.megatron, which the fsdp-based yaml does not have: not an assertion of verl's
MEGATRON = "actor_rollout_ref.actor.strategy=megatron"
#: verl's import-time and informational warnings that the CLI drops (main_ppo keeps them)
VERL_NOISE = ("engine is not available", "Disabled critic", "No supported accelerator", "is registered but not available")


#: verl's entry point (~7 s in its own interpreter) and the CLI, run in the background from the session's
#: start (``_background``): beside the in-process tests
BACKGROUND_JOBS = {
    "main_ppo": ("test_main_ppo_rejects_bad_config_before_ray", lambda _: _job(*MAIN_PPO_REJECTS)),
    "compose_megatron": ("test_compose_cli_says_any_error_of_verls_checks_in_one_line",
                         lambda _: _job("-m", "verl_offgrpo", "compose", *BASE, VLLM, MEGATRON)),
    "check_window_on_v0": ("test_check_cli_with_overrides_validates_as_compose",
                           lambda _: _job("-m", "verl_offgrpo", "check", *BASE, VLLM, *WINDOW_ON_V0)),
}


@pytest.fixture(scope="module")
def procs(request):
    return module_jobs(request)


def test_main_ppo_rejects_bad_config_before_ray(procs):
    """verl's real entry point fails at start-up with the plugin's message on one line, between hydra's
    two framing lines and without a traceback (no Ray, no GPU work)."""
    proc = procs["main_ppo"]  # MAIN_PPO_REJECTS
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Error executing job with overrides"))
    assert "untruncated" in lines[at + 1] and lines[at + 2:] == ["", HYDRA_TAIL]
    assert "Traceback" not in proc.stderr
    assert "Started a local Ray instance" not in proc.stderr + proc.stdout
    assert "checks passed" not in proc.stderr + proc.stdout  # the plugin's check runs before verl's banner


@pytest.mark.slow
def test_compose_cli_prints_validated_config():
    proc = _run("-m", "verl_offgrpo", "compose", *BASE, "actor_rollout_ref.rollout.name=vllm",
                "algorithm.off_grpo.sync_period=10")
    assert proc.returncode == 0, proc.stderr
    printed = OmegaConf.create(proc.stdout)
    assert printed.algorithm.off_grpo.sync_period == 10 and printed.algorithm.adv_estimator == "off_grpo"
    bad = _run("-m", "verl_offgrpo", "compose", *BASE, VLLM, "algorithm.off_grpo.sync_period=0")
    assert bad.returncode == 2 and "sync_period must be an integer >= 1" in bad.stderr
    # rollout.name is still ??? in verl's ppo_trainer: said alone, before any check ran, not "validated"
    incomplete = _run("-m", "verl_offgrpo", "compose", *BASE, "actor_rollout_ref.rollout.name=???")
    assert incomplete.returncode == 3 and "validated" not in incomplete.stderr and incomplete.stdout == ""
    assert incomplete.stderr.splitlines() == [
        "incomplete config: the mandatory value actor_rollout_ref.rollout.name is still ???; set it as an override, "
        "e.g. actor_rollout_ref.rollout.name=vllm (verl's own checks pass a ???, so main_ppo would start Ray, then fail "
        "on the first ??? it reads)"]
    assert "reward_model" not in incomplete.stderr  # its section is switched off (enable: false)


def test_compose_cli_says_any_error_of_verls_checks_in_one_line(procs):
    """verl's validate_config raising something other than an assertion (here omegaconf's ConfigAttributeError):
    exit 4 and one line, no traceback; and no verl import-time noise around it, nor the plugin's info lines (held
    until verl's checks pass)."""
    proc = procs["compose_megatron"]
    assert proc.returncode == 4 and proc.stdout == "", proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [
        "config error (verl's validate_config): ConfigAttributeError: Key 'megatron' is not in struct "
        "full_key: actor_rollout_ref.actor.megatron object_type=dict",
    ], proc.stderr


def test_check_cli_with_overrides_validates_as_compose(procs):
    """``check <overrides>`` fails a config compose rejects, with compose's exit code and one line, last (it
    said "check OK", exit 0); its report goes to stderr then, without verl's import-time warnings."""
    proc = procs["check_window_on_v0"]
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert lines[-1].startswith(WINDOW_ON_V0_SAYS), lines[-1]
    assert lines[0] == "verl-offgrpo 0.1.0 check FAILED: the config (last line); the install passed", lines
    assert "validated as compose validates it: FAILED" in proc.stderr
    assert "patches (" not in proc.stderr and len(lines) <= 6  # the short report: `check -v` lists what was checked
    assert not any(noise in proc.stderr for noise in VERL_NOISE), proc.stderr


def test_cli_usage_errors_exit_64_not_the_plugins_2():
    """An unknown flag (hydra's --cfg) is a usage error, 64, which says that compose takes overrides only."""
    proc = _run("-m", "verl_offgrpo", "compose", *BASE, "--cfg", "job")
    assert proc.returncode == 64 and proc.stdout == ""
    err = proc.stderr.splitlines()[-1]
    assert "unrecognized arguments: --cfg job; compose and check take hydra overrides only" in err
    assert "--config-name off_grpo_trainer <overrides> --cfg job" in err
    # an override after --path-hint is no flag: the error says where overrides go instead
    late = _run("-m", "verl_offgrpo", "compose", *BASE, "--path-hint", "X", "Y", "data.seed=3")
    assert late.returncode == 64 and late.stderr.splitlines()[-1].endswith(
        "unrecognized arguments: data.seed=3; put the overrides after the options (check's -v, compose's --path-hint)")


@pytest.mark.slow
def test_check_cli_with_overrides_passes_or_fails_as_compose():
    ok = _run("-m", "verl_offgrpo", "check", *BASE, VLLM)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "check OK" in ok.stdout and "validated as compose validates it: passed" in ok.stdout
    windowed = _run("-m", "verl_offgrpo", "check", *BASE, VLLM, "algorithm.off_grpo.rollout_schedule=windowed")
    assert windowed.returncode == 2 and windowed.stderr.splitlines()[-1] == (
        "off_grpo config error: algorithm.off_grpo.rollout_schedule must be one of ('auto', 'per_step', 'window') "
        "(got 'windowed').")
    typo = _run("-m", "verl_offgrpo", "check", *BASE, VLLM, "algorithm.off_grpo.sync_perod=10")
    assert typo.returncode == 4 and typo.stderr.splitlines()[-1].startswith("config error (hydra): ")
    assert "(did you mean algorithm.off_grpo.sync_period?)" in typo.stderr.splitlines()[-1]
    # without overrides: the install's self-check only (the shipped yaml alone has ??? values)
    bare = _run("-m", "verl_offgrpo", "check")
    assert bare.returncode == 0 and "not validated" in bare.stdout, bare.stderr[-3000:]


def _bug_in_plugin(config):
    raise KeyError("a bug")


def _bug_through_a_verl_helper(config):
    from verl.trainer.ppo.utils import need_critic

    need_critic(None)  # raises AttributeError inside verl's code


@pytest.mark.parametrize("broken, error", [(_bug_in_plugin, KeyError), (_bug_through_a_verl_helper, AttributeError)])
def test_compose_reraises_an_unexpected_error_of_the_plugins_checks(monkeypatch, broken, error):
    """Only errors of verl's own validate_config are said as config errors: a bug in the plugin's checks keeps
    its traceback, also when it is raised in a verl helper they call."""
    import verl_offgrpo.config
    from verl_offgrpo.cli.compose import dry_run

    monkeypatch.setattr(verl_offgrpo.config, "validate_off_grpo_config", broken)
    with pytest.raises(error):
        dry_run([*BASE, VLLM])


def test_compose_says_a_typo_or_bad_syntax_in_one_line(capsys):
    """A key hydra does not know, or an override it cannot parse: exit 4 and one line, no traceback."""
    from verl_offgrpo.cli.compose import dry_run

    # a misspelt knob: the right name first, before hydra's advice to append it with "+"
    for override, said in (("algorithm.off_grpo.sync_perod=10", "config error (hydra): algorithm.off_grpo.sync_perod is "
                                                                 "no knob (did you mean algorithm.off_grpo.sync_period?); "
                                                                 "Could not override"),
                           ("actor_rollout_ref.actor.policy_loss.rec.clipmode=ring", "policy_loss.rec.clip_mode?)"),
                           ("algorithm.off_grpo.sync_period=[", "[")):
        assert dry_run([*BASE, "actor_rollout_ref.rollout.name=vllm", override]) == 4
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("config error (hydra): ") and said in err[0], err


def test_compose_says_verls_own_dataclass_error_in_one_line(capsys):
    """verl's ActorConfig check comes wrapped in hydra's InstantiationException: its cause, in one line."""
    from verl_offgrpo.cli.compose import dry_run

    overrides = [o for o in BASE if "actor.ppo_micro_batch_size_per_gpu" not in o]
    assert dry_run([*overrides, "actor_rollout_ref.rollout.name=vllm"]) == 4
    said = capsys.readouterr().err
    err = [line for line in said.strip().splitlines() if line.startswith("config error")]
    assert len(err) == 1 and "Please set at least one of 'actor.ppo_micro_batch_size'" in err[0], err
    assert "Traceback" not in said


def test_compose_notes_missing_local_paths(tmp_path, capsys):
    """After the checks pass, compose notes (stderr, exit 0) each local data file that does not exist here,
    with its --path-hint; not an existing file, not a remote one; a hub-id-like model path is named as such."""
    from verl_offgrpo.cli.main import main

    missing, present = tmp_path / "none" / "train.parquet", tmp_path / "test.parquet"
    present.write_bytes(b"")
    overrides = [o for o in BASE if not o.startswith("actor_rollout_ref.model.path=")]
    assert main(["compose", "--path-hint", str(missing), "make it with python data_prep/gsm8k.py", *overrides,
                 "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
                 f"data.train_files={missing}", f"data.val_files=[{present},hdfs://nn/data/test.parquet]"]) == 0
    err = capsys.readouterr().err
    # the plugin's info lines reach compose's stderr too, as they reach main_ppo's log, marked as info
    assert "\n[INFO] off_grpo: final_outputs_only=auto is on (actor_rollout_ref.rollout.name='vllm'" in "\n" + err
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: data.train_files={missing} does not exist here (make it with python data_prep/gsm8k.py)",
        "note: actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct is not a local directory; verl will try "
        "the Hugging Face hub (transformers takes it as a hub id: the local HF cache, else a download)",
    ], notes


def test_local_path_notes_without_hints(tmp_path):
    """No hint: the path is just said to be missing; a missing absolute model path is missing, not a hub id."""
    from omegaconf import OmegaConf

    from verl_offgrpo.cli.paths import local_path_notes

    config = OmegaConf.create({"data": {"train_files": str(tmp_path / "a.parquet"), "val_files": "s3://b/c.parquet"},
                               "actor_rollout_ref": {"model": {"path": str(tmp_path / "model")}}})
    assert local_path_notes(config) == [f"note: data.train_files={tmp_path / 'a.parquet'} does not exist here",
                                        f"note: actor_rollout_ref.model.path={tmp_path / 'model'} does not exist here"]
    (tmp_path / "model").mkdir()
    config.data.train_files = [str(tmp_path / "model")]
    assert local_path_notes(config) == []
    (tmp_path / "shard-1.parquet").write_bytes(b"")  # datasets expands a glob: one that matches is there
    config.data.train_files = [str(tmp_path / "shard-*.parquet"), str(tmp_path / "other-*.parquet")]
    assert local_path_notes(config) == [f"note: data.train_files={tmp_path / 'other-*.parquet'} does not exist here"]


def test_verls_placeholder_data_paths_are_noted_as_that_with_the_data_prep_command():
    """The shipped yaml keeps verl's data placeholders (~/data/rlhf/gsm8k/...), which data_prep does not write: the
    note says so and names the command and the file it does write; another missing path keeps the plain note."""
    from verl_offgrpo.cli.paths import local_path_notes, verls_placeholder_data

    assert verls_placeholder_data() == {"data.train_files": "~/data/rlhf/gsm8k/train.parquet",
                                        "data.val_files": "~/data/rlhf/gsm8k/test.parquet"}
    config = composed(*BASE)
    notes = [n for n in local_path_notes(config) if n.startswith("note: data.")]
    assert notes == [
        "note: data.train_files=~/data/rlhf/gsm8k/train.parquet does not exist here (verl's placeholder: set "
        "data.train_files to your data; in a checkout of the repository, `python data_prep/gsm8k.py --output-dir "
        "~/data/gsm8k` writes $HOME/data/gsm8k/train.parquet)",
        "note: data.val_files=~/data/rlhf/gsm8k/test.parquet does not exist here (verl's placeholder: set "
        "data.val_files to your data; in a checkout of the repository, `python data_prep/gsm8k.py --output-dir "
        "~/data/gsm8k` writes $HOME/data/gsm8k/test.parquet)",
    ]
    config = composed(*BASE, "data.train_files=/nowhere/train.parquet")
    assert "note: data.train_files=/nowhere/train.parquet does not exist here" in local_path_notes(config)


def test_a_data_path_under_home_is_noted_as_one_verl_does_not_find(tmp_path, monkeypatch):
    """verl's datasets and transformers do not expand ``~``: a file or model at ~/... that exists is noted with the
    path to write; one missing either way keeps the plain note."""
    from verl_offgrpo.cli.paths import local_path_notes

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.parquet").write_bytes(b"")
    notes = local_path_notes(composed(*BASE, "data.train_files='~/d/train.parquet'", "data.val_files='~/d/test.parquet'"))
    assert [n for n in notes if n.startswith("note: data.")] == [
        f"note: data.train_files=~/d/train.parquet: verl does not expand ~ in paths; the file is "
        f"{tmp_path}/d/train.parquet: write that",
        "note: data.val_files=~/d/test.parquet does not exist here"]
    (tmp_path / "m").mkdir()
    notes = local_path_notes(composed(*BASE, "actor_rollout_ref.model.path='~/m'"))
    assert f"note: actor_rollout_ref.model.path=~/m: verl does not expand ~ in paths; the model is {tmp_path}/m: " \
           "write that" in notes


@pytest.mark.slow
def test_check_cli_is_loud_when_verl_did_not_load_the_plugin():
    proc = _run("-m", "verl_offgrpo", "check", env={"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert proc.returncode == 1
    assert ("verl did not load the plugin: VERL_USE_EXTERNAL_PLUGINS=none leaves its entry point 'off_grpo' out "
            "(unset it, or list off_grpo there)") in proc.stderr
    assert "Importing verl_offgrpo.plugin directly" not in proc.stderr  # its import is not what failed
    assert "advantage estimator off_grpo is not registered with verl" in proc.stderr


@pytest.mark.parametrize("value, left_out", [(None, False), ("auto", False), ("none", True), ("off_grpo", False),
                                             ("other_pkg, OFF_GRPO", False), ("other_pkg", True), ("", True),
                                             (" Auto ", False)])
def test_check_names_verls_plugin_switch_where_it_leaves_the_plugin_out(monkeypatch, value, left_out):
    """verl 0.9.1 reads VERL_USE_EXTERNAL_PLUGINS lowercased: auto (default), none, or entry point names."""
    from verl_offgrpo.cli.install_check import plugins_policy_leaves_out

    if value is None:
        monkeypatch.delenv("VERL_USE_EXTERNAL_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", value)
    line = plugins_policy_leaves_out(["off_grpo"])
    assert (line is not None) is left_out
    if left_out:
        assert line == f"VERL_USE_EXTERNAL_PLUGINS={value} leaves its entry point 'off_grpo' out (unset it, or list off_grpo there)"
    assert plugins_policy_leaves_out([]) is None  # no entry point at all: check says not pip-installed instead


@pytest.mark.slow
def test_compose_cli_fails_when_verl_did_not_load_the_plugin():
    """Without the plugin verl's own validate_config passes configs the plugin rejects: compose must not
    print "checks passed" then (it did, with exit 0)."""
    bad_for_the_plugin = ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"]  # the mask stays on
    assert _run("-m", "verl_offgrpo", "compose", *BASE, VLLM, *bad_for_the_plugin).returncode == 2
    proc = _run("-m", "verl_offgrpo", "compose", *BASE, VLLM, *bad_for_the_plugin,
                env={"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert proc.returncode == 1 and "did not load the verl-offgrpo plugin" in proc.stderr
    assert "checks passed" not in proc.stderr and proc.stdout == ""


def test_lora_with_lag_rejected():
    cfg = composed("algorithm.off_grpo.sync_period=4")
    cfg.actor_rollout_ref.model.lora_rank = 8
    with pytest.raises(OffGRPOConfigError, match="not supported with LoRA"):
        validate_off_grpo_config(cfg)


def rec_warnings(caplog, about, *overrides):
    """The warning lines containing ``about`` that validating the rec config ``REC`` + ``overrides`` logs."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed(REC, *overrides))
    return [r.getMessage() for r in caplog.records if about in r.getMessage()]


def test_rec_knobs_the_chosen_mode_never_reads_are_named(caplog):
    """τ without weight=red_weight and ε′ without clip_mode=ring change nothing: one warning names them."""
    def told(*overrides):
        return rec_warnings(caplog, "no effect with clip_mode", *overrides)

    lines = told(f"{REC_KNOB}tau=0.5", f"{REC_KNOB}eps_high_prime=3.0")
    assert lines == ["off_grpo: actor_rollout_ref.actor.policy_loss.rec sets tau=0.5 (read only with weight=red_weight), "
                     "eps_high_prime=3.0 (read only with clip_mode=ring): no effect with clip_mode=one-side, weight=none."]
    assert told(f"{REC_KNOB}tau=0.5", f"{REC_KNOB}weight=red_weight") == []
    assert told(f"{REC_KNOB}eps_high_prime=3.0", f"{REC_KNOB}clip_mode=ring") == []


@pytest.mark.parametrize("overrides, option", [
    ((), "REC-OneSide-NoIS (ε = 0.2/0.2, ρ = π_θ/α, A = r − mean)"),
    ((f"{REC_KNOB}weight=is", f"{REC_KNOB}clip_mode=two-side"), "REC-TwoSide-IS (ε = 0.2/0.2"),
    (("actor_rollout_ref.actor.clip_ratio_low=0.6", "actor_rollout_ref.actor.clip_ratio_high=2.0"),
     "REC-OneSide-NoIS, wider clip (ε = 0.6/2,"),
    ((f"{REC_KNOB}clip_mode=none", f"{REC_KNOB}weight=red_weight"), "RED-Weight (ρ = π_θ/α, A = r − mean)"),
    ((f"{REC_KNOB}clip_mode=none", "algorithm.adv_estimator=red_drop"), "RED-Drop + group-relative REINFORCE ("),
    ((f"{REC_KNOB}clip_mode=ring", f"{REC_KNOB}anchor=rprime"), "REC-Ring-NoIS (ε = 0.2/0.2, ρ = π_θ/α around r'"),
    (("algorithm.norm_adv_by_std_in_grpo=true",), "REC-OneSide-NoIS (ε = 0.2/0.2, ρ = π_θ/α, A = (r − mean)/std, not the paper's"),
])  # fmt: skip
def test_rec_says_which_option_of_the_paper_it_runs(caplog, overrides, option):
    """One info line names the README's option, its ε, ρ and A (the paper's A = r − mean, or divided by std)."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(composed(REC, "algorithm.norm_adv_by_std_in_grpo=false", *overrides))
    lines = [r for r in caplog.records if "the rec loss runs" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert f"off_grpo: the rec loss runs {option}" in lines[0].getMessage()


def test_a_refused_rec_config_names_no_option(caplog):
    """The option line says what will run: a config refused later in the checks (here anchor=alpha without α's
    log-probs) prints its error only, not "the rec loss runs …" first."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(OffGRPOConfigError, match="anchor=alpha measures"):
        validate(composed(REC, "algorithm.norm_adv_by_std_in_grpo=false",
                          "actor_rollout_ref.rollout.calculate_log_probs=false"))
    assert not [r for r in caplog.records if "the rec loss runs" in r.getMessage()]


def test_rec_warns_of_eps_that_cannot_act(caplog):
    """ε under clip_mode=none (no mask) and ε_low ≥ 1 (ρ < 1 − ε_low ≤ 0 never happens) change nothing."""
    def told(*overrides):
        return rec_warnings(caplog, "clip_ratio_low", *overrides)

    none = told(f"{REC_KNOB}clip_mode=none", "actor_rollout_ref.actor.clip_ratio_low=0.6")
    assert none == ["off_grpo: actor_rollout_ref.actor.clip_ratio_low/high=0.6/0.2: no effect with the rec loss's "
                    "clip_mode=none (no mask)."]
    assert "lower side never binds" in told("actor_rollout_ref.actor.clip_ratio_low=1.0")[0]
    assert told("actor_rollout_ref.actor.clip_ratio_low=0.99") == []
    assert told(f"{REC_KNOB}clip_mode=none") == []
    # anchor=rprime centres the band on r': its lower edge r' − ε_low binds wherever r' > ε_low
    assert told(f"{REC_KNOB}anchor=rprime", "actor_rollout_ref.actor.clip_ratio_low=1.0") == []


def test_rec_warns_of_an_anchor_nothing_reads(caplog):
    """ρ feeds the clip mask and weight=is only: under clip_mode=none with weight none or red_weight a non-default
    anchor changes nothing; with weight=is, or with a mask, it does."""
    def told(*overrides):
        return rec_warnings(caplog, "anchor=", *overrides)

    assert told(f"{REC_KNOB}clip_mode=none", f"{REC_KNOB}anchor=pi_k") == [
        "off_grpo: actor_rollout_ref.actor.policy_loss.rec sets anchor=pi_k (read only with a clip mask or weight=is): "
        "no effect with clip_mode=none, weight=none."]
    assert len(told(f"{REC_KNOB}clip_mode=none", f"{REC_KNOB}weight=red_weight", f"{REC_KNOB}anchor=rprime")) == 1
    assert told(f"{REC_KNOB}clip_mode=none", f"{REC_KNOB}weight=is", f"{REC_KNOB}anchor=pi_k") == []
    assert told(f"{REC_KNOB}anchor=rprime") == []
    assert told(f"{REC_KNOB}clip_mode=none") == []


def test_advisory_lines_come_once_per_job_every_checks_logger_is_silenced():
    """Every logger of the config checks (the modules of verl_offgrpo.config that log) is among those the
    trainer's re-checks silence: a new module's info line would otherwise print twice."""
    import importlib
    import pkgutil

    import verl_offgrpo.config as package
    from verl_offgrpo.config import validate as validate_module

    logging_modules = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"verl_offgrpo.config.{info.name}")
        if isinstance(getattr(module, "logger", None), logging.Logger) and "logger." in open(module.__file__).read():
            logging_modules.add(module.logger.name)
    assert logging_modules <= {logger.name for logger in validate_module._ADVISING_LOGGERS}


def test_rec_anchored_at_pi_k_with_one_step_per_batch_says_rho_is_one(caplog):
    """anchor=pi_k, i = 1 and one mini-batch per batch: ρ = π_θ/π_k = 1 at the only optimizer step."""
    def told(*overrides):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            validate(composed(REC, f"{REC_KNOB}anchor=pi_k", "data.train_batch_size=64", *overrides))
        return [r.getMessage() for r in caplog.records if "ρ = π_θ/π_k = 1" in r.getMessage()]

    assert len(told("actor_rollout_ref.actor.ppo_mini_batch_size=64")) == 1
    assert told("actor_rollout_ref.actor.ppo_mini_batch_size=16") == []  # four steps: θ moves within the batch
    assert told("actor_rollout_ref.actor.ppo_mini_batch_size=64", "actor_rollout_ref.actor.ppo_epochs=2") == []


def test_main_ppos_validate_config_refuses_a_selecting_config_with_a_mandatory_value_unset():
    """verl's checks pass ``rollout.name=???`` (verl's yaml leaves it so) and main_ppo would start Ray; a selecting
    config stops in the plugin's wrapper, in one line, as ``compose`` says it; a plain config is verl's as before."""
    from _overrides import shipped_config, validate_as_main_ppo, verl_config

    with pytest.raises(OffGRPOConfigError) as err:
        validate_as_main_ppo(shipped_config("actor_rollout_ref.rollout.name=???"))
    assert str(err.value).startswith(
        "incomplete config: the mandatory value actor_rollout_ref.rollout.name is still ???; set it as an override, "
        "e.g. actor_rollout_ref.rollout.name=vllm") and "\n" not in str(err.value)
    validate_as_main_ppo(shipped_config())  # set (the tests' BASE): the same config passes
    validate_as_main_ppo(verl_config("actor_rollout_ref.rollout.name=???"))  # plain verl: verl's checks pass it


def test_a_refused_config_gets_its_error_and_none_of_the_warnings_checked_before_it(caplog):
    """The checks run in a fixed order and some warn early (an idle red_drop_seed); a config a later check refuses
    (a gen_batch_size that does not divide the batch) gets the one error, no warning above it; one that passes
    gets the warning, once, after the checks."""
    idle_seed, bad_split = ("algorithm.off_grpo.red_drop_seed=3",), ("data.train_batch_size=64", "data.gen_batch_size=96")
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(OffGRPOConfigError, match="must divide"):
        validate(composed(*idle_seed, *bad_split))
    assert [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER)] == []
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate(composed(*idle_seed))
    told = [r.getMessage() for r in caplog.records if "red_drop_seed=3: no effect" in r.getMessage()]
    assert told == ["off_grpo: algorithm.off_grpo.red_drop_seed=3: no effect with algorithm.adv_estimator=off_grpo "
                    "(only red_drop reads it)."]


@pytest.mark.parametrize("overrides, shown", [
    (["actor_rollout_ref.rollout.calculate_log_probs=false"], "calculate_log_probs=False, algorithm.rollout_correction.rollout_is='token'"),
    (["algorithm.rollout_correction.rollout_is=null"], "calculate_log_probs=True, algorithm.rollout_correction.rollout_is=None"),
])
def test_without_rprime_at_period_one_the_guard_is_said_to_be_off(caplog, overrides, shown):
    """At v = 1 the loss runs without vLLM's log-probs (r' = 1), and so the guard's limit cannot act: one info line
    says so; none with r' delivered (the shipped yaml) or with the guard turned off by hand."""
    def told(*extra):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=LOGGER):
            validate(composed(*extra))
        return [r.getMessage() for r in caplog.records if "no r' = π_k/α reaches the loss" in r.getMessage()]

    lines = told(*overrides)
    assert len(lines) == 1 and shown in lines[0]
    assert "guard (algorithm.off_grpo.max_log_rprime_after_sync=0.5) and the bound monitor" in lines[0]
    assert told() == [] and told(*overrides, "algorithm.off_grpo.max_log_rprime_after_sync=0") == []


def test_a_job_verls_own_checks_refuse_gets_no_plugin_warning_either(caplog):
    """The plugin's warnings wait for verl's validate_config too (the patched one main_ppo calls): a config the
    plugin passes but verl refuses (no micro-batch size) gets verl's error alone."""
    idle_seed = "algorithm.off_grpo.red_drop_seed=3"
    no_micro = ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null", "actor_rollout_ref.actor.ppo_micro_batch_size=null")
    with caplog.at_level(logging.INFO, logger=LOGGER), pytest.raises(Exception, match="ppo_micro_batch_size"):
        validate(composed(idle_seed, *no_micro))
    assert [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER)] == []


def test_another_threads_lines_pass_while_a_validation_holds_its_own(caplog):
    """The hold is the validating thread's: a line another thread logs meanwhile on a checks' logger is not held
    (nor lost if the validation then fails)."""
    import threading

    from verl_offgrpo.config import advice_after_the_checks
    from verl_offgrpo.config import window_checks

    with caplog.at_level(logging.INFO, logger=LOGGER):
        with pytest.raises(RuntimeError), advice_after_the_checks():
            window_checks.logger.warning("held line")
            other = threading.Thread(target=window_checks.logger.warning, args=("other thread's line",))
            other.start()
            other.join()
            raise RuntimeError("refused")
    assert [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER)] == ["other thread's line"]


def test_a_users_own_yaml_lists_the_plugins_settings_after_ppo_trainer(tmp_path):
    """The documented way to write your own yaml (off_grpo_trainer.yaml's comment): hydra's searchpath naming verl's
    config and the plugin's, ``defaults: [ppo_trainer, off_grpo_settings, _self_]``. It composes to exactly the
    shipped config, and passes the checks; a setting of its own lands on top."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from _overrides import BASE

    (tmp_path / "mine.yaml").write_text(
        "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\n    - pkg://verl_offgrpo.config\n"
        "defaults:\n  - ppo_trainer\n  - off_grpo_settings\n  - _self_\n")
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        mine = compose(config_name="mine", overrides=BASE)
    assert OmegaConf.to_container(mine) == OmegaConf.to_container(composed())
    validate(mine)
    (tmp_path / "mine.yaml").write_text((tmp_path / "mine.yaml").read_text() + "algorithm:\n  off_grpo:\n    sync_period: 4\n")
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        assert compose(config_name="mine", overrides=BASE).algorithm.off_grpo.sync_period == 4


OWN_YAML_FIX = ("defaults: [ppo_trainer, off_grpo_settings, _self_] with hydra.searchpath: [pkg://verl.trainer.config, "
                "pkg://verl_offgrpo.config])")


@pytest.mark.parametrize("searchpath, defaults, said", [
    (["pkg://verl.trainer.config", "pkg://verl_offgrpo.config"], ["off_grpo_trainer"],
     "In 'off_grpo_trainer': Overriding hydra.searchpath is only supported from the primary config (off_grpo_trainer "
     "is a primary config: list its settings instead, "),
    (["pkg://verl.trainer.config"], ["ppo_trainer", "off_grpo_settings"],
     "In 'mine': Could not load 'off_grpo_settings'. (the plugin's settings: "),
    ([], ["off_grpo_trainer"], "In 'mine': Could not load 'off_grpo_trainer'. (the plugin's settings: "),
], ids=["extends_the_shipped_yaml", "no_plugin_searchpath", "no_searchpath"])
def test_a_users_own_yaml_that_misses_the_plugins_settings_is_told_what_to_list(tmp_path, capsys, searchpath, defaults,
                                                                                 said):
    """Extending off_grpo_trainer (a primary config) or leaving the plugin's searchpath out gets hydra's line plus the
    documented way, from compose (exit 4), not hydra's search path dump alone."""
    from _overrides import BASE

    from verl_offgrpo.cli.compose import dry_run

    paths = "".join(f"    - {p}\n" for p in searchpath)
    (tmp_path / "mine.yaml").write_text((f"hydra:\n  searchpath:\n{paths}" if searchpath else "")
                                        + "defaults:\n" + "".join(f"  - {d}\n" for d in defaults) + "  - _self_\n")
    assert dry_run(BASE, config_path=str(tmp_path), config_name="mine") == 4
    line = capsys.readouterr().err.splitlines()[-1]
    assert line == f"config error (hydra): {said}{OWN_YAML_FIX}", line


@pytest.mark.parametrize(("overrides", "key", "eps"), [
    (["actor_rollout_ref.actor.clip_ratio_low=1.5"], "clip_ratio_low", "1.5"),
    (["actor_rollout_ref.actor.clip_ratio_low=1.0"], "clip_ratio_low", "1"),
    (["actor_rollout_ref.actor.clip_ratio_low=inf"], "clip_ratio_low", "inf"),
    (["actor_rollout_ref.actor.clip_ratio_low=0.99"], None, None),
    (["actor_rollout_ref.actor.clip_ratio_low=null"], None, None),
    (["actor_rollout_ref.actor.clip_ratio_low=null", "actor_rollout_ref.actor.clip_ratio=1.5"], "clip_ratio", "1.5"),
])
def test_an_off_grpo_lower_eps_of_one_or_more_warns_that_the_lower_side_never_binds(overrides, key, eps, caplog):
    """f = min(r·A, clip(r, max(r' − ε_low, 0), r' + ε_high)·A): with ε_low ≥ 1 the lower edge is 0 for r' ≤ ε_low, and
    r ≥ 0, so that side never binds at lag 0 (r' ≈ 1). A null side falls back to clip_ratio (0.2 by default): the
    line names the key that set ε_low."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate(composed(*overrides))
    lines = [r.getMessage() for r in caplog.records if "lower side never binds" in r.getMessage()]
    assert lines == ([] if eps is None else [
        f"off_grpo: actor_rollout_ref.actor.{key}={eps} ≥ 1 (ε_low): the clip's lower edge max(r' − ε_low, 0) is 0 "
        "wherever r' ≤ ε_low (every batch right after a sync: r' ≈ 1), so its lower side never binds there (verl's "
        "default is 0.2)."])


def test_an_actor_the_plugin_was_not_tested_with_is_one_warning(caplog):
    """Megatron (``model_engine=megatron``, verl 0.9.1's way; its ppo_megatron_trainer yaml is deprecated) at v = 1:
    verl runs the plugin's registered loss and estimator there, untested: one warning; FSDP none; at v > 1 refused."""
    warned = "actor_rollout_ref.actor.strategy=megatron is untested with the plugin's losses and estimators"
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate(composed("model_engine=megatron"))
    assert [r.getMessage() for r in caplog.records if "untested" in r.getMessage()] == [
        f"off_grpo: {warned} (tested: fsdp, fsdp2); verl runs them as registered."]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate(composed())
    assert "untested" not in caplog.text
    with pytest.raises(OffGRPOConfigError, match=r"only \(got 'megatron'\): .* Use algorithm.off_grpo.sync_period=1 "
                                                 r"with this actor \(untested with the plugin\), or an FSDP actor.$"):
        validate(composed("model_engine=megatron", "algorithm.off_grpo.sync_period=10"))


@pytest.mark.parametrize("n, says", [(8, "verl's grpo advantage (r − mean)/(std + 1e-6), without the zero-variance mask"),
                                     (1, "verl's grpo advantage, which for groups of one (rollout.n=1) is the reward r "
                                         "itself")])
def test_the_plugins_loss_over_verls_grpo_says_which_advantage_runs(caplog, n, says):
    """verl's grpo gives a group of one mean 0 and std 1 (A = r), not (r − mean)/(std + ε)."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    import numpy as np
    import torch

    if n == 1:  # what the line stands on: verl 0.9.1's grpo for a group of one
        adv, _ = compute_grpo_outcome_advantage(torch.tensor([[0.0, 0.7]]), torch.ones(1, 2), np.array(["u"]))
        assert torch.allclose(adv, torch.tensor([[0.7, 0.7]]))
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate(composed("algorithm.adv_estimator=grpo", f"actor_rollout_ref.rollout.n={n}"))
    assert [r.getMessage() for r in caplog.records if "the loss runs on" in r.getMessage()] == [
        f"off_grpo: policy_loss.loss_mode=off_grpo with algorithm.adv_estimator=grpo: the loss runs on {says}; "
        "algorithm.off_grpo.std_eps, std_unbiased and zero_var_mask do not apply (adv_estimator=off_grpo for the "
        "paper's advantage)."]


def test_the_loss_over_another_estimator_at_n1_names_that_estimator(caplog):
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        validate_as_main_ppo(shipped_config("algorithm.adv_estimator=reinforce_plus_plus", "actor_rollout_ref.rollout.n=1"))
    says = [r.getMessage() for r in caplog.records if "the loss runs on" in r.getMessage()]
    assert len(says) == 1 and "the loss runs on verl's 'reinforce_plus_plus' advantage" in says[0], says



def test_veomni_is_untested(caplog):
    from verl_offgrpo.config.loss_estimator_checks import warn_untested_actor

    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        warn_untested_actor(OmegaConf.create({"actor_rollout_ref": {"actor": {"strategy": "veomni"}}}))
    assert [r.getMessage() for r in caplog.records] == [
        "off_grpo: actor_rollout_ref.actor.strategy=veomni is untested with the plugin's losses and estimators "
        "(tested: fsdp, fsdp2); verl runs them as registered."]
