"""Edges of "installed but not selected: plain verl, unchanged" (found by an audit), through verl's real entry points.

A plain verl GRPO job whose driver's shell exports only ``VERL_OFFGRPO_FINAL_OUTPUTS=1`` (no ``VERL_OFFGRPO_JOB``):
its Ray processes inherit the variable, but the only reader, :mod:`verl_offgrpo.patches.final_outputs`, installs
nothing without ``VERL_OFFGRPO_JOB=1`` (test_final_outputs.py), so the job runs as plain verl. verl's own
``validate_config`` accepts it; the plugin must not refuse it, and says in one warning that the variable does nothing.
"""

import logging

import pytest

import verl  # noqa: F401  (loads the plugin)
from _overrides import validate_as_main_ppo, verl_config
from verl_offgrpo.patches import FINAL_OUTPUTS_ENV, JOB_ENV, PatchError
from verl_offgrpo.patches import final_outputs

LOGGER = "verl_offgrpo.patches.validate_config"


def test_final_outputs_mark_alone_does_nothing_in_a_plain_jobs_workers(monkeypatch):
    """What the job's Ray processes do with the inherited variable: nothing (the premise of the test below)."""
    from _post_import_hooks import install_leaves_a_hook

    assert install_leaves_a_hook(final_outputs, {FINAL_OUTPUTS_ENV: "1"}, monkeypatch) is False


def test_a_plain_job_with_only_the_final_outputs_mark_exported_runs_as_plain_verl(monkeypatch, caplog, ray_env):
    monkeypatch.delenv(JOB_ENV, raising=False)
    monkeypatch.setenv(FINAL_OUTPUTS_ENV, "1")
    config = verl_config()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(config)  # plain verl accepts it: so must verl with the plugin installed
    told = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(told) == 1 and told[0].startswith(f"verl-offgrpo: {FINAL_OUTPUTS_ENV}=1 is set") and "no effect" in told[0]
    assert JOB_ENV not in ray_env.PPO_RAY_RUNTIME_ENV["env_vars"]
    assert FINAL_OUTPUTS_ENV not in ray_env.PPO_RAY_RUNTIME_ENV["env_vars"]


def test_a_plain_job_with_the_job_mark_exported_is_still_refused(monkeypatch, ray_env):
    """VERL_OFFGRPO_JOB=1 does change a plain job's workers (every patch installs): that refusal stays."""
    monkeypatch.setenv(JOB_ENV, "1")
    monkeypatch.setenv(FINAL_OUTPUTS_ENV, "1")
    with pytest.raises(PatchError, match=r"^verl-offgrpo: VERL_OFFGRPO_JOB=1 is set"):
        validate_as_main_ppo(verl_config())


# ----------------------------------------------------------------------- partial selection: one line, not silence
def test_a_plugin_knob_that_does_not_resolve_in_the_driver_gets_one_line(monkeypatch, caplog, ray_env):
    """``+algorithm.off_grpo.sync_period=${oc.env:V}`` with V unset: the selection test cannot read it, so the job is
    left to verl (as plain verl would run it: test_patches.py), but not in silence: verl's validate_config passes and
    its TaskRunner stops on the value only after Ray started, or, where V is set only in the job's Ray env, trains
    plain verl with the knob ignored. One warning names the value and says so."""
    monkeypatch.delenv("OFFGRPO_AUDIT_UNSET", raising=False)
    config = verl_config("+algorithm.off_grpo.sync_period=${oc.env:OFFGRPO_AUDIT_UNSET}")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(config)  # verl's outcome: passes
    told = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(told) == 1
    assert told[0].startswith("verl-offgrpo: algorithm.off_grpo.sync_period=${oc.env:OFFGRPO_AUDIT_UNSET} does not "
                              "resolve") and "cannot tell whether this job selects it" in told[0]
    assert JOB_ENV not in ray_env.PPO_RAY_RUNTIME_ENV["env_vars"]


def test_a_plain_config_with_nothing_of_the_plugins_stays_silent_on_an_unresolvable_key(monkeypatch, caplog, ray_env):
    """verl's own key with a ``${...}`` that does not resolve, in a config with nothing of the plugin's: verl's alone
    (verl's validate_config passes it; the estimator and loss keys verl itself resolves before or inside it)."""
    monkeypatch.delenv("OFFGRPO_AUDIT_UNSET", raising=False)
    config = verl_config("trainer.v1.trainer_mode=${oc.env:OFFGRPO_AUDIT_UNSET}")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        validate_as_main_ppo(config)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("verl_offgrpo")] == []


def test_the_plugins_v1_mode_on_the_v0_trainer_without_its_manager_is_not_said_to_apply(caplog, ray_env):
    """``trainer.use_v1=false`` with ``trainer.v1.trainer_mode=off_grpo_sync`` (what the shipped yaml gives a v0 job)
    over verl's GRPO and without the plugin's checkpoint manager: the mode selects the plugin (its worker and vLLM
    patches go on) but v0 never reads it, and no lagged sync runs. The one line must not say its trainer applies."""
    config = verl_config("trainer.use_v1=false", "trainer.v1.trainer_mode=off_grpo_sync")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="verl_offgrpo"):
        validate_as_main_ppo(config)
    told = [r.getMessage() for r in caplog.records if "not the plugin's" in r.getMessage()]
    assert len(told) == 1
    assert "only its trainer and vLLM settings apply" not in told[0]
    assert "checkpoint_manager_class=verl_offgrpo.sync.lagged_manager.LaggedCheckpointManager" in told[0]
