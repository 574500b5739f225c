"""α must be the sampler's log-probs in the terms of verl's π_k (``config/sampler_checks.py``): vLLM's
``logprobs_mode`` through verl's own ``validate_config``, as ``main_ppo`` calls it."""

import logging

import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError

from _overrides import shipped_config, validate_as_main_ppo, verl_config

LOGGER = "verl_offgrpo.config"
ROLLOUT = "actor_rollout_ref.rollout."


@pytest.mark.parametrize("mode", ["raw_logits", "processed_logits"])
def test_logit_modes_are_refused_for_the_plugin(mode):
    with pytest.raises(OffGRPOConfigError, match=f"logprobs_mode={mode} makes vLLM return logits, not log-probs"):
        validate_as_main_ppo(shipped_config(f"{ROLLOUT}logprobs_mode={mode}"))


def test_raw_logprobs_away_from_temperature_one_is_refused():
    """vLLM's raw log-probs are taken before the temperature, verl's π_k at it: r' would compare two
    distributions (the newcomer's case: T = 0.6 at v = 10 was accepted silently)."""
    with pytest.raises(OffGRPOConfigError, match=r"raw_logprobs gives α before the temperature \(0.6\)"):
        validate_as_main_ppo(shipped_config(f"{ROLLOUT}logprobs_mode=raw_logprobs", f"{ROLLOUT}temperature=0.6",
                                            "algorithm.off_grpo.sync_period=10"))


def test_raw_logprobs_at_temperature_one_and_processed_at_any_temperature_pass(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(shipped_config(f"{ROLLOUT}logprobs_mode=raw_logprobs"))
        validate_as_main_ppo(shipped_config(f"{ROLLOUT}temperature=0.6"))
    assert "biased" not in caplog.text


def test_the_rec_loss_with_verls_estimator_is_checked_too():
    with pytest.raises(OffGRPOConfigError, match="makes vLLM return logits"):
        validate_as_main_ppo(shipped_config("actor_rollout_ref.actor.policy_loss.loss_mode=rec",
                                            "algorithm.adv_estimator=grpo", f"{ROLLOUT}logprobs_mode=raw_logits"))


def test_plain_verl_keeps_any_logprobs_mode(caplog):
    """A job that does not select the plugin is verl's business: no refusal, no warning from the plugin."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(verl_config(f"{ROLLOUT}logprobs_mode=raw_logits", f"{ROLLOUT}temperature=0.6",
                                         f"+{ROLLOUT}repetition_penalty=1.1"))
    assert "logprobs_mode" not in caplog.text and "biased" not in caplog.text



def test_top_k_warns_above_zero_only(caplog):
    """top_k 0 (and -1) is off in vLLM; 50 truncates the sampler, so α is not the distribution π_k is."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(shipped_config(f"{ROLLOUT}top_k=0"))
    assert "is biased" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(shipped_config(f"{ROLLOUT}top_k=50"))
    assert "off_grpo: rollout top_p=1.0 top_k=50: " in caplog.text
