"""``algorithm.off_grpo.final_outputs_only``: vLLM sends each rollout request's final output only
(``verl_offgrpo.patches.final_outputs``).

vllm is not installed on the CPU, so verl's ``vllm_async_server`` cannot be imported here. What is
checked against verl 0.9.1 itself: the source of its ``vLLMHttpServer.generate`` (read, not imported)
passes the ``sampling_params`` dict into ``SamplingParams(...)`` and keeps the last output of the
stream; the wrap runs on a function with exactly that signature; the knob travels from the config,
through verl's real ``validate_config``, to the job's Ray runtime env, where the vLLM server reads it.
"""

from __future__ import annotations

import ast
import asyncio
import enum
import logging
import sys
import types
from pathlib import Path

import pytest
import verl

from verl_offgrpo.config import OffGRPOConfigError, validate_off_grpo_config
from verl_offgrpo.patches import FINAL_OUTPUTS_ENV, JOB_ENV, PATCH_MODULES
from verl_offgrpo.patches import final_outputs as patch

from _overrides import shipped_config as composed
from _overrides import validate_as_main_ppo as _validate
from _overrides import verl_config

SERVER_FILE = Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout" / "vllm_async_server.py"
KNOB = "algorithm.off_grpo.final_outputs_only"


class Kind(enum.Enum):  # stands in for vllm.sampling_params.RequestOutputKind
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


def _verl_generate() -> ast.AsyncFunctionDef:
    tree = ast.parse(SERVER_FILE.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == patch.CLASS)
    return next(n for n in cls.body if isinstance(n, ast.AsyncFunctionDef) and n.name == "generate")


def _server_class_with_verls_signature():
    """A class whose ``generate`` has verl 0.9.1's exact parameter list and returns what it was given."""
    source = (f"from __future__ import annotations\n"
              f"class Server:\n"
              f"    async def generate({ast.unparse(_verl_generate().args)}):\n"
              f"        return dict(locals())\n")  # fmt: skip
    namespace: dict = {}
    exec(compile(source, "<verl generate signature>", "exec"), namespace)
    return namespace["Server"]


# ----------------------------------------------------------------------------- verl's side of the contract
def test_verls_generate_hands_its_sampling_params_dict_to_vllm_and_keeps_the_last_output():
    """What the patch relies on, read from verl 0.9.1's source: ``generate(self, prompt_ids, sampling_params,
    …)``, ``SamplingParams(max_tokens=max_tokens, **sampling_params)``, and a loop over the output stream
    that keeps the last output (``final_res = output``)."""
    node = _verl_generate()
    assert [a.arg for a in node.args.args[:3]] == ["self", "prompt_ids", patch.ARGUMENT]
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "SamplingParams"]
    assert len(calls) == 1
    splats = [k.value.id for k in calls[0].keywords if k.arg is None]
    assert splats == [patch.ARGUMENT] and [k.arg for k in calls[0].keywords if k.arg] == ["max_tokens"]
    loops = [n for n in ast.walk(node) if isinstance(n, ast.AsyncFor)]
    assert any(ast.unparse(stmt) == "final_res = output" for loop in loops for stmt in ast.walk(loop)
               if isinstance(stmt, ast.Assign))  # fmt: skip


# ----------------------------------------------------------------------------- the request's parameters
def test_final_only_params_ask_for_one_output_and_no_text_unless_stop_strings_need_it():
    verls = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": 0}
    params = patch.final_only_params(verls, Kind.FINAL_ONLY)
    assert params == {**verls, "output_kind": Kind.FINAL_ONLY, "detokenize": False}
    assert "output_kind" not in verls  # verl's dict is not changed (the agent loop reuses it for n samples)
    with_stop = patch.final_only_params({**verls, "stop": ["</answer>"]}, Kind.FINAL_ONLY)
    assert with_stop["output_kind"] is Kind.FINAL_ONLY and "detokenize" not in with_stop
    explicit = patch.final_only_params({**verls, "output_kind": Kind.DELTA, "detokenize": True}, Kind.FINAL_ONLY)
    assert explicit["output_kind"] is Kind.DELTA and explicit["detokenize"] is True


def test_wrapped_generate_with_verls_signature_gets_final_only_params_however_they_are_passed():
    server = _server_class_with_verls_signature()
    patch.wrap_generate(server, Kind.FINAL_ONLY)
    wrapped = server.generate
    patch.wrap_generate(server, Kind.FINAL_ONLY)
    assert server.generate is wrapped  # idempotent
    params = {"temperature": 0.7, "logprobs": 0}
    positional = asyncio.run(server().generate([1, 2], params, "req-1"))
    by_name = asyncio.run(server().generate(prompt_ids=[1, 2], sampling_params=params, request_id="req-2", priority=3))
    for seen in (positional, by_name):
        assert seen["sampling_params"] == {"temperature": 0.7, "logprobs": 0, "output_kind": Kind.FINAL_ONLY,
                                           "detokenize": False}  # fmt: skip
    assert positional["request_id"] == "req-1" and by_name["priority"] == 3 and by_name["request_id"] == "req-2"
    assert params == {"temperature": 0.7, "logprobs": 0}


def test_wrap_refuses_a_generate_it_was_not_written_for():
    class NoParams:
        async def generate(self, prompt_ids, request_id):
            return None

    class NotAsync:
        def generate(self, prompt_ids, sampling_params, request_id):
            return None

    with pytest.raises(RuntimeError, match="no 'sampling_params' argument"):
        patch.wrap_generate(NoParams, Kind.FINAL_ONLY)
    with pytest.raises(RuntimeError, match="not a coroutine function"):
        patch.wrap_generate(NotAsync, Kind.FINAL_ONLY)


def test_the_import_hook_wraps_verls_server_class_with_vllms_final_only(monkeypatch, caplog):
    """``_apply`` on the module (what the hook calls once verl's module is executed): vLLM's
    ``RequestOutputKind.FINAL_ONLY`` (a stand-in module here) goes into every request."""
    vllm_params = types.ModuleType("vllm.sampling_params")
    vllm_params.RequestOutputKind = Kind
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", vllm_params)
    module = types.ModuleType(patch.MODULE)
    module.vLLMHttpServer = _server_class_with_verls_signature()
    monkeypatch.setitem(sys.modules, patch.MODULE, module)
    assert not patch.live()
    with caplog.at_level("INFO", logger=patch.__name__):
        patch._apply(module)
    assert patch.live() and "final output only" in caplog.text
    seen = asyncio.run(module.vLLMHttpServer().generate([1], {"logprobs": 0}, "r"))
    assert seen["sampling_params"]["output_kind"] is Kind.FINAL_ONLY


@pytest.mark.parametrize("environ, hooked", [
    ({JOB_ENV: "1", FINAL_OUTPUTS_ENV: "1"}, True),
    ({JOB_ENV: "1"}, False),  # a selecting job without the knob
    ({FINAL_OUTPUTS_ENV: "1"}, False),  # not a selecting job
    ({}, False),
])  # fmt: skip
def test_installed_only_in_a_selecting_job_that_asks_for_it(monkeypatch, environ, hooked):
    from _post_import_hooks import install_leaves_a_hook

    assert install_leaves_a_hook(patch, environ, monkeypatch) is hooked
    assert "verl_offgrpo.patches.final_outputs" in PATCH_MODULES


# ----------------------------------------------------------------------------- from the config to the Ray env
def test_the_knob_reaches_the_jobs_ray_env_through_verls_validate_config(ray_env):
    assert composed().algorithm.off_grpo.final_outputs_only == "auto"  # the shipped default
    _validate(composed(f"{KNOB}=true"))
    env_vars = ray_env.get_ppo_ray_runtime_env()["env_vars"]
    assert env_vars[JOB_ENV] == "1" and env_vars[FINAL_OUTPUTS_ENV] == "1"
    _validate(composed(f"{KNOB}=false"))  # the next job in this driver without it
    env_vars = ray_env.get_ppo_ray_runtime_env()["env_vars"]
    assert env_vars[JOB_ENV] == "1" and FINAL_OUTPUTS_ENV not in env_vars


@pytest.mark.parametrize("overrides, on", [
    ((), True),  # shipped yaml: vLLM rollout, the plugin's synchronous V1 mode
    (("trainer.v1.trainer_mode=sync", "algorithm.off_grpo.zero_var_mask=false"), True),
    (("trainer.use_v1=false",), True),  # the v0 trainer pauses vLLM only between rollouts
    (("trainer.v1.trainer_mode=colocate_async", "algorithm.off_grpo.zero_var_mask=false"), False),
    (("trainer.v1.trainer_mode=separate_async", "algorithm.off_grpo.zero_var_mask=false"), False),
    (("actor_rollout_ref.rollout.name=sglang",), False),
    (("actor_rollout_ref.rollout.name=sglang", "trainer.use_v1=false"), False),
])  # fmt: skip
def test_auto_turns_it_on_exactly_where_it_can_hold_and_never_refuses(overrides, on, ray_env, caplog):
    _validate(composed(f"{KNOB}=true"))  # a previous job's mark must not leak into the next one
    assert ray_env.get_ppo_ray_runtime_env()["env_vars"][FINAL_OUTPUTS_ENV] == "1"
    config = composed(*overrides)
    assert validate_off_grpo_config(config).final_outputs_only is on  # resolved: a bool, never "auto"
    with caplog.at_level(logging.INFO, logger="verl_offgrpo.config.final_outputs_checks"):
        _validate(config)
    env_vars = ray_env.get_ppo_ray_runtime_env()["env_vars"]
    assert env_vars[JOB_ENV] == "1" and (env_vars.get(FINAL_OUTPUTS_ENV) == "1") is on
    said = [r.getMessage() for r in caplog.records if "final_outputs_only=auto" in r.getMessage()]
    assert said and said[0].startswith(f"off_grpo: final_outputs_only=auto is {'on' if on else 'off'}")


@pytest.mark.parametrize("overrides, said", [
    (("algorithm.off_grpo.sync_period=4",), True),  # the shipped yaml at v > 1: the window
    (("algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.rollout_schedule=per_step"), False),
    ((), False),  # v = 1: no window
])  # fmt: skip
def test_turning_final_outputs_off_under_the_window_says_what_it_costs_once(overrides, said, ray_env, caplog):
    """An explicit ``false`` where a window runs (only where ``auto`` would be on: a window needs the synchronous V1
    mode and vLLM): one info line (per-token outputs for every sequence of the window in flight), not a refusal;
    nothing under per_step or at v = 1."""
    config = composed(f"{KNOB}=false", *overrides)
    knobs = validate_off_grpo_config(config)
    with caplog.at_level(logging.INFO, logger="verl_offgrpo.config.final_outputs_checks"):
        _validate(config)
    lines = [r.getMessage() for r in caplog.records if "final_outputs_only=false with the window" in r.getMessage()]
    assert knobs.final_outputs_only is False
    assert lines == ([f"off_grpo: final_outputs_only=false with the window: vLLM builds and queues an output per "
                      f"generated token for each sequence in flight, and a window puts up to 4 batches in flight at "
                      f"once; the default (auto) turns final outputs on here."] if said else [])


def test_a_plain_verl_job_that_selects_the_plugin_gets_auto(ray_env):
    """verl's own ppo_trainer yaml with the plugin's estimator: no off_grpo node, so the knob's default applies."""
    _validate(verl_config("algorithm.adv_estimator=off_grpo", "trainer.v1.trainer_mode=off_grpo_sync"))
    env_vars = ray_env.get_ppo_ray_runtime_env()["env_vars"]
    assert env_vars[JOB_ENV] == "1" and env_vars[FINAL_OUTPUTS_ENV] == "1"


def test_a_plain_verl_grpo_job_with_only_the_knob_gets_it(ray_env):
    """verl's own ppo_trainer yaml and GRPO, plus the knob alone: the job is the plugin's to check and mark."""
    _validate(verl_config(f"+{KNOB}=true"))
    env_vars = ray_env.get_ppo_ray_runtime_env()["env_vars"]
    assert env_vars[JOB_ENV] == "1" and env_vars[FINAL_OUTPUTS_ENV] == "1"


@pytest.mark.parametrize("overrides, message", [
    ((f"{KNOB}=yes_please",), "final_outputs_only must be true, false or auto"),
    ((f"{KNOB}=0",), "final_outputs_only must be true, false or auto"),
    ((f"{KNOB}='true'",), "got 'true', a quoted string: write it without quotes"),
    ((f"{KNOB}=true", "trainer.v1.trainer_mode=separate_async", "algorithm.off_grpo.zero_var_mask=false"),
     "trainer.v1.trainer_mode='separate_async'"),
    ((f"{KNOB}=true", "actor_rollout_ref.rollout.name=sglang"), "rollout.name='sglang'"),
    ((f"{KNOB}=true", "trainer.v1.trainer_mode=colocate_async", "algorithm.off_grpo.zero_var_mask=false"),
     "trainer.v1.trainer_mode='colocate_async'"),
])  # fmt: skip
def test_the_knob_is_refused_where_it_cannot_hold(overrides, message, ray_env):
    with pytest.raises(OffGRPOConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _validate(composed(*overrides))


@pytest.mark.parametrize("mode", ["sync", "off_grpo_sync"])
def test_the_knob_is_accepted_with_synchronous_trainer_modes(mode, ray_env):
    extra = ("algorithm.off_grpo.zero_var_mask=false",) if mode == "sync" else ()
    _validate(composed(f"{KNOB}=true", f"trainer.v1.trainer_mode={mode}", *extra))
    assert ray_env.get_ppo_ray_runtime_env()["env_vars"][FINAL_OUTPUTS_ENV] == "1"
