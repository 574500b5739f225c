"""vLLM's start-up arguments that ``actor_rollout_ref.rollout.engine_kwargs.vllm`` would take away from the rollout
knobs the plugin reads.

verl 0.9.1 starts vLLM with ``{"dtype": rollout.dtype, "logprobs_mode": rollout.logprobs_mode, ..., **engine_kwargs}``
(``vLLMHttpServer.launch_server``, its null values dropped first), so a key of ``engine_kwargs.vllm`` replaces the
value verl derived from the rollout knob of the same meaning. The plugin's checks and its sync check read those knobs
(what vLLM's log-probs of α are, the dtype vLLM casts the synced weights to, TP, sleep mode, batch sizes): the same
setting written in ``engine_kwargs`` only would make them reason about an engine vLLM is not. E.g.
``engine_kwargs.vllm.logprobs_mode=raw_logprobs`` at temperature 0.6 hands the loss α before the temperature, which
``rollout.logprobs_mode=raw_logprobs`` is refused for (:mod:`.sampler_checks`).
"""

from __future__ import annotations

from typing import Any

from .values import OffGRPOConfigError, written_value

ROLLOUT = "actor_rollout_ref.rollout"
ENGINE_KWARGS = f"{ROLLOUT}.engine_kwargs.vllm"
#: vLLM engine argument → (the rollout knob verl fills it from, verl 0.9.1's default of that knob), for the knobs the
#: plugin reads
ENGINE_ARGUMENTS = {
    "logprobs_mode": ("logprobs_mode", "processed_logprobs"),
    "dtype": ("dtype", "bfloat16"),
    "quantization": ("quantization", None),
    "tensor_parallel_size": ("tensor_model_parallel_size", 2),
    "enable_sleep_mode": ("enable_sleep_mode", True),
    "max_num_seqs": ("max_num_seqs", 1024),
    "max_num_batched_tokens": ("max_num_batched_tokens", 8192),
    "max_model_len": ("max_model_len", None),
    "enable_chunked_prefill": ("enable_chunked_prefill", True),
    "gpu_memory_utilization": ("gpu_memory_utilization", 0.5),
}


def refuse_engine_kwargs_overrides(config: Any) -> None:
    """Refuse a non-null ``engine_kwargs.vllm.<argument>`` of :data:`ENGINE_ARGUMENTS` that differs from its rollout
    knob: the knob is where the plugin reads it (one line naming both, and the knob to set instead). Only for vLLM
    (``rollout.name``, absent: vllm), whose engine reads ``engine_kwargs.vllm``."""
    if written_value(config, f"{ROLLOUT}.name", "vllm") != "vllm":
        return
    for argument, (knob, default) in ENGINE_ARGUMENTS.items():
        value = written_value(config, f"{ENGINE_KWARGS}.{argument}")
        if value is None:  # absent or null: verl drops it, the rollout knob's value reaches vLLM
            continue
        knob_value = written_value(config, f"{ROLLOUT}.{knob}", default)
        if value != knob_value:
            raise OffGRPOConfigError(
                f"{ENGINE_KWARGS}.{argument}={value} replaces {ROLLOUT}.{knob}={knob_value} when verl starts vLLM "
                f"(engine_kwargs go last), and the plugin's checks read the rollout knob: set "
                f"{ROLLOUT}.{knob}={value} instead and drop the engine_kwargs key."
            )
