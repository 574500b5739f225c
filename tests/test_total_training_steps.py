"""trainer.total_training_steps is read by the plugin (the window's length, the "period spans the run" warning): a
quoted number or a non-integer there was read as unset, silently, while verl takes it as written (a string then
fails its first step's ``global_steps >= total_training_steps``, after Ray and vLLM started). Like the other verl
counts the plugin reads, it must be one line before any GPU work (found by a config fuzz)."""

import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError
from verl_offgrpo.config.validate import validate_off_grpo_config

from _overrides import shipped_config

LAG = "algorithm.off_grpo.sync_period=4"


@pytest.mark.parametrize("value, said", [("'10'", "drop the quotes"), ("2.5", "must be an integer >= 1"),
                                         ("0", "must be an integer >= 1"), ("abc", "must be an integer >= 1")])
def test_bad_total_training_steps_is_one_line(value, said):
    with pytest.raises(OffGRPOConfigError) as err:
        validate_off_grpo_config(shipped_config(LAG, f"trainer.total_training_steps={value}"))
    assert str(err.value).startswith("trainer.total_training_steps") and said in str(err.value)


@pytest.mark.parametrize("value", ["null", "10"])
def test_unset_or_integer_total_training_steps_passes(value):
    validate_off_grpo_config(shipped_config(LAG, f"trainer.total_training_steps={value}"))
