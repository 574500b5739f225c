"""verl 0.9.1's legacy reward keys (``custom_reward_function``, ``reward_model``, ``sandbox_fusion`` at the top
level) are read nowhere by ``main_ppo``: a selecting job that sets one is refused in one line naming the key verl
reads; plain verl is left alone."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError
from verl_offgrpo.config.legacy_reward_keys import RENAMED, verls_key_for

from _overrides import shipped_config, validate_as_main_ppo, verl_config


def test_verls_main_ppo_reads_the_reward_section_only():
    """What the refusal stands on: verl's reward function loader reads ``reward.custom_reward_function``, so a
    legacy ``custom_reward_function.path`` leaves it None (verl's built-in scorer); verl migrates the legacy keys only
    in ``migrate_legacy_reward_impl``, whose mapping :data:`RENAMED` follows."""
    from verl.experimental.reward_loop import migrate_legacy_reward_impl
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = verl_config("custom_reward_function.path=pkg://verl_offgrpo.rewards",
                         "custom_reward_function.name=compute_score")
    assert get_custom_reward_fn(config) is None
    legacy = {"reward_model.num_workers": 3, "reward_model.reward_manager": "dapo", "reward_model.enable": True,
              "reward_model.model.path": "/m", "reward_model.rollout.name": "vllm", "custom_reward_function.path": "/r.py",
              "sandbox_fusion.url": "http://x"}
    config = verl_config(*(f"{k}={v}" if "." in k and not k.startswith("sandbox") else f"+{k}={v}"
                           for k, v in legacy.items()))
    migrated = migrate_legacy_reward_impl(config)
    for key, value in legacy.items():
        assert OmegaConf.select(migrated, verls_key_for(key)) == value, key


@pytest.mark.parametrize("override, says", [
    ("custom_reward_function.path=pkg://verl_offgrpo.rewards",
     "custom_reward_function.path='pkg://verl_offgrpo.rewards' is one of verl's legacy reward keys, which verl 0.9.1's "
     "main_ppo ignores (it would train without it): set reward.custom_reward_function.path instead."),
    ("reward_model.reward_manager=dapo", "reward_model.reward_manager='dapo' is one of verl's legacy reward keys, which "
     "verl 0.9.1's main_ppo ignores (it would train without it): set reward.reward_manager.name instead."),
    ("reward_model.model.trust_remote_code=true", "reward_model.model.trust_remote_code=True is one of verl's legacy "
     "reward keys, which verl 0.9.1's main_ppo ignores (it would train without it): it has no counterpart under "
     "reward.; drop it."),
])
def test_a_selecting_job_setting_a_legacy_key_is_refused_in_one_line(override, says):
    with pytest.raises(OffGRPOConfigError, match=f"^{__import__('re').escape(says)}$"):
        validate_as_main_ppo(shipped_config(override))
    with pytest.raises(OffGRPOConfigError, match=r"set reward.custom_reward_function.path instead. \(1 more legacy key "
                                                 r"set.\)$"):
        validate_as_main_ppo(shipped_config("custom_reward_function.path=/r.py", "custom_reward_function.name=f"))


def test_the_yamls_nulls_plain_verl_and_keys_verl_does_not_define_are_left_alone():
    validate_as_main_ppo(shipped_config())  # every legacy value null
    validate_as_main_ppo(shipped_config("+reward_model.tau=0.5"))  # not verl's: another package's key
    validate_as_main_ppo(verl_config("custom_reward_function.path=pkg://verl_offgrpo.rewards",
                                     "custom_reward_function.name=compute_score"))
    assert set(RENAMED) >= {"custom_reward_function.", "reward_model.reward_manager", "sandbox_fusion."}


def test_an_empty_legacy_list_is_left_alone():
    validate_as_main_ppo(shipped_config("reward_model.rollout.cudagraph_capture_sizes=[]"))
    with pytest.raises(OffGRPOConfigError, match=r"^reward_model.rollout.cudagraph_capture_sizes=\[8\] .* set "
                                                 r"reward.reward_model.rollout.cudagraph_capture_sizes instead."):
        validate_as_main_ppo(shipped_config("reward_model.rollout.cudagraph_capture_sizes=[8]"))



@pytest.mark.parametrize("override", ["+reward_model.reward_kwargs.max_resp_len=4096",
                                      "+reward_model.reward_kwargs={max_resp_len:4096}"])
def test_reward_kwargs(override):
    with pytest.raises(OffGRPOConfigError, match=r"^reward_model.reward_kwargs.* set reward.reward_kwargs"):
        validate_as_main_ppo(shipped_config(override))



def test_sandbox_fusion():
    with pytest.raises(OffGRPOConfigError, match=r"^sandbox_fusion.url='http://x:8080/run_code' is one of verl's legacy "
                                                 r"reward keys.* set reward.sandbox_fusion.url instead.$"):
        validate_as_main_ppo(shipped_config("sandbox_fusion.url=http://x:8080/run_code"))
