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
    with pytest.raises(OffGRPOConfigError, match=rf"^data.train_files: {re.escape(str(val.parent))}/\w+\.parquet holds "
                                                 "data_source 'arithmetic/add1'"):  # the key the file came from
        validate_as_main_ppo(shipped_config("reward.custom_reward_function.path=null",
                                            f"data.train_files=[/nowhere/train.parquet,{val.parent}/*.parquet]"))
    validate_as_main_ppo(shipped_config(*unset[1:], *PLUGIN_SCORER))


@pytest.mark.parametrize("overrides", [
    ("reward.reward_manager.source=importlib", "reward.reward_manager.module.path=/nowhere/manager.py"),
    ("reward.reward_manager.name=my_manager",),  # registered by the user: it may not call verl's scorer
    ("reward.reward_model.enable=true", "reward.reward_model.rollout.name=vllm"),
    ("+data.custom_cls.path=/nowhere/dataset.py", "+data.custom_cls.name=MyDataset"),  # may rewrite data_source
    ("trainer.val_before_train=false", "trainer.test_freq=-1"),  # validation files never scored
    ("trainer.val_before_train=false", "trainer.test_freq=0"),  # verl validates at test_freq > 0 only
])
def test_rows_that_may_not_reach_verls_scorer_are_left_alone(overrides, tmp_path):
    val = _arithmetic(tmp_path)
    validate_as_main_ppo(shipped_config("reward.custom_reward_function.path=null", f"data.val_files={val}", *overrides))


@pytest.mark.parametrize("overrides", [
    ("~trainer.val_before_train", "trainer.test_freq=-1"),  # verl's default: validate before training
    ("trainer.val_before_train=false", "trainer.test_freq=5"),  # validates at step 5
    ("trainer.v1.trainer_mode=off_grpo_sync",),  # verl's own GRPO under the plugin's trainer: verl's scorer too
])
def test_validation_files_a_job_scores_are_read(overrides, tmp_path):
    from _overrides import verl_config

    val, compose = _arithmetic(tmp_path), verl_config if "trainer_mode" in overrides[0] else shipped_config
    with pytest.raises(OffGRPOConfigError, match=r"^data.val_files: .* holds data_source 'arithmetic/add1'"):
        validate_as_main_ppo(compose("reward.custom_reward_function.path=null", f"data.val_files={val}", *overrides))


def test_a_name_past_the_first_batch_of_rows_is_found(tmp_path):
    """The column is read in batches of 65536 rows up to the first unscored name, wherever it lies."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": ["q"] * 65537, "data_source": ["openai/gsm8k"] * 65536 + ["math500"]}), train)
    with pytest.raises(OffGRPOConfigError, match=rf"^data.train_files: {re.escape(str(train))} holds data_source 'math500'"):
        validate_as_main_ppo(shipped_config("reward.custom_reward_function.path=null", f"data.train_files={train}"))


def test_remote_paths_are_left_to_verl_and_a_tilde_path_gets_its_own_line(tmp_path, monkeypatch):
    """verl hands a path to ``datasets`` as written: ``hdfs://…`` is not read here; ``~`` is not expanded there, so
    a file under the home directory is refused for its path (:mod:`.tilde_path_checks`), not read for its sources."""
    val = _arithmetic(tmp_path)
    validate_as_main_ppo(shipped_config("reward.custom_reward_function.path=null",
                                        "data.val_files='hdfs://namenode/data/test.parquet'"))
    monkeypatch.setenv("HOME", str(val.parent))
    with pytest.raises(OffGRPOConfigError, match=r"^data.val_files=~/test.parquet: verl does not expand ~"):
        validate_as_main_ppo(shipped_config("reward.custom_reward_function.path=null", "data.val_files='~/test.parquet'"))


def test_verls_built_in_reward_managers_are_the_registered_ones():
    """The names the check treats as scoring with verl's ``default_compute_score``: verl's reward-loop registry."""
    import verl.experimental.reward_loop.reward_manager  # noqa: F401  (registers the built-in managers)
    from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
    from verl_offgrpo.config.data_source_checks import VERL_REWARD_MANAGERS

    assert set(REWARD_MANAGER) == set(VERL_REWARD_MANAGERS)
