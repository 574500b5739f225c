"""recipes/*.sh: every recipe composes with hydra's --cfg job into the intended config.

Runs each recipe through bash (PYTHON = this interpreter), with data/model paths from environment
variables, a user override and --cfg job, and checks the printed yaml. Needs the package installed
(pip install -e .), as verl finds the yaml through `python -m verl_offgrpo` or the package path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _background import module_jobs
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


#: composed in the default run (one recipe of each data set, and the user override); the other recipes
#: differ only in (v, i, mask) and are composed in the slow tier (``pytest -m slow``)
DEFAULT_TIER = ("gsm8k_offpolicy_v10", "deepscaler_offpolicy_v10", "knob_override")


def _tiered(names):
    return [name if name in DEFAULT_TIER else pytest.param(name, marks=pytest.mark.slow) for name in sorted(names)]


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
        return ("test_user_override_of_a_recipe_knob_wins",)
    return tuple(f"{test}[{key}]" for test in COMPOSITION_TESTS[:3])


CHECK_TEST = "test_check_flag_runs_the_startup_checks"
#: the compositions of the selected tests and the ``--check`` runs, in the background from the session's start
#: (``_background``; each imports verl: ~6 s)
BACKGROUND_JOBS = {
    **{key: (_composition_tests(key), _composition_job(key)) for key in COMPOSITIONS},
    "check_ok": (CHECK_TEST, lambda factory: recipe_job("gsm8k_offpolicy_v10", _env_dir(factory, "check"), "--check")),
    "check_bad": (CHECK_TEST, lambda factory: recipe_job("gsm8k_offpolicy_v10", _env_dir(factory, "check"), "--check",
                                                         "actor_rollout_ref.rollout.n=1")),
}


class _Compositions:
    """key -> (env dir, composed config), from the background jobs."""

    def __init__(self, procs, tmp_path_factory):
        self.procs, self.factory, self.cache = procs, tmp_path_factory, {}

    def __getitem__(self, key):
        if key not in self.cache:
            res = self.procs[key]
            assert res.returncode == 0, f"{key}: {res.stderr[-3000:]}"
            self.cache[key] = (_env_dir(self.factory, key), yaml.safe_load(res.stdout))
        return self.cache[key]


@pytest.fixture(scope="module")
def procs(request):
    procs = module_jobs(request)
    procs.env_dir = _env_dir(request.getfixturevalue("tmp_path_factory"), "check")
    return procs


@pytest.fixture(scope="module")
def composed(procs, tmp_path_factory):
    return _Compositions(procs, tmp_path_factory)


def test_recipe_set_is_complete():
    assert sorted(p.stem for p in RECIPES.glob("*.sh") if not p.name.startswith("_")) == sorted(ALL)


@pytest.mark.parametrize("name", _tiered(ALL))
def test_recipe_composes_with_intended_knobs(composed, name):
    env_dir, cfg = composed[name]
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


@pytest.mark.parametrize("name", _tiered(GSM8K))
def test_gsm8k_recipes_data_and_reward(composed, name):
    env_dir, cfg = composed[name]
    assert cfg["data"]["train_files"] == f"{env_dir}/data/train.parquet"
    assert cfg["data"]["val_files"] == f"{env_dir}/data/test.parquet"
    assert cfg["reward"]["custom_reward_function"]["path"] is None  # verl's built-in GSM8K scorer
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 5


@pytest.mark.parametrize("name", _tiered(DEEPSCALER))
def test_deepscaler_recipes_data_and_reward(composed, name):
    env_dir, cfg = composed[name]
    assert cfg["data"]["train_files"] == f"{env_dir}/data/train.parquet"
    assert cfg["data"]["val_files"] == [f"{env_dir}/aime/test.parquet", f"{env_dir}/math500/test.parquet"]
    assert cfg["reward"]["custom_reward_function"] == {"path": "pkg://verl_offgrpo.rewards", "name": "compute_score"}
    assert cfg["data"]["max_response_length"] == 8192
    assert cfg["actor_rollout_ref"]["rollout"]["n"] == 8


def test_user_override_of_a_recipe_knob_wins(composed):
    _, cfg = composed["knob_override"]
    assert cfg["algorithm"]["off_grpo"]["sync_period"] == 4
    assert cfg["trainer"]["experiment_name"] == "gsm8k_offpolicy_v10"


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


def test_check_flag_runs_the_startup_checks(procs):
    """``--check``: verl's and the plugin's startup checks on the recipe's config, no training; a bad user
    override fails in the plugin's one line."""
    ok = procs["check_ok"]
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
    bad = procs["check_bad"]
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("off_grpo config error: actor_rollout_ref.rollout.n=1")
