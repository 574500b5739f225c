"""Data files verl's dataset cannot read, or reads without a prompt (verl_offgrpo.config.data_file_checks), through
verl's real ``validate_config``: one line at start-up for a selecting job; a plain verl job is left alone."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import verl  # noqa: F401  (loads the plugin)
from _overrides import shipped_config, validate_as_main_ppo, verl_config
from verl_offgrpo.config import OffGRPOConfigError

PROMPT = [{"role": "user", "content": "1+1?"}]


#: rows a file here holds at least (each row repeated): one batch of the shipped config (verl's 1 024 prompts), so
#: that only the test of a short training set meets that refusal
ROWS = 1024


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) * -(-ROWS // len(rows)))
    return path


def _parquet(path, columns):
    pq.write_table(pa.table({k: v * -(-ROWS // len(v)) for k, v in columns.items()}), path)
    return path


def test_a_raw_download_without_a_prompt_column_is_refused_naming_its_columns(tmp_path, ray_env):
    raw = _jsonl(tmp_path / "train.jsonl", [{"question": "1+1?", "answer": "#### 2"}])
    with pytest.raises(OffGRPOConfigError) as err:
        validate_as_main_ppo(shipped_config(f"data.train_files={raw}"))
    assert str(err.value).startswith(
        f"data.train_files: {raw} has no 'prompt' column (data.prompt_key), where verl's dataset takes each row's "
        "prompt (it fails on that after Ray started); its columns: question, answer. Raw downloads lack it: write it with "
        "the repository's data_prep/ scripts")
    validate_as_main_ppo(shipped_config(f"data.train_files={raw}", "data.prompt_key=question"))  # the key it names


def test_a_parquet_file_is_read_by_its_schema_and_a_glob_file_by_file(tmp_path, ray_env):
    _parquet(tmp_path / "a.parquet", {"prompt": [PROMPT], "data_source": ["openai/gsm8k"]})
    validate_as_main_ppo(shipped_config(f"data.val_files={tmp_path}/a.parquet"))
    bad = _parquet(tmp_path / "b.parquet", {"question": ["1+1?"]})
    with pytest.raises(OffGRPOConfigError, match=rf"^data.val_files: {bad} has no 'prompt' column .*its columns: question\."):
        validate_as_main_ppo(shipped_config(f"data.val_files={tmp_path}/*.parquet"))


def test_a_directory_or_another_format_is_refused_as_verls_dataset_would_after_ray_started(tmp_path, ray_env):
    with pytest.raises(OffGRPOConfigError) as err:
        validate_as_main_ppo(shipped_config(f"data.train_files={tmp_path}"))
    assert str(err.value) == (
        f"data.train_files: {tmp_path} is a directory; verl's dataset reads files ending in .parquet, .json, .jsonl "
        f"only, and refuses it after Ray started: name the files in it (e.g. {tmp_path}/train.parquet, or "
        f"{tmp_path}/*.parquet).")
    (tmp_path / "train.csv").write_text("prompt\n1+1?\n")
    with pytest.raises(OffGRPOConfigError, match=r"train.csv is a file of another format; .* convert it, or write it"):
        validate_as_main_ppo(shipped_config(f"data.val_files={tmp_path}/train.csv"))


@pytest.mark.parametrize("override", ["data.train_files=/nonexistent-offgrpo/train.csv",  # not here: compose notes it
                                      "+data.custom_cls.path=/my/dataset.py"])  # the user's own dataset reads it
def test_what_cannot_be_read_here_or_is_read_by_the_users_own_class_is_left_to_verl(tmp_path, override, ray_env):
    raw = _jsonl(tmp_path / "raw.jsonl", [{"question": "1+1?"}])
    overrides = [override] if override.startswith("data.train_files") else [override, f"data.train_files={raw}"]
    validate_as_main_ppo(shipped_config(*overrides))


def test_a_plain_verl_job_with_the_same_file_is_verls_alone(tmp_path, ray_env):
    raw = _jsonl(tmp_path / "raw.jsonl", [{"question": "1+1?"}])
    validate_as_main_ppo(verl_config(f"data.train_files={raw}"))  # verl's checks pass it, as without the plugin


def test_validation_files_of_a_job_that_never_validates_are_not_read(tmp_path, ray_env):
    """verl builds that dataset without reading a prompt (no overlong filter) and never iterates it."""
    good = _parquet(tmp_path / "train.parquet", {"prompt": [PROMPT]})
    raw = _parquet(tmp_path / "raw.parquet", {"question": ["1+1?"]})
    never = ("trainer.val_before_train=false", "trainer.test_freq=-1")
    validate_as_main_ppo(shipped_config(f"data.train_files={good}", f"data.val_files={raw}", *never))
    with pytest.raises(OffGRPOConfigError, match="^data.val_files: "):  # it validates every 5 steps
        validate_as_main_ppo(shipped_config(f"data.train_files={good}", f"data.val_files={raw}", never[0],
                                            "trainer.test_freq=5"))


def test_a_jsonl_is_read_by_its_first_row_not_its_first_line(tmp_path, ray_env):
    raw = tmp_path / "train.jsonl"
    raw.write_text("\n" + json.dumps({"question": "1+1?"}) + "\n")
    with pytest.raises(OffGRPOConfigError, match=r"has no 'prompt' column .*its columns: question\."):
        validate_as_main_ppo(shipped_config(f"data.train_files={raw}"))
    rows = _jsonl(tmp_path / "rows.jsonl", [["1+1?", "2"]])  # no object: datasets' business
    validate_as_main_ppo(shipped_config(f"data.train_files={rows}"))


def test_a_glob_of_another_format_and_an_unreadable_parquet(tmp_path, ray_env):
    (tmp_path / "train.csv").write_text("prompt\n1+1?\n")
    with pytest.raises(OffGRPOConfigError, match=r"\*\.csv is a file of another format; "):
        validate_as_main_ppo(shipped_config(f"data.train_files={tmp_path}/*.csv"))
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")  # cannot be read here: left to verl
    validate_as_main_ppo(shipped_config(f"data.train_files={tmp_path}/bad.parquet"))


def test_verls_default_prompt_key_where_the_yaml_has_none(tmp_path, ray_env):
    good = _parquet(tmp_path / "train.parquet", {"prompt": [PROMPT]})
    validate_as_main_ppo(shipped_config(f"data.train_files={good}", "~data.prompt_key"))


@pytest.mark.parametrize("validating", [("trainer.val_before_train=1", "trainer.test_freq=-1"),
                                        ("trainer.val_before_train=false", "trainer.test_freq=1")])
def test_validation_files_are_read_as_verl_reads_its_switches(tmp_path, ray_env, validating):
    good = _parquet(tmp_path / "train.parquet", {"prompt": [PROMPT]})
    raw = _parquet(tmp_path / "raw.parquet", {"question": ["1+1?"]})
    with pytest.raises(OffGRPOConfigError, match="^data.val_files: "):
        validate_as_main_ppo(shipped_config(f"data.train_files={good}", f"data.val_files={raw}", *validating))


def test_a_training_set_smaller_than_one_batch_is_refused_counting_every_file_and_the_cap(tmp_path, ray_env):
    """verl's dataloader drops an incomplete batch: with fewer rows than data.train_batch_size an epoch has no step
    (verl: steps_per_epoch = 0, a division by zero after Ray started). Rows of every file count (parquet metadata,
    non-empty jsonl lines); data.train_max_samples caps them; a file not counted here (.json) leaves it to verl."""
    small = ("actor_rollout_ref.actor.ppo_mini_batch_size=1", "actor_rollout_ref.rollout.n=8")
    pq.write_table(pa.table({"prompt": [PROMPT, PROMPT]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"prompt": [PROMPT]}), tmp_path / "b.parquet")
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps({"prompt": PROMPT}) for _ in range(4)) + "\n\n")
    with pytest.raises(OffGRPOConfigError) as err:
        validate_as_main_ppo(shipped_config(f"data.train_files={tmp_path}/*.parquet", "data.train_batch_size=4", *small))
    assert str(err.value) == (
        "data.train_batch_size=4 is more than the 3 rows of data.train_files: an epoch has no step (verl's dataloader "
        "drops an incomplete batch), and verl fails on that after Ray started; lower data.train_batch_size or train on "
        "more prompts.")
    validate_as_main_ppo(shipped_config(f"data.train_files={tmp_path}/*.parquet", "data.train_batch_size=3", *small))
    both = f"data.train_files=[{tmp_path}/a.parquet,{tmp_path}/c.jsonl]"
    validate_as_main_ppo(shipped_config(both, "data.train_batch_size=6", *small))  # 2 + 4 (the blank line is none)
    with pytest.raises(OffGRPOConfigError, match=r"^data.train_batch_size=7 is more than the 6 rows of data.train_fi"):
        validate_as_main_ppo(shipped_config(both, "data.train_batch_size=7", *small))
    with pytest.raises(OffGRPOConfigError, match=r"^data.train_batch_size=6 is more than the 5 rows of "
                                                 r"data.train_files \(data.train_max_samples=5\): "):
        validate_as_main_ppo(shipped_config(both, "data.train_batch_size=6", "data.train_max_samples=5", *small))
    (tmp_path / "d.json").write_text(json.dumps([{"prompt": PROMPT}]))
    validate_as_main_ppo(shipped_config(f"data.train_files=[{tmp_path}/b.parquet,{tmp_path}/d.json]",
                                        "data.train_batch_size=4", *small))  # .json not counted: verl's
    validate_as_main_ppo(verl_config(f"data.train_files={tmp_path}/b.parquet", "data.train_batch_size=4", *small))


def test_the_short_training_set_check_counts_as_datasets_reads_and_per_trainer_batch(tmp_path, ray_env):
    """``**`` matches at any depth (as ``datasets`` expands it); a ``.jsonl`` that is not one object a line (one array)
    is left to verl; the v0 trainer's batch is its dataloader's, ``data.gen_batch_size`` where set (verl divides by
    that loader's length), the V1 trainer's ``data.train_batch_size`` (its steps_per_epoch)."""
    small = ("actor_rollout_ref.actor.ppo_mini_batch_size=1", "actor_rollout_ref.rollout.n=8")
    (tmp_path / "x").mkdir()
    for name in ("a.parquet", "x/c.parquet"):
        pq.write_table(pa.table({"prompt": [PROMPT, PROMPT]}), tmp_path / name)
    validate_as_main_ppo(shipped_config(f"data.train_files={tmp_path}/**/*.parquet", "data.train_batch_size=4", *small))
    array = tmp_path / "array.jsonl"
    array.write_text(json.dumps([{"prompt": PROMPT}] * 3) + "\n")
    validate_as_main_ppo(shipped_config(f"data.train_files={array}", "data.train_batch_size=3", *small))
    two = f"data.train_files={tmp_path}/x/c.parquet"
    v0 = ("trainer.use_v1=false", "algorithm.off_grpo.rollout_schedule=per_step")
    validate_as_main_ppo(shipped_config(two, *v0, "data.train_batch_size=4", "+data.gen_batch_size=1", *small))
    with pytest.raises(OffGRPOConfigError, match=r"^data.gen_batch_size=4 is more than the 2 rows of data.train_files: "
                                                 r".*; lower data.gen_batch_size or train on more prompts.$"):
        validate_as_main_ppo(shipped_config(two, *v0, "data.train_batch_size=1", "+data.gen_batch_size=4", *small))
