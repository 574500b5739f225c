"""A vLLM argument written in ``actor_rollout_ref.rollout.engine_kwargs.vllm`` replaces what verl derived from the
rollout knob the plugin reads (``config/engine_kwargs_checks.py``), through verl's own ``validate_config``."""

import logging

import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError

from _overrides import shipped_config, validate_as_main_ppo, verl_config

LOGGER = "verl_offgrpo.config"
ROLLOUT = "actor_rollout_ref.rollout."
ENGINE = "+actor_rollout_ref.rollout.engine_kwargs.vllm."


def test_raw_logprobs_through_engine_kwargs_is_refused_as_the_rollout_knob_is():
    """The audit's case: at T = 0.6, ``engine_kwargs.vllm.logprobs_mode=raw_logprobs`` reaches vLLM (verl merges
    engine_kwargs last) and hands the loss α before the temperature; the rollout knob said processed_logprobs."""
    with pytest.raises(OffGRPOConfigError) as refused:
        validate_as_main_ppo(shipped_config(f"{ENGINE}logprobs_mode=raw_logprobs", f"{ROLLOUT}temperature=0.6",
                                            "algorithm.off_grpo.sync_period=10"))
    assert str(refused.value) == (
        "actor_rollout_ref.rollout.engine_kwargs.vllm.logprobs_mode=raw_logprobs replaces "
        "actor_rollout_ref.rollout.logprobs_mode=processed_logprobs when verl starts vLLM (engine_kwargs go last), "
        "and the plugin's checks read the rollout knob: set actor_rollout_ref.rollout.logprobs_mode=raw_logprobs "
        "instead and drop the engine_kwargs key.")
    # the advice, followed, meets the sampler check's own refusal
    with pytest.raises(OffGRPOConfigError, match=r"raw_logprobs gives α before the temperature \(0.6\)"):
        validate_as_main_ppo(shipped_config(f"{ROLLOUT}logprobs_mode=raw_logprobs", f"{ROLLOUT}temperature=0.6",
                                            "algorithm.off_grpo.sync_period=10"))


@pytest.mark.parametrize("argument,value,knob", [
    ("dtype", "float16", "dtype"),  # the dtype the sync check casts the trainer's weights to
    ("quantization", "fp8", "quantization"),  # off: the sync check compares unquantized tensors
    ("tensor_parallel_size", 4, "tensor_model_parallel_size"),
    ("enable_sleep_mode", False, "enable_sleep_mode"),
])
def test_each_argument_the_plugin_reads_is_refused_in_engine_kwargs(argument, value, knob):
    with pytest.raises(OffGRPOConfigError, match=rf"engine_kwargs.vllm.{argument}={value} replaces "
                                                 rf"actor_rollout_ref.rollout.{knob}=\S+ when verl starts vLLM"):
        validate_as_main_ppo(shipped_config(f"{ENGINE}{argument}={value}"))


def test_engine_kwargs_that_agree_with_the_knob_or_are_null_or_unrelated_pass(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(shipped_config(f"{ENGINE}dtype=bfloat16", f"{ENGINE}logprobs_mode=null",
                                            f"{ENGINE}swap_space=4", f"{ROLLOUT}dtype=bfloat16"))
    assert "engine_kwargs" not in caplog.text


def test_plain_verl_keeps_its_engine_kwargs():
    """A job that does not select the plugin is verl's business."""
    validate_as_main_ppo(verl_config(f"{ENGINE}logprobs_mode=raw_logprobs", f"{ENGINE}dtype=float16",
                                     f"{ROLLOUT}temperature=0.6"))


def test_a_repetition_penalty_is_not_said_to_bias_rprime(caplog):
    """verl's agent loops send ``repetition_penalty=1.0`` with every request, so the rollout's knob never reaches
    vLLM: the sampler check no longer warns about it (it did, wrongly)."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(shipped_config(f"+{ROLLOUT}repetition_penalty=1.1"))
    assert "biased" not in caplog.text and "repetition_penalty" not in caplog.text
