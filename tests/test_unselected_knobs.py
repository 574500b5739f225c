"""Plugin knobs in a config that does not select the plugin do nothing: one warning says so, through
verl's real ``validate_config`` (the plugin's wrapper), and verl's checks still run as in plain verl."""

import logging

import pytest

import verl  # noqa: F401  (loads the plugin)
from _overrides import shipped_config, validate_as_main_ppo, verl_config

LOGGER = "verl_offgrpo.patches.validate_config"
#: verl's GRPO from the plugin's yaml: verl's estimator, loss and trainer mode, and verl's rollout correction (off;
#: the yaml's untruncated IS weights under verl's loss are a warning of their own, test_config.py)
PLAIN = ("algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
         "trainer.v1.trainer_mode=sync", "algorithm.rollout_correction.rollout_is=null")


def _warnings(caplog, config):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(config)  # verl's checks pass: plain verl's path
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_knob_added_to_verls_yaml_is_named_even_at_its_default(caplog):
    """verl's ppo_trainer has no algorithm.off_grpo: a key there was set by hand, default value or not."""
    told = _warnings(caplog, verl_config("+algorithm.off_grpo.zero_var_mask=true"))
    assert len(told) == 1
    assert told[0].startswith("verl-offgrpo: algorithm.off_grpo.zero_var_mask=True has no effect: this job does "
                              "not select the plugin (algorithm.adv_estimator=grpo, ")
    assert "loss_mode=vanilla" in told[0] and "set algorithm.adv_estimator=off_grpo" in told[0]


def test_plugin_yaml_names_only_knobs_away_from_their_defaults(caplog):
    assert _warnings(caplog, shipped_config(*PLAIN)) == []  # the yaml sets every knob at its default
    told = _warnings(caplog, shipped_config(*PLAIN, "algorithm.off_grpo.ref_reset_period=5",
                                            "algorithm.off_grpo.final_outputs_only=false"))
    assert len(told) == 1 and "algorithm.off_grpo.ref_reset_period=5 has no effect" in told[0]
    assert "final_outputs_only" not in told[0]  # off is what a plain job gets anyway


@pytest.mark.parametrize("overrides", [(), ("+algorithm.off_grpo.final_outputs_only=false",)])
def test_plain_verl_config_is_silent(caplog, overrides):
    assert _warnings(caplog, verl_config(*overrides)) == []


REC_KNOB = "actor_rollout_ref.actor.policy_loss.rec."


def test_rec_knobs_away_from_their_defaults_are_named_too(caplog):
    """The rec loss's knobs act only with loss_mode=rec, which selects the plugin: here they would drop silently."""
    told = _warnings(caplog, shipped_config(*PLAIN, f"{REC_KNOB}clip_mode=ring", f"{REC_KNOB}tau=1.0"))
    assert len(told) == 1
    assert told[0].startswith(f"verl-offgrpo: {REC_KNOB}clip_mode=ring has no effect: this job does not select")
    assert "tau" not in told[0] and "(loss_mode=rec for the policy_loss.rec knobs)" in told[0]


def test_a_typo_knob_gets_did_you_mean_as_in_a_selecting_job(caplog):
    told = _warnings(caplog, shipped_config(*PLAIN, "+algorithm.off_grpo.sync_peroid=10", "+algorithm.off_grpo.zzz=1"))
    assert len(told) == 1
    assert told[0].startswith("verl-offgrpo: algorithm.off_grpo.sync_peroid=10 (did you mean "
                              "algorithm.off_grpo.sync_period?), algorithm.off_grpo.zzz=1 (no such knob) has no effect")
    told = _warnings(caplog, verl_config("+algorithm.off_grpo.zero_var_mak=true"))
    assert len(told) == 1 and "zero_var_mak=True (did you mean algorithm.off_grpo.zero_var_mask?)" in told[0]


def test_rec_knobs_on_verls_own_policy_loss_config_say_verl_refuses_them(caplog):
    """verl's PolicyLossConfig has no rec field: verl's own checks refuse the job, so the line does not say it
    trains plain verl."""
    from hydra.errors import InstantiationException

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(InstantiationException, match="'rec'"):
        validate_as_main_ppo(verl_config(f"+{REC_KNOB}clip_mode=ring"))
    told = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(told) == 1 and "trains plain verl" not in told[0]
    assert (f"{REC_KNOB}clip_mode=ring has no effect: this job does not select the plugin (algorithm.adv_estimator="
            "grpo, actor_rollout_ref.actor.policy_loss.loss_mode=vanilla) and verl's own PolicyLossConfig "
            "(policy_loss._target_) has no rec field, so verl refuses the job.") in told[0]
