"""A data or model path written with ``~`` whose file is under the home directory: verl 0.9.1 reads it as written
and fails after Ray started; a selecting job is refused in one line that names the path to write."""

from __future__ import annotations

import os
import re

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError

from _overrides import shipped_config, validate_as_main_ppo, verl_config


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home directory holding d/train.parquet (a real one) and d/test.parquet, the working directory elsewhere."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    home = tmp_path / "home"
    (home / "d").mkdir(parents=True)
    for name in ("train", "test"):
        rows = {"data_source": ["openai/gsm8k"] * 1024, "prompt": ["1+1?"] * 1024}  # the shipped config's one batch
        pq.write_table(pa.table(rows), home / "d" / f"{name}.parquet")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return home


def test_verl_reads_a_tilde_data_path_as_written(home):
    """What the check stands on: verl 0.9.1's dataset reading (``copy_to_local``, then ``datasets.load_dataset``, as
    ``RLHFDataset`` does) does not find ~/d/train.parquet, though it is there, and finds the expanded path."""
    import datasets
    from verl.utils.fs import copy_to_local

    with pytest.raises(FileNotFoundError):
        datasets.load_dataset("parquet", data_files=copy_to_local(src="~/d/train.parquet", cache_dir=str(home)))
    found = datasets.load_dataset("parquet", data_files=copy_to_local(src=str(home / "d" / "train.parquet"),
                                                                      cache_dir=str(home)))
    assert found["train"].num_rows == 1024


def test_a_tilde_path_to_a_file_under_home_is_refused_with_the_path_to_write(home):
    line = (f"data.train_files=~/d/train.parquet: verl does not expand ~ in paths (it would look for "
            f"./~/d/train.parquet and fail after Ray started): write {home}/d/train.parquet (or "
            "$HOME/d/train.parquet in a shell script).")
    with pytest.raises(OffGRPOConfigError, match=f"^{re.escape(line)}$"):
        validate_as_main_ppo(shipped_config("data.train_files='~/d/train.parquet'",
                                            f"data.val_files={home}/d/test.parquet"))
    # validation files too (verl creates that dataset whether or not the job validates), in a list, and a glob
    for value in ("['~/d/test.parquet']", "'~/d/t*.parquet'"):
        with pytest.raises(OffGRPOConfigError, match=r"^data.val_files=~/d/t[^:]*: verl does not expand ~"):
            validate_as_main_ppo(shipped_config(f"data.train_files={home}/d/train.parquet", "trainer.test_freq=-1",
                                                "trainer.val_before_train=false", f"data.val_files={value}"))
    validate_as_main_ppo(shipped_config(f"data.train_files={home}/d/train.parquet",
                                        f"data.val_files={home}/d/test.parquet"))


def test_paths_verl_finds_or_misses_anyway_and_a_dataset_class_of_ones_own_are_left_alone(home, tmp_path):
    """A path missing under home too is verl's to report (as every missing data file); a ``./~`` directory that
    exists is what verl reads; a dataset class of the user's own may expand ``~`` itself."""
    validate_as_main_ppo(shipped_config("data.train_files='~/nowhere/train.parquet'",
                                        f"data.val_files={home}/d/test.parquet"))
    (tmp_path / "work" / "~" / "d").mkdir(parents=True)
    (tmp_path / "work" / "~" / "d" / "train.parquet").write_bytes(b"")
    validate_as_main_ppo(shipped_config("data.train_files='~/d/train.parquet'", f"data.val_files={home}/d/test.parquet"))
    (tmp_path / "work" / "~" / "d" / "train.parquet").unlink()
    validate_as_main_ppo(shipped_config("data.train_files='~/d/train.parquet'", f"data.val_files={home}/d/test.parquet",
                                        "+data.custom_cls.path=my_dataset.py", "+data.custom_cls.name=MyDataset"))


def test_a_job_that_does_not_select_the_plugin_is_not_checked(home):
    """Plain verl (its own yaml, and the plugin's with verl's estimator, loss and trainer mode): the plugin leaves
    the path to verl."""
    validate_as_main_ppo(verl_config("data.train_files='~/d/train.parquet'"))
    validate_as_main_ppo(shipped_config("algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
                                        "trainer.v1.trainer_mode=sync", "algorithm.rollout_correction.rollout_is=null",
                                        "data.train_files='~/d/train.parquet'"))


def test_a_tilde_model_path_is_refused_too(home):
    """verl's ``HFModelConfig`` hands ``~/models/m`` to transformers as written, which takes it for a hub id and
    refuses it; the tokenizer's and the HF config's paths are read the same way."""
    from transformers import AutoConfig
    from verl.utils.fs import copy_to_local

    (home / "models" / "m").mkdir(parents=True)
    (home / "models" / "m" / "config.json").write_text('{"model_type": "gpt2"}')
    assert AutoConfig.from_pretrained(str(home / "models" / "m")).model_type == "gpt2"
    with pytest.raises(OSError):
        AutoConfig.from_pretrained(copy_to_local("~/models/m"), local_files_only=True)
    data = (f"data.train_files={home}/d/train.parquet", f"data.val_files={home}/d/test.parquet")
    for key in ("path", "tokenizer_path", "hf_config_path", "lora_adapter_path", "lora.adapter_path"):
        override = f"actor_rollout_ref.model.{key}='~/models/m'"
        with pytest.raises(OffGRPOConfigError, match=rf"^actor_rollout_ref.model.{re.escape(key)}=~/models/m: verl does "
                                                     rf"not expand ~ in paths .*: write {re.escape(str(home))}/models/m "):
            validate_as_main_ppo(shipped_config(*data, override))
    # a dataset class of one's own reads its own data paths, not the model's
    with pytest.raises(OffGRPOConfigError, match=r"^actor_rollout_ref.model.path=~/models/m"):
        validate_as_main_ppo(shipped_config("data.train_files='~/d/train.parquet'", "actor_rollout_ref.model.path='~/models/m'",
                                            "+data.custom_cls.path=my_dataset.py", "+data.custom_cls.name=MyDataset"))


def test_a_critics_and_a_reward_models_tilde_paths_where_verl_loads_them(home):
    """verl loads a critic (``need_critic``: ``critic.enable``, else ``gae``) and a reward model
    (``reward.reward_model.enable``) only where they run: their ``~`` paths are refused there and left alone
    elsewhere (verl's own critic default, ``~/models/deepseek-llm-7b-chat``, is not there: left to verl)."""
    (home / "models" / "m").mkdir(parents=True)
    data = (f"data.train_files={home}/d/train.parquet", f"data.val_files={home}/d/test.parquet")
    critic = "critic.model.path='~/models/m'"
    validate_as_main_ppo(shipped_config(*data, critic))  # off_grpo runs no critic
    with pytest.raises(OffGRPOConfigError, match=r"^critic.model.path=~/models/m: verl does not expand ~"):
        validate_as_main_ppo(shipped_config(*data, critic, "critic.enable=true"))
    from verl_offgrpo.config.tilde_path_checks import keys_verl_reads

    assert "critic.model.path" in keys_verl_reads(shipped_config(*data, "algorithm.adv_estimator=gae"))
    assert "critic.model.path" not in keys_verl_reads(shipped_config(*data, "algorithm.adv_estimator=gae",
                                                                     "critic.enable=false"))
    reward = "reward.reward_model.model_path='~/models/m'"
    validate_as_main_ppo(shipped_config(*data, reward))  # no reward model runs
    assert "reward.reward_model.model_path" in keys_verl_reads(shipped_config(*data, reward, "reward.reward_model.enable=true"))


def test_a_tilde_user_path_gets_no_home_advice(home, monkeypatch):
    from verl_offgrpo.config import tilde_path_checks as t

    real = os.path.expanduser
    monkeypatch.setattr(t.os.path, "expanduser", lambda p: str(home) + p[len("~alice"):] if p.startswith("~alice") else real(p))
    config = OmegaConf.create({"data": {"train_files": "~alice/d/train.parquet"}})
    with pytest.raises(OffGRPOConfigError, match=rf"write {re.escape(str(home))}/d/train.parquet\.$"):
        t.check_paths_verl_reads(config)



def test_a_critics_tilde_tokenizer_path(home):
    (home / "models" / "m").mkdir(parents=True)
    with pytest.raises(OffGRPOConfigError, match=r"^critic.model.tokenizer_path=~/models/m: verl does not expand ~"):
        validate_as_main_ppo(shipped_config(f"data.train_files={home}/d/train.parquet",
                                            f"data.val_files={home}/d/test.parquet", "critic.enable=true",
                                            "critic.model.tokenizer_path='~/models/m'"))
