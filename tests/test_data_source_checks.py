"""A selecting job whose data only the plugin's scorer can score, run without it, is refused before any GPU work
(verl's built-in scorer raises NotImplementedError at the first validation, after the workers started)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError
from verl_offgrpo.config import data_source_checks
from verl_offgrpo.config.data_source_checks import verl_cannot_score
from verl_offgrpo.rewards.score import ARITHMETIC_PREFIX, GSM8K_SOURCES, MATH_VERIFY_SOURCES

from _in_process import run_main
from _overrides import shipped_config, validate_as_main_ppo

REPO = Path(__file__).resolve().parents[1]
PLUGIN_SCORER = ("reward.custom_reward_function.path=pkg://verl_offgrpo.rewards",
                 "reward.custom_reward_function.name=compute_score")


@pytest.mark.parametrize("source", sorted(MATH_VERIFY_SOURCES | GSM8K_SOURCES | {"arithmetic/add1"}))
def test_the_sources_verl_cannot_score_are_those_its_scorer_refuses(source):
    """Every data_source the plugin's scorer knows, against verl 0.9.1's own ``default_compute_score``."""
    from verl.utils.reward_score import default_compute_score

    try:
        default_compute_score(source, "The answer is \\boxed{1}. #### 1", "1")
        refused = False
    except NotImplementedError:
        refused = True
    assert verl_cannot_score(source) is refused
    assert data_source_checks.ARITHMETIC_PREFIX == ARITHMETIC_PREFIX


def _arithmetic(tmp_path: Path) -> Path:
    res = run_main([str(REPO / "data_prep" / "arithmetic.py"), "--task", "add1", "--n-train", "40", "--n-test", "8",
                    "--output-dir", str(tmp_path)])
    assert res.returncode == 0, res.stderr
    return next(tmp_path.rglob("test.parquet"))


def test_data_prep_data_without_the_plugins_scorer_is_refused_in_one_line(tmp_path):
    """data_prep's arithmetic test split as the validation files, verl's scorer (the yaml's custom reward function
    unset): one line naming the file, the source and the override; with the plugin's scorer it passes."""
    val = _arithmetic(tmp_path)
    unset = ("reward.custom_reward_function.path=null", f"data.val_files={val}")
    with pytest.raises(OffGRPOConfigError, match=(
            rf"^data.val_files: {re.escape(str(val))} holds data_source 'arithmetic/add1', which verl's built-in scorer "
            r"does not know \(NotImplementedError at the first reward, after the workers started\): set "
            r"reward.custom_reward_function.path=pkg://verl_offgrpo.rewards reward.custom_reward_function.name="
            r"compute_score, the plugin's scorer, for which data_prep/ writes it.")):
        validate_as_main_ppo(shipped_config(*unset))
    # a list with a path that is not here, and a glob, are read as verl reads them
    with pytest.raises(OffGRPOConfigError, match="holds data_source 'arithmetic/add1'"):
        validate_as_main_ppo(shipped_config("reward.custom_reward_function.path=null",
                                            f"data.train_files=[/nowhere/train.parquet,{val.parent}/*.parquet]"))
    validate_as_main_ppo(shipped_config(*unset[1:], *PLUGIN_SCORER))
    # a reward model, or a reward manager of the user's own, may not call verl's scorer: left to them
    validate_as_main_ppo(shipped_config(*unset, "reward.reward_manager.source=importlib",
                                        "reward.reward_manager.module.path=/nowhere/manager.py"))
