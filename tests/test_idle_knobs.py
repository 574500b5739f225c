"""Knobs set where the plugin never reads them are told in one line, not dropped silently (found by a config fuzz).

* With ``algorithm.norm_adv_by_std_in_grpo=false`` the plugin's estimators compute A = r − mean (advantage.py):
  ``std_eps`` and ``std_unbiased`` are never read (one warning, as ``red_drop_seed`` without red_drop gets).
* At ``sync_period=1`` nothing is lagged and every step syncs: ``keep_weights``, ``empty_cache_on_skip``,
  ``max_log_rprime_lagged`` and ``verify_served_weights`` are never read (lagged_manager.py: all behind
  ``sync_period > 1``): one info line, as ``skip_old_log_prob`` at v = 1 gets.
"""

import logging

import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config.validate import validate_off_grpo_config

from _overrides import shipped_config

LOGGER = "verl_offgrpo"


def _warnings(caplog, *overrides):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate_off_grpo_config(shipped_config(*overrides))
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("knob", ["algorithm.off_grpo.std_eps=0.5", "algorithm.off_grpo.std_unbiased=false"])
def test_std_knob_without_std_normalisation_is_told(caplog, knob):
    told = [line for line in _warnings(caplog, "algorithm.norm_adv_by_std_in_grpo=false", knob)
            if knob.rpartition(".")[2].split("=")[0] in line]
    assert len(told) == 1 and "norm_adv_by_std_in_grpo=false" in told[0]


def test_std_knob_with_std_normalisation_is_not_told(caplog):
    assert not [line for line in _warnings(caplog, "algorithm.off_grpo.std_eps=0.5") if "std_eps" in line]


def _lines(caplog, *overrides):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="verl_offgrpo"):
        validate_off_grpo_config(shipped_config(*overrides))
    return [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("knob", ["keep_weights=no_sleep", "empty_cache_on_skip=always",
                                  "max_log_rprime_lagged=0.3", "verify_served_weights=false"])
def test_lag_knob_at_v1_is_told(caplog, knob):
    name = knob.split("=")[0]
    told = [line for line in _lines(caplog, f"algorithm.off_grpo.{knob}") if name in line]
    assert len(told) == 1 and "sync_period=1" in told[0] and "\n" not in told[0]


def test_defaults_at_v1_and_lag_knobs_at_v4_say_nothing_of_it(caplog):
    assert not [line for line in _lines(caplog) if "does nothing at sync_period=1" in line]
    assert not [line for line in _lines(caplog, "algorithm.off_grpo.sync_period=4",
                                        "algorithm.off_grpo.rollout_schedule=per_step",
                                        "algorithm.off_grpo.empty_cache_on_skip=always")
                if "does nothing at sync_period=1" in line]
