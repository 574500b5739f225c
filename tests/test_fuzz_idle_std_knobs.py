"""With algorithm.norm_adv_by_std_in_grpo=false the plugin's estimators compute A = r − mean (advantage.py): std_eps
and std_unbiased are never read. Set away from their defaults there, they must not be dropped silently (as
red_drop_seed without red_drop is not)."""

import logging

import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config.validate import validate_off_grpo_config

from _overrides import shipped_config

LOGGER = "verl_offgrpo"


def _lines(caplog, *overrides):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        validate_off_grpo_config(shipped_config(*overrides))
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("knob", ["algorithm.off_grpo.std_eps=0.5", "algorithm.off_grpo.std_unbiased=false"])
def test_std_knob_without_std_normalisation_is_told(caplog, knob):
    told = [line for line in _lines(caplog, "algorithm.norm_adv_by_std_in_grpo=false", knob)
            if knob.rpartition(".")[2].split("=")[0] in line]
    assert len(told) == 1 and "norm_adv_by_std_in_grpo=false" in told[0]


def test_std_knob_with_std_normalisation_is_not_told(caplog):
    assert not [line for line in _lines(caplog, "algorithm.off_grpo.std_eps=0.5") if "std_eps" in line]
