"""recipes/*.sh: every recipe composes with hydra's --cfg job into the intended config.

Runs each recipe through bash, with data/model paths from environment variables, a user override and --cfg
job, and checks the printed yaml. Needs the package installed (pip install -e .), as verl finds the yaml
through `python -m verl_offgrpo` or the package path.

Two ways to run the recipe's python command (``how``): ``subprocess``, bash with PYTHON = this interpreter
(a fresh interpreter importing verl, ~15 s: the slow tier runs every recipe so), and ``in_process`` (the
default run, for the recipes of ``DEFAULT_TIER``): the same bash with PYTHON = :data:`RECORDER`, which
writes the command down instead, then this process runs it as ``python -m`` would (``_in_process``), with
the recipe's environment, and the tests read the same exit code, stdout and stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _background import module_jobs
from _in_process import run_main
from verl_offgrpo.config import validate_off_grpo_config

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"

# recipe -> (sync_period v, ppo_epochs i, zero_var_mask)
GSM8K = {
    "gsm8k_onpolicy": (1, 1, False),
    "gsm8k_onpolicy_zvmask": (1, 1, True),
    "gsm8k_offpolicy_v10": (10, 1, True),
    "gsm8k_offpolicy_v10_per_step": (10, 1, True),
    "gsm8k_reuse_i10": (1, 10, True),
}
DEEPSCALER = {
    "deepscaler_onpolicy": (1, 1, True),
    "deepscaler_offpolicy_v10": (10, 1, True),
}
ALL = {**GSM8K, **DEEPSCALER}


def recipe_job(name: str, env_dir: Path, *args: str) -> dict:
    """``subprocess.run``'s arguments for ``bash recipes/<name>.sh args`` with data/model paths under ``env_dir``."""
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        MODEL_PATH=str(env_dir / "model"),
        DATA_DIR=str(env_dir / "data"),
        AIME24_DIR=str(env_dir / "aime"),
        MATH500_DIR=str(env_dir / "math500"),
        N_GPUS_PER_NODE="2",
    )
    env.pop("LOGGER", None)
    return dict(args=["bash", str(RECIPES / f"{name}.sh"), *args], env=env, timeout=170)


# Hydra takes overrides only before its flags; the recipes move the user's flags last, so both orders work.
ARGS = {name: ("trainer.total_epochs=2", "--cfg", "job") for name in GSM8K}
ARGS.update({name: ("--cfg", "job", "trainer.total_epochs=2") for name in DEEPSCALER})
# A user override of a recipe's own knob wins (composed in the same parallel batch, under this key).
KNOB_OVERRIDE = ("gsm8k_offpolicy_v10", ("--cfg", "job", "algorithm.off_grpo.sync_period=4"))


#: composed in the default run, in this process (one recipe of each data set, and the user override); the
#: other recipes differ only in (v, i, mask); the slow tier (``pytest -m slow``) runs every recipe in a subprocess
DEFAULT_TIER = ("gsm8k_offpolicy_v10", "deepscaler_offpolicy_v10", "knob_override")
IN_PROCESS, SUBPROCESS = "in_process", "subprocess"


def _how(names=None):
    """The ``how`` of a test (``names`` None) or its ``(name, how)`` parameters: in this process for the names of
    :data:`DEFAULT_TIER` (the default run), in a subprocess for every name (slow; the id is the name alone, or
    ``subprocess``, as ``BACKGROUND_JOBS`` names the tests that select a job)."""
    if names is None:
        return [IN_PROCESS, pytest.param(SUBPROCESS, marks=pytest.mark.slow)]
    return ([pytest.param(name, IN_PROCESS, id=f"{name}-{IN_PROCESS}")
             for name in sorted(names) if name in DEFAULT_TIER]
            + [pytest.param(name, SUBPROCESS, id=name, marks=pytest.mark.slow) for name in sorted(names)])


#: a recipe's PYTHON in the in-process runs: the recipe's queries (``-c`` whether $PYTHON has the plugin, ``-m verl_offgrpo
#: config-dir`` the yaml's directory) run as they would; any other command (the one the recipe ``exec``s) is written, NUL-separated,
#: to $RECIPE_COMMAND instead: where its stdout goes (``devnull`` or ``stdout``), then its arguments
RECORDER = r"""#!/usr/bin/env bash
if [[ $# == 3 && $1 == -m && $2 == verl_offgrpo && $3 == config-dir ]]; then exec "$RECIPE_PYTHON" "$@"; fi
if [[ $1 == -c ]]; then exec "$RECIPE_PYTHON" "$@"; fi
out=stdout
[[ /dev/stdout -ef /dev/null ]] && out=devnull
printf '%s\0' "$out" "$@" > "$RECIPE_COMMAND"
"""


def run_recipe_in_process(job: dict, recorder: Path, command: Path) -> subprocess.CompletedProcess:
    """The recipe of ``job`` (:func:`recipe_job`'s arguments) through bash with PYTHON = ``recorder``, then the
    command it recorded in ``command`` run in this process with the recipe's environment (verl's PPO Ray
    runtime env as it was before, afterwards): what ``subprocess.run(**job)`` returns, bash's stderr first."""
    from verl.trainer import constants_ppo

    env = job["env"]
    bash = subprocess.run(job["args"], env={**env, "PYTHON": str(recorder), "RECIPE_PYTHON": env["PYTHON"],
                                            "RECIPE_COMMAND": str(command)},
                          capture_output=True, text=True, timeout=job["timeout"])
    if bash.returncode != 0 or not command.exists():  # the recipe stopped before its python command
        return bash
    stdout_to, *argv = command.read_text().split("\0")[:-1]
    command.unlink()
    assert argv[0] == "-m", argv
    env_vars = constants_ppo.PPO_RAY_RUNTIME_ENV.setdefault("env_vars", {})
    saved = dict(env_vars)
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name in set(os.environ) - set(env):
                mp.delenv(name)
            for name, value in env.items():
                mp.setenv(name, value)
            done = run_main(argv)
    finally:
        env_vars.clear()
        env_vars.update(saved)
    return subprocess.CompletedProcess(job["args"], done.returncode, done.stdout if stdout_to == "stdout" else "",
                                       bash.stderr + done.stderr)


#: every composition's recipe and arguments
COMPOSITIONS = {name: (name, ARGS[name]) for name in ALL}
COMPOSITIONS["knob_override"] = KNOB_OVERRIDE
#: the tests that read a composition
COMPOSITION_TESTS = ("test_recipe_composes_with_intended_knobs", "test_gsm8k_recipes_data_and_reward",
                     "test_deepscaler_recipes_data_and_reward", "test_user_override_of_a_recipe_knob_wins")
_DIRS = {}


def _env_dir(factory, key) -> Path:
    """The data/model directory of the composition or check ``key``: a new tmp dir, made once."""
    if key not in _DIRS:
        _DIRS[key] = factory.mktemp(key)
    return _DIRS[key]


def _composition_job(key):
    name, args = COMPOSITIONS[key]
    return lambda factory: recipe_job(name, _env_dir(factory, key), *args)


def _composition_tests(key):
    """The tests (with parameters) that read composition ``key``."""
    if key == "knob_override":
        return (f"test_user_override_of_a_recipe_knob_wins[{SUBPROCESS}]",)
    return tuple(f"{test}[{key}]" for test in COMPOSITION_TESTS[:3])


CHECK_TEST = f"test_check_flag_runs_the_startup_checks[{SUBPROCESS}]"
#: the compositions of the selected tests and the ``--check`` runs, in the background from the session's start
#: (``_background``; each imports verl: ~6 s); the in-process runs (:class:`_Runs`) take their arguments from here
BACKGROUND_JOBS = {
    **{key: (_composition_tests(key), _composition_job(key)) for key in COMPOSITIONS},
    "check_ok": (CHECK_TEST, lambda factory: recipe_job("gsm8k_offpolicy_v10", _env_dir(factory, "check"), "--check")),
    "check_bad": (CHECK_TEST, lambda factory: recipe_job("gsm8k_offpolicy_v10", _env_dir(factory, "check"), "--check",
                                                         "actor_rollout_ref.rollout.n=1")),
}


class _Runs:
    """The runs of this module's recipes, by job key (``BACKGROUND_JOBS``) and how: ``runs[key, how]`` is
    what ``subprocess.run`` returned for it, from the background job (``subprocess``) or in this process
    (``in_process``, run at the first ask)."""

    def __init__(self, jobs, tmp_path_factory):
        self.jobs, self.factory, self.cache = jobs, tmp_path_factory, {}
        self.env_dir = _env_dir(tmp_path_factory, "check")
        self.recorder = tmp_path_factory.mktemp("recorder") / "python"
        self.recorder.write_text(RECORDER)
        self.recorder.chmod(0o755)

    def __getitem__(self, key_how):
        key, how = key_how
        if how == SUBPROCESS:
            return self.jobs[key]
        if key_how not in self.cache:
            _, spec = BACKGROUND_JOBS[key]
            self.cache[key_how] = run_recipe_in_process(spec(self.factory), self.recorder,
                                                        self.recorder.parent / "command")
        return self.cache[key_how]


class _Compositions:
    """(key, how) -> (env dir, composed config), from :class:`_Runs`."""

    def __init__(self, procs, tmp_path_factory):
        self.procs, self.factory, self.cache = procs, tmp_path_factory, {}

    def __getitem__(self, key_how):
        if key_how not in self.cache:
            res = self.procs[key_how]
            assert res.returncode == 0, f"{key_how}: {res.stderr[-3000:]}"
            self.cache[key_how] = (_env_dir(self.factory, key_how[0]), yaml.safe_load(res.stdout))
        return self.cache[key_how]


@pytest.fixture(scope="module")
def procs(request, tmp_path_factory):
    return _Runs(module_jobs(request), tmp_path_factory)


@pytest.fixture(scope="module")
def composed(procs, tmp_path_factory):
    return _Compositions(procs, tmp_path_factory)


def test_recipe_set_is_complete():
    assert sorted(p.stem for p in RECIPES.glob("*.sh") if not p.name.startswith("_")) == sorted(ALL)


@pytest.mark.parametrize("name, how", _how(ALL))
def test_recipe_composes_with_intended_knobs(composed, name, how):
    env_dir, cfg = composed[name, how]
    v, i, mask = ALL[name]
    actor = cfg["actor_rollout_ref"]["actor"]
    assert cfg["algorithm"]["adv_estimator"] == "off_grpo"
    assert actor["policy_loss"]["loss_mode"] == "off_grpo"
    assert cfg["algorithm"]["off_grpo"]["sync_period"] == v
    assert actor["ppo_epochs"] == i
    assert cfg["algorithm"]["off_grpo"]["zero_var_mask"] is mask
    assert cfg["algorithm"]["off_grpo"]["rollout_schedule"] == ("per_step" if name.endswith("_per_step") else "auto")
    # auto: the v = 10 recipes generate each window at once on the V1 trainer; per_step stays per step
    resolved = validate_off_grpo_config(cfg).rollout_schedule
    assert resolved == ("window" if v > 1 and not name.endswith("_per_step") else "per_step")
    # validation syncs vLLM: a test_freq that is not a multiple of v would restart the lag (per_step) or add
    # transfers inside windows, and the v = 10 recipes would no longer see the same samples
    assert cfg["trainer"]["test_freq"] % v == 0
    # shared settings: ε, β with the KL loss
    assert actor["clip_ratio_low"] == actor["clip_ratio_high"] == 0.2
    assert actor["use_kl_loss"] is True
    assert actor["kl_loss_coef"] == 0.001
    assert cfg["actor_rollout_ref"]["rollout"]["name"] == "vllm"
    assert cfg["actor_rollout_ref"]["model"]["path"] == str(env_dir / "model")
    assert cfg["trainer"]["experiment_name"] == name
    # environment and the user's override (appended last, so it wins over the recipe's 15/30)
    assert cfg["trainer"]["n_gpus_per_node"] == 2
    assert cfg["trainer"]["total_epochs"] == 2
    assert cfg["trainer"]["logger"] == ["console"]


@pytest.mark.parametrize("name, how", _how(GSM8K))
def test_gsm8k_recipes_data_and_reward(composed, name, how):
    env_dir, cfg = composed[name, how]
    assert cfg["data"]["train_files"] == f"{env_dir}/data/train.parquet"
    assert cfg["data"]["val_files"] == f"{env_dir}/data/test.parquet"
    assert cfg["reward"]["custom_reward_function"]["path"] is None  # verl's built-in GSM8K scorer
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 5


@pytest.mark.parametrize("name, how", _how(DEEPSCALER))
def test_deepscaler_recipes_data_and_reward(composed, name, how):
    env_dir, cfg = composed[name, how]
    assert cfg["data"]["train_files"] == f"{env_dir}/data/train.parquet"
    assert cfg["data"]["val_files"] == [f"{env_dir}/aime/test.parquet", f"{env_dir}/math500/test.parquet"]
    assert cfg["reward"]["custom_reward_function"] == {"path": "pkg://verl_offgrpo.rewards", "name": "compute_score",
                                                       "reward_kwargs": {"require_think_end": True}}  # R1-Distill
    assert cfg["data"]["max_response_length"] == 8192
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 8


@pytest.mark.parametrize("how", _how())
def test_user_override_of_a_recipe_knob_wins(composed, how):
    _, cfg = composed["knob_override", how]
    assert cfg["algorithm"]["off_grpo"]["sync_period"] == 4
    assert cfg["trainer"]["experiment_name"] == "gsm8k_offpolicy_v10"


@pytest.mark.parametrize("written, expanded", [("~/data/gsm8k", "/h/data/gsm8k"), ("~", "/h"),
                                               ("/abs/~/x", "/abs/~/x"), ("Qwen/Qwen2.5-0.5B-Instruct",
                                                                         "Qwen/Qwen2.5-0.5B-Instruct")])
def test_a_leading_tilde_in_a_recipe_path_is_home(written, expanded):
    """``DATA_DIR='~/data/gsm8k'`` (quoted, as docs/recipes.md's table once read): the recipes read a leading ``~``
    as ``$HOME`` (hydra's grammar refuses a bare ``~`` in a value; verl would read it as written)."""
    import subprocess

    done = subprocess.run(["bash", "-c", f'source {RECIPES / "_common.sh"}; home_path "$0"', written],
                          capture_output=True, text=True, env={**os.environ, "HOME": "/h"}, timeout=30)
    assert done.returncode == 0 and done.stdout == expanded, done.stderr


def test_config_dir_helper():
    res = subprocess.run(
        ["bash", "-c", f"source {RECIPES / '_common.sh'} && offgrpo_config_dir"],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    import verl_offgrpo

    expected = Path(verl_offgrpo.__file__).parent / "config"
    assert Path(res.stdout.strip()) == expected
    assert (expected / "off_grpo_trainer.yaml").is_file()


@pytest.mark.parametrize("how", _how())
def test_check_flag_runs_the_startup_checks(procs, how):
    """``--check``: verl's and the plugin's startup checks on the recipe's config, no training; a bad user
    override fails in the plugin's one line."""
    ok = procs["check_ok", how]
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "composed and validated" in ok.stderr
    # the recipe's data and model paths (under a fresh tmp dir) do not exist: noted, with the data_prep command
    notes = [line for line in ok.stderr.splitlines() if line.startswith("note: ")]
    data = procs.env_dir / "data"
    prep = "data_prep/gsm8k.py" if Path.cwd().resolve() == REPO else f"{REPO}/data_prep/gsm8k.py"
    assert notes == [
        f"note: data.{key}={data}/{split}.parquet does not exist here (make it with python {prep} --output-dir "
        f"{data}, or set DATA_DIR)" for key, split in (("train_files", "train"), ("val_files", "test"))
    ] + [f"note: actor_rollout_ref.model.path={procs.env_dir / 'model'} does not exist here"], notes
    bad = procs["check_bad", how]
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("off_grpo config error: actor_rollout_ref.rollout.n=1")


@pytest.mark.parametrize("python, said", [
    ("nosite", r"^recipes: PYTHON=\S+ lacks (verl_offgrpo )?verl hydra: install verl-offgrpo there, or set PYTHON to the interpreter "
               r"that has it$"),
    ("/nonexistent/python3", r"^recipes: PYTHON=/nonexistent/python3 does not run \(.*\): set PYTHON to the "
                             r"interpreter that has verl-offgrpo$"),
], ids=["without_the_plugin", "not_there"])
def test_a_recipe_with_a_python_that_cannot_run_the_plugin_says_so_in_one_line(tmp_path, python, said):
    """PYTHON=<another interpreter>: one line and exit 1 before anything runs, not python's traceback."""
    if python == "nosite":  # this interpreter without its site-packages: no verl, no hydra
        python = tmp_path / "python"
        python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
        python.chmod(0o755)
    res = subprocess.run(["bash", str(RECIPES / "gsm8k_onpolicy.sh"), "--check"], env=dict(os.environ, PYTHON=str(python)),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and res.stdout == "", res
    assert len(res.stderr.splitlines()) == 1 and re.match(said, res.stderr.strip()), res.stderr


def test_a_python_that_writes_to_stderr_still_runs_the_recipe(tmp_path):
    """A wrapper's banner or a .pth warning on stderr is not a missing module."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "note: env loaded" >&2\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    res = subprocess.run(["bash", "-c", f"source {RECIPES / '_common.sh'} && require_plugin_python && echo ok"],
                         env=dict(os.environ, PYTHON=str(python)), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout == "ok\n", res
