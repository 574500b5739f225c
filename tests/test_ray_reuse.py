"""A job validated in a process where Ray already runs (a hydra ``-m`` sweep: ``main_ppo`` starts Ray with
the first job's runtime env and reuses it for the next): the plugin's marks that env carries must be the
ones this job needs (``patches/job_env.running_ray_problem``), through verl's ``validate_config`` as
``main_ppo`` calls it. Ray's state is faked here (its runtime env as ``ray.get_runtime_context`` reports
it); the slow test reproduces the sweep with a real local Ray."""

import subprocess
import sys
import textwrap

import pytest
import ray

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.patches import PatchError

from _overrides import shipped_config, validate_as_main_ppo, verl_config

JOB, FINAL = "VERL_OFFGRPO_JOB", "VERL_OFFGRPO_FINAL_OUTPUTS"


class _Context:
    def __init__(self, env_vars):
        self.runtime_env = {"env_vars": env_vars} if env_vars is not None else {}


@pytest.fixture
def running_ray(monkeypatch):
    """Make this process look as if Ray ran here with ``env_vars`` in its job's runtime env."""
    def start(env_vars):
        monkeypatch.setattr(ray, "is_initialized", lambda: True)
        monkeypatch.setattr(ray, "get_runtime_context", lambda: _Context(env_vars))
    return start


def _job_marks():
    from verl.trainer import constants_ppo

    env_vars = constants_ppo.PPO_RAY_RUNTIME_ENV.get("env_vars") or {}
    return {k: env_vars[k] for k in (JOB, FINAL) if k in env_vars}


def test_a_plain_job_after_a_selecting_one_is_refused_in_one_line(running_ray):
    running_ray({JOB: "1", "TOKENIZERS_PARALLELISM": "true"})
    with pytest.raises(PatchError, match=r"this plain verl job's workers would run the plugin's patches: run each "
                                         r"job in its own process \(not a hydra -m sweep\)"):
        validate_as_main_ppo(verl_config())


def test_a_selecting_job_on_a_ray_without_the_mark_is_refused_and_not_marked(running_ray):
    running_ray({})
    with pytest.raises(PatchError, match="this job's workers would run without the plugin's patches"):
        validate_as_main_ppo(shipped_config())
    assert _job_marks() == {}


def test_final_outputs_must_agree_between_the_running_ray_and_the_job(running_ray):
    """The shipped yaml on the V1 trainer with vLLM: final_outputs_only auto resolves to true."""
    running_ray({JOB: "1"})
    with pytest.raises(PatchError, match=f"vLLM would get {FINAL}=unset where this job's final_outputs_only "
                                         "resolves to true"):
        validate_as_main_ppo(shipped_config())


def test_matching_marks_pass_and_mark_the_job(running_ray):
    running_ray({JOB: "1", FINAL: "1"})
    validate_as_main_ppo(shipped_config())
    assert _job_marks() == {JOB: "1", FINAL: "1"}
    running_ray({})
    validate_as_main_ppo(verl_config())  # a plain job on an unmarked Ray (user-started, or plain sweeps): verl's
    assert _job_marks() == {}


def test_no_ray_running_leaves_both_kinds_of_job_alone(monkeypatch):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # whatever another module's fake cluster left
    validate_as_main_ppo(shipped_config())
    validate_as_main_ppo(verl_config())


@pytest.mark.slow
def test_a_real_sweep_plugin_then_plain_is_stopped_before_the_plain_job():
    """The newcomer's reproduction: main_ppo's order (validate, then ray.init with the job's env only when
    Ray is not up), a selecting job then a plain one, in one process with a real local Ray."""
    code = textwrap.dedent("""
        import ray, sys
        sys.path.insert(0, "tests")
        import verl
        from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
        from _overrides import shipped_config, validate_as_main_ppo, verl_config
        first = shipped_config()
        validate_as_main_ppo(first)
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, runtime_env=get_ppo_ray_runtime_env(first))
        try:
            validate_as_main_ppo(verl_config())
        except Exception as err:
            print("REFUSED:", type(err).__name__, str(err)[:80])
        else:
            print("ACCEPTED")
        ray.shutdown()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert "REFUSED: PatchError verl-offgrpo: Ray is already running in this process" in out.stdout, out.stderr[-2000:]
