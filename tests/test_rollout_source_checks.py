"""A selecting job whose rollouts would not be sampled now from α is refused before any GPU work: verl's rollout skip
(replays an earlier run's dump) and a ``__do_sample__`` column in the training data (greedy rows under α's
temperature-1 log-probs)."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError

from _overrides import shipped_config, validate_as_main_ppo, verl_config


@pytest.mark.parametrize("skip", ["skip.rollout.enable", "skip.rollout_tq.enable", "skip.async_rollout.enable"])
def test_verls_rollout_skip_is_refused_in_a_selecting_job(skip):
    with pytest.raises(OffGRPOConfigError, match=(
            rf"^{re.escape(skip)}=true replays the rollouts and log-probs an earlier run dumped instead of sampling them "
            r"from vLLM, so α would not be the policy this run serves \(the loss's r' and the served-policy guard read "
            rf"it\): set {re.escape(skip)}=false.$")):
        validate_as_main_ppo(shipped_config("algorithm.off_grpo.rollout_schedule=per_step", f"{skip}=true"))
    validate_as_main_ppo(verl_config(f"{skip}=true"))  # plain verl: verl's feature, untouched


def test_training_data_with_a_do_sample_column_is_refused(tmp_path):
    """verl's V1 agent loop pops ``__do_sample__`` from each prompt and samples false rows greedily."""
    rows = {"data_source": ["openai/gsm8k"] * 1024, "prompt": [[{"role": "user", "content": "1+1?"}]] * 1024,
            "__do_sample__": [True, False] * 512}  # a batch of the shipped config's 1 024 prompts
    train = tmp_path / "train.parquet"
    pq.write_table(pa.table(rows), train)
    with pytest.raises(OffGRPOConfigError, match=(
            rf"^data.train_files: {re.escape(str(train))} has a __do_sample__ column: verl's V1 agent loop samples the "
            r"rows where it is false greedily")):
        validate_as_main_ppo(shipped_config(f"data.train_files={train}"))
    del rows["__do_sample__"]
    pq.write_table(pa.table(rows), train)
    validate_as_main_ppo(shipped_config(f"data.train_files={train}"))


def test_an_explicit_windows_own_line_for_the_skip_comes_first():
    """The window cannot skip rollouts after its one generation phase: its line, with per_step as a way out."""
    with pytest.raises(OffGRPOConfigError, match=(
            r"^algorithm.off_grpo.rollout_schedule=window cannot skip rollouts after the window's one generation phase: "
            r"set skip.rollout_tq.enable=false, or algorithm.off_grpo.rollout_schedule=per_step.$")):
        validate_as_main_ppo(shipped_config("algorithm.off_grpo.rollout_schedule=window",
                                            "algorithm.off_grpo.sync_period=4", "skip.rollout_tq.enable=true"))
