"""Two startup messages a newcomer found wanting: a RED-Drop seed that nothing reads, and a truncated r'
refused for the rec loss on π_k (whose loss does not read r': the guard and the bound monitor do)."""

import logging

import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError

from _overrides import shipped_config, validate_as_main_ppo

LOGGER = "verl_offgrpo.config"


def test_red_drop_seed_without_red_drop_says_it_does_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(shipped_config("algorithm.off_grpo.red_drop_seed=3"))
    assert "red_drop_seed=3: no effect with algorithm.adv_estimator=off_grpo (only red_drop reads it)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(shipped_config("algorithm.off_grpo.red_drop_seed=3", "algorithm.adv_estimator=red_drop",
                                            "actor_rollout_ref.actor.policy_loss.loss_mode=rec",
                                            "algorithm.norm_adv_by_std_in_grpo=false"))
    assert "red_drop_seed" not in caplog.text


def test_rec_on_pi_k_says_the_guard_needs_the_untruncated_rprime_not_its_loss():
    with pytest.raises(OffGRPOConfigError, match=r"^the served-policy guard and the bound monitor need \(the loss with "
                                                 r"actor_rollout_ref.actor.policy_loss.rec.anchor=pi_k does not\) r' = "
                                                 r"π_k/α untruncated"):
        validate_as_main_ppo(shipped_config("actor_rollout_ref.actor.policy_loss.loss_mode=rec",
                                            "actor_rollout_ref.actor.policy_loss.rec.anchor=pi_k",
                                            "algorithm.rollout_correction.rollout_is_threshold=2.0"))
