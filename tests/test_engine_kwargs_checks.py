"""A vLLM argument written in ``actor_rollout_ref.rollout.engine_kwargs.vllm`` replaces what verl derived from the
rollout knob the plugin reads (``config/engine_kwargs_checks.py``), through verl's own ``validate_config``."""

import logging
import re

import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError

from _overrides import shipped_config, validate_as_main_ppo, verl_config

LOGGER = "verl_offgrpo.config"
ROLLOUT = "actor_rollout_ref.rollout."
ENGINE = "+actor_rollout_ref.rollout.engine_kwargs.vllm."


def test_the_logprobs_mode_is_read_where_vllm_takes_it_from():
    """The audit's case: at T = 0.6, ``engine_kwargs.vllm.logprobs_mode=raw_logprobs`` reaches vLLM (verl merges
    engine_kwargs last) and hands the loss α before the temperature, while the rollout knob says processed_logprobs:
    refused as the rollout knob is, naming the key where it is set; at temperature 1 it is the same distribution."""
    with pytest.raises(OffGRPOConfigError) as refused:
        validate_as_main_ppo(shipped_config(f"{ENGINE}logprobs_mode=raw_logprobs", f"{ROLLOUT}temperature=0.6",
                                            "algorithm.off_grpo.sync_period=10"))
    assert str(refused.value).startswith(
        "actor_rollout_ref.rollout.engine_kwargs.vllm.logprobs_mode=raw_logprobs gives α before the temperature (0.6)")
    with pytest.raises(OffGRPOConfigError, match=r"^actor_rollout_ref.rollout.engine_kwargs.vllm.logprobs_mode="
                                                 r"processed_logits makes vLLM return logits"):
        validate_as_main_ppo(shipped_config(f"{ENGINE}logprobs_mode=processed_logits"))  # at v = 1 too
    validate_as_main_ppo(shipped_config(f"{ENGINE}logprobs_mode=raw_logprobs", f"{ROLLOUT}logprobs_mode=raw_logits"))
    # a null there is dropped by verl: the rollout knob's mode reaches vLLM, and is what is checked
    with pytest.raises(OffGRPOConfigError, match=r"^actor_rollout_ref.rollout.logprobs_mode=raw_logits makes"):
        validate_as_main_ppo(shipped_config(f"{ENGINE}logprobs_mode=null", f"{ROLLOUT}logprobs_mode=raw_logits"))


@pytest.mark.parametrize("argument,value,knob", [
    ("dtype", "float16", "actor_rollout_ref.rollout.dtype=float16"),  # what the sync check casts the weights to
    ("tensor_parallel_size", 4, "actor_rollout_ref.rollout.tensor_model_parallel_size=4"),
    # not in verl's yaml (its dataclass has it, default true): the override to write adds it, in hydra's words
    ("enable_sleep_mode", "false", "+actor_rollout_ref.rollout.enable_sleep_mode=false"),
    ("max_num_seqs", 64, "actor_rollout_ref.rollout.max_num_seqs=64"),
    ("max_num_batched_tokens", 7, "actor_rollout_ref.rollout.max_num_batched_tokens=7"),
    ("max_model_len", 77, "actor_rollout_ref.rollout.max_model_len=77"),
    ("enable_chunked_prefill", "false", "actor_rollout_ref.rollout.enable_chunked_prefill=false"),
    ("gpu_memory_utilization", 0.9, "actor_rollout_ref.rollout.gpu_memory_utilization=0.9"),
])
def test_each_argument_the_lag_reads_is_refused_in_engine_kwargs_at_v_above_1(argument, value, knob):
    says = rf"engine_kwargs\.vllm\.{argument}={value} replaces .* when verl starts vLLM .*: set {re.escape(knob)} instead"
    with pytest.raises(OffGRPOConfigError, match=says):
        validate_as_main_ppo(shipped_config(f"{ENGINE}{argument}={value}", "algorithm.off_grpo.sync_period=10"))
    validate_as_main_ppo(shipped_config(f"{ENGINE}{argument}={value}"))  # at v = 1 the plugin does not read it


def test_a_quantization_in_engine_kwargs_passes():
    """verl's rollout.quantization takes fp8/torchao/ascend only: other methods (awq, bitsandbytes) reach vLLM
    through engine_kwargs alone, so it is no mistake there (the sync check reads it: test_window)."""
    validate_as_main_ppo(shipped_config(f"{ENGINE}quantization=awq", "algorithm.off_grpo.sync_period=10"))


def test_engine_kwargs_that_agree_with_the_knob_or_are_null_or_unrelated_pass(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(shipped_config(f"{ENGINE}dtype=bfloat16", f"{ENGINE}max_num_seqs=null",
                                            f"{ENGINE}swap_space=4", f"{ROLLOUT}dtype=bfloat16",
                                            "algorithm.off_grpo.sync_period=10"))
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


def test_the_table_reads_an_absent_knob_as_verls_rollout_config_does():
    """The defaults the check compares with, where a knob is absent, are verl's ``RolloutConfig`` defaults (a verl
    upgrade that changes one fails here); an absent knob with engine_kwargs at that default passes."""
    import dataclasses

    from verl.workers.config import RolloutConfig

    from verl_offgrpo.config.engine_kwargs_checks import ENGINE_ARGUMENTS, refuse_engine_kwargs_overrides

    verls = {f.name: f.default for f in dataclasses.fields(RolloutConfig)}
    assert {arg: default for arg, (_, default) in ENGINE_ARGUMENTS.items()} == {
        arg: verls[knob] for arg, (knob, _) in ENGINE_ARGUMENTS.items()}
    rollout = {"name": "vllm", "engine_kwargs": {"vllm": {"dtype": "bfloat16", "tensor_parallel_size": 2}}}
    refuse_engine_kwargs_overrides({"actor_rollout_ref": {"rollout": rollout}})
    rollout["engine_kwargs"]["vllm"]["dtype"] = "float16"
    with pytest.raises(OffGRPOConfigError, match="dtype=float16 replaces actor_rollout_ref.rollout.dtype=bfloat16"):
        refuse_engine_kwargs_overrides({"actor_rollout_ref": {"rollout": rollout}})
    rollout["name"] = "sglang"  # SGLang does not read engine_kwargs.vllm
    refuse_engine_kwargs_overrides({"actor_rollout_ref": {"rollout": rollout}})


def test_a_selecting_config_that_reads_no_rollout_knob_keeps_its_engine_kwargs():
    """The shipped yaml selects the plugin through its trainer mode alone: with verl's estimator and loss at v = 1
    nothing of the plugin reads the rollout knobs, so engine_kwargs are verl's business there."""
    validate_as_main_ppo(shipped_config("algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
                                        f"{ENGINE}dtype=float16", f"{ENGINE}logprobs_mode=raw_logprobs"))


def test_a_hyphenated_engine_argument_is_the_same_argument():
    """vLLM's parser reads ``logprobs-mode`` as ``logprobs_mode`` and keeps the last, and verl puts engine_kwargs after
    its own keys: the hyphenated spelling is read, and refused, as the other is (the review's case)."""
    with pytest.raises(OffGRPOConfigError, match=r"^actor_rollout_ref.rollout.engine_kwargs.vllm.logprobs-mode="
                                                 r"raw_logprobs gives α before the temperature \(0.6\)"):
        validate_as_main_ppo(shipped_config(f"{ENGINE}logprobs-mode=raw_logprobs", f"{ROLLOUT}temperature=0.6"))
    with pytest.raises(OffGRPOConfigError, match=r"^actor_rollout_ref.rollout.engine_kwargs.vllm.tensor-parallel-size=1 "
                                                 r"replaces actor_rollout_ref.rollout.tensor_model_parallel_size=2"):
        validate_as_main_ppo(shipped_config(f"{ENGINE}tensor-parallel-size=1", "algorithm.off_grpo.sync_period=10"))


@pytest.mark.parametrize("overrides, quantization", [
    ([], None),
    (["actor_rollout_ref.rollout.quantization=fp8"], "fp8"),
    ([f"{ENGINE}quantization=awq"], "awq"),
    ([f"{ENGINE}quantization=awq", "actor_rollout_ref.rollout.quantization=fp8"], "awq"),  # engine_kwargs go last
    ([f"{ENGINE}quantization=null", "actor_rollout_ref.rollout.quantization=fp8"], "fp8"),  # a null is dropped
    (["actor_rollout_ref.actor.fsdp_config.qat.enable=true"], "qat"),  # verl picks modelopt / compressed-tensors
    ([f"{ENGINE}hf_overrides.quantization_config.quant_method=fp8"], "hf_overrides.quantization_config"),
])
def test_the_quantization_vllm_starts_with(overrides, quantization):
    """What the sync check asks (``readers.vllm_quantization``): is vLLM's copy of the weights quantized, and how."""
    from verl_offgrpo.config.readers import vllm_quantization

    assert vllm_quantization(shipped_config(*overrides)) == quantization
