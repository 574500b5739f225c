"""vLLM's start-up arguments that ``actor_rollout_ref.rollout.engine_kwargs.vllm`` would take away from the rollout
knobs the plugin reads.

verl 0.9.1 starts vLLM with ``{"dtype": rollout.dtype, "logprobs_mode": rollout.logprobs_mode, ..., **engine_kwargs}``
(``vLLMHttpServer.launch_server``, its null values dropped first), so a key of ``engine_kwargs.vllm`` replaces the
value verl derived from the rollout knob of the same meaning. At v > 1 the lag's checks and its sync check read those
knobs (the dtype vLLM casts the synced weights to, TP, sleep mode, batch sizes): the same setting written in
``engine_kwargs`` only would make them reason about an engine vLLM is not. Two keys are read where they are set
instead: ``logprobs_mode`` (:func:`.sampler_checks.logprobs_mode_at`, at any v: what α's log-probs are) and
``quantization`` (:func:`.readers.vllm_quantization`: verl's rollout knob takes only fp8/torchao/ascend, so other
methods reach vLLM through ``engine_kwargs`` alone).
"""

from __future__ import annotations

from typing import Any

from .readers import engine_kwarg
from .values import ABSENT, OffGRPOConfigError, written_value

ROLLOUT = "actor_rollout_ref.rollout"
#: vLLM engine argument → (the rollout knob verl fills it from, verl 0.9.1's default of that knob)
ENGINE_ARGUMENTS = {
    "dtype": ("dtype", "bfloat16"),
    "tensor_parallel_size": ("tensor_model_parallel_size", 2),
    "enable_sleep_mode": ("enable_sleep_mode", True),
    "max_num_seqs": ("max_num_seqs", 1024),
    "max_num_batched_tokens": ("max_num_batched_tokens", 8192),
    "max_model_len": ("max_model_len", None),
    "enable_chunked_prefill": ("enable_chunked_prefill", True),
    "gpu_memory_utilization": ("gpu_memory_utilization", 0.5),
}


def refuse_engine_kwargs_overrides(config: Any) -> None:
    """At v > 1: refuse an engine argument of :data:`ENGINE_ARGUMENTS` set in ``engine_kwargs.vllm`` (either spelling,
    :func:`.readers.engine_kwarg`) that differs from its rollout knob, the knob being where the lag's checks read it
    (one line naming both, and the override to write instead)."""
    for argument, (knob, default) in ENGINE_ARGUMENTS.items():
        written = engine_kwarg(config, argument)  # None: unset, null (verl drops it) or not vLLM
        if written is None:
            continue
        key, value = written
        set_knob = written_value(config, f"{ROLLOUT}.{knob}", ABSENT)
        knob_value = default if set_knob is ABSENT else set_knob
        if value != knob_value:
            plus = "+" if set_knob is ABSENT else ""  # not in verl's yaml (its dataclass has it): hydra adds it
            raise OffGRPOConfigError(
                f"{key}={_hydra(value)} replaces {ROLLOUT}.{knob}={_hydra(knob_value)} when verl starts vLLM "
                f"(engine_kwargs go last), and the plugin's checks read the rollout knob: set "
                f"{plus}{ROLLOUT}.{knob}={_hydra(value)} instead and drop the engine_kwargs key."
            )


def _hydra(value: Any) -> str:
    """``value`` as a hydra override writes it: null, true, false, numbers and words as they are."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
