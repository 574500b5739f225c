"""Startup checks a newcomer trips over, through verl's real ``validate_config`` (the plugin's wrap): a
misspelt estimator or loss fails before Ray instead of after the first rollout, and a misspelt V1 trainer mode
instead of inside Ray; i = 0 is refused; an error for a config not composed from the plugin's yaml points at it."""

from __future__ import annotations

import logging

import pytest

from verl_offgrpo.config import OffGRPOConfigError

from _overrides import shipped_config, verl_config
from _overrides import validate_as_main_ppo as _validate

HINT = '--config-name off_grpo_trainer'


@pytest.mark.parametrize("override, message", [
    ("algorithm.adv_estimator=off-grpo",
     "algorithm.adv_estimator='off-grpo' is not a registered advantage estimator: "
     "did you mean algorithm.adv_estimator=off_grpo?"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=offgrpo",
     "actor_rollout_ref.actor.policy_loss.loss_mode='offgrpo' is not a registered policy loss: "
     "did you mean actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo?"),
    ("algorithm.adv_estimator=red-drop", "did you mean algorithm.adv_estimator=red_drop?"),
    ("algorithm.adv_estimator=GRPO", "did you mean algorithm.adv_estimator=grpo?"),
    ("actor_rollout_ref.actor.ppo_epochs=0", "actor_rollout_ref.actor.ppo_epochs=0 is i, the passes over each batch"),
    # the paper's method names: the knobs of the rec loss that build them
    ("actor_rollout_ref.actor.policy_loss.loss_mode=red_weight",
     "loss_mode='red_weight' is not a registered policy loss: RED-Weight is a weight of the rec loss: set "
     "actor_rollout_ref.actor.policy_loss.loss_mode=rec actor_rollout_ref.actor.policy_loss.rec.weight=red_weight"),
    ("algorithm.adv_estimator=RED-Weight", "RED-Weight is a weight of the rec loss"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=rec_oneside_nois",
     "the REC variants are the rec loss's knobs: set actor_rollout_ref.actor.policy_loss.loss_mode=rec and choose"),
])  # fmt: skip
def test_a_typo_or_no_pass_fails_at_startup_in_one_line(override, message, ray_env):
    with pytest.raises(OffGRPOConfigError) as err:
        _validate(shipped_config(override))
    text = str(err.value)
    assert message in text and "\n" not in text
    assert HINT not in text  # composed from the plugin's yaml: nothing to point at


@pytest.mark.parametrize("override, told", [
    ("algorithm.adv_estimator=my_team_baseline_v7",
     "algorithm.adv_estimator='my_team_baseline_v7' is not a registered advantage estimator in this process;"),
    # a custom loss named after a built-in one, e.g. registered by actor_rollout_ref.model.external_lib,
    # which verl imports only in the workers, after this check
    ("actor_rollout_ref.actor.policy_loss.loss_mode=vanilla_v2",
     "actor_rollout_ref.actor.policy_loss.loss_mode='vanilla_v2' is not a registered policy loss in this process "
     "(did you mean vanilla?);"),
    ("algorithm.adv_estimator=grpo_mean", "algorithm.adv_estimator='grpo_mean' is not a registered advantage"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=recursive_kl", "actor_rollout_ref.actor.policy_loss.loss_mode="
     "'recursive_kl' is not a registered policy loss in this process"),  # "rec…" but no REC variant
])  # fmt: skip
def test_an_unknown_name_is_a_warning_not_an_error(override, told, ray_env, caplog):
    """A custom estimator or loss may be registered only where it runs: told, not refused."""
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.config.names"):
        _validate(shipped_config(override))
    said = [r.getMessage() for r in caplog.records if r.name == "verl_offgrpo.config.names"]
    assert len(said) == 1 and said[0].startswith(told)


def test_registered_names_pass_silently(ray_env, caplog):
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.config.names"):
        _validate(shipped_config("actor_rollout_ref.actor.policy_loss.loss_mode=rec"))
    assert not [r for r in caplog.records if r.name == "verl_offgrpo.config.names"]


def test_an_error_for_verls_own_yaml_points_at_the_plugins_where_that_yaml_would_fix_it(ray_env):
    with pytest.raises(OffGRPOConfigError) as err:  # loss_mode: the plugin's yaml sets it
        _validate(verl_config("algorithm.adv_estimator=off_grpo", "+algorithm.off_grpo.sync_period=10"))
    text = str(err.value)
    assert text.startswith("algorithm.off_grpo.sync_period=10 trains on samples of a lagged policy")
    assert text.endswith(f'--config-path "$(python -m verl_offgrpo config-dir)" {HINT}.)') and "\n" not in text
    with pytest.raises(OffGRPOConfigError) as err:  # rollout.n: the plugin's yaml would not fix it
        _validate(verl_config("algorithm.adv_estimator=off_grpo", "actor_rollout_ref.rollout.n=1"))
    assert str(err.value).startswith("actor_rollout_ref.rollout.n=1") and HINT not in str(err.value)


def test_the_ring_error_says_what_to_set(ray_env):
    with pytest.raises(OffGRPOConfigError, match=r"set actor_rollout_ref\.actor\.policy_loss\.rec\.eps_low_prime "
                                                 r"in \(0\.2, 1\] \(the defaults are 0\.6/2\.0"):
        _validate(shipped_config("actor_rollout_ref.actor.policy_loss.loss_mode=rec",
                                 "actor_rollout_ref.actor.policy_loss.rec.clip_mode=ring",
                                 "actor_rollout_ref.actor.policy_loss.rec.eps_low_prime=0.1"))
    # the ring over the paper's wider band (0.6, 2.0): both sides in one line, not one per run
    with pytest.raises(OffGRPOConfigError) as err:
        _validate(shipped_config("actor_rollout_ref.actor.policy_loss.loss_mode=rec",
                                 "actor_rollout_ref.actor.policy_loss.rec.clip_mode=ring",
                                 "actor_rollout_ref.actor.clip_ratio_low=0.6", "actor_rollout_ref.actor.clip_ratio_high=2.0"))
    assert "eps_low_prime=0.6 must exceed ε_low=0.6; " in str(err.value)
    assert "eps_high_prime=2.0 must exceed ε_high=2.0" in str(err.value)


RING = ("actor_rollout_ref.actor.policy_loss.loss_mode=rec", "actor_rollout_ref.actor.policy_loss.rec.clip_mode=ring")


@pytest.mark.parametrize("low", ["1.0", "1.5"])
def test_the_ring_error_suggests_a_fix_that_can_work_when_eps_low_leaves_no_room(low, ray_env):
    """ε′_low lies in (ε_low, 1]: with ε_low ≥ 1 no ε′_low exceeds it, so the fix is a lower ε_low."""
    with pytest.raises(OffGRPOConfigError) as err:
        _validate(shipped_config(*RING, f"actor_rollout_ref.actor.clip_ratio_low={low}"))
    text = str(err.value)
    assert (f"eps_low_prime=0.6 must exceed ε_low={float(low)}: lower actor_rollout_ref.actor.clip_ratio_low below "
            "actor_rollout_ref.actor.policy_loss.rec.eps_low_prime=0.6") in text
    assert "clip_mode=one-side" in text and "eps_low_prime above" not in text and "\n" not in text
    _validate(shipped_config(*RING, "actor_rollout_ref.actor.clip_ratio_low=0.5"))  # the fix it names passes


# ----------------------------------------------------------------------------- the V1 trainer mode
MODE = "trainer.v1.trainer_mode"


@pytest.mark.parametrize("overrides, message", [
    ((f"{MODE}=off_grpo_synch", "algorithm.off_grpo.zero_var_mask=false"),
     f"{MODE}='off_grpo_synch' is not a registered V1 trainer mode: did you mean {MODE}=off_grpo_sync? (registered: "),
    # the default zero_var_mask=true needs off_grpo_sync too: the unknown mode is said first, not the mask
    ((f"{MODE}=off_grpo_synch",), f"{MODE}='off_grpo_synch' is not a registered V1 trainer mode: did you mean"),
    ((f"{MODE}=async",), f"{MODE}='async' is not a registered V1 trainer mode: did you mean {MODE}=colocate_async "
                         "(or separate_async, sync)?"),
    ((f"{MODE}=async", "algorithm.off_grpo.sync_period=4"), f"{MODE}='async' is not a registered V1 trainer mode"),
    ((f"{MODE}=lagged",), f"{MODE}='lagged' is not a registered V1 trainer mode (registered: "),
    # an explicit null is not verl's default "sync": get_trainer_cls(None) would fail in the TaskRunner
    ((f"{MODE}=null", "algorithm.off_grpo.zero_var_mask=false"), f"{MODE}=None is not a registered V1 trainer mode"),
])  # fmt: skip
def test_an_unknown_trainer_mode_fails_at_startup_first(overrides, message, ray_env):
    """verl resolves the mode only in Ray's TaskRunner (get_trainer_cls): unknown, it fails before Ray, in
    one line listing verl's registry."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    with pytest.raises(OffGRPOConfigError) as err:
        _validate(shipped_config(*overrides))
    text = str(err.value)
    assert text.startswith(message) and "\n" not in text
    assert f"(registered: {', '.join(sorted(TRAINER_REGISTRY))};" in text and "off_grpo_sync" in TRAINER_REGISTRY


def test_the_trainer_modes_are_read_from_verls_registry(ray_env, monkeypatch):
    """A mode registered with verl (another plugin's) passes the mode check; the v0 trainer ignores the mode."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    with pytest.raises(OffGRPOConfigError, match="'my_mode' is not a registered V1 trainer mode"):
        _validate(shipped_config(f"{MODE}=my_mode", "algorithm.off_grpo.zero_var_mask=false"))
    monkeypatch.setitem(TRAINER_REGISTRY, "my_mode", TRAINER_REGISTRY["sync"])
    _validate(shipped_config(f"{MODE}=my_mode", "algorithm.off_grpo.zero_var_mask=false"))
    _validate(shipped_config("trainer.use_v1=false", f"{MODE}=no_such_mode"))


def test_compose_says_an_unknown_trainer_mode_in_one_line(capsys):
    """The newcomer's trial: compose exited 0 for a mode that fails only inside Ray."""
    from verl_offgrpo.cli.main import main

    from _overrides import BASE

    for mode in ("off_grpo_synch", "async"):
        assert main(["compose", *BASE, "actor_rollout_ref.rollout.name=vllm", f"{MODE}={mode}",
                     "algorithm.off_grpo.zero_var_mask=false"]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("off_grpo config error")]
        assert len(err) == 1 and f"{MODE}={mode!r} is not a registered V1 trainer mode: did you mean" in err[0]


@pytest.mark.parametrize("overrides, said", [
    ((f"{MODE}=colocate_async", "algorithm.off_grpo.zero_var_mask=false", "algorithm.off_grpo.final_outputs_only=true"),
     "with trainer.v1.trainer_mode='colocate_async': only sync and off_grpo_sync pause vLLM strictly between rollouts"),
    ((f"{MODE}=separate_async", "algorithm.off_grpo.zero_var_mask=false", "algorithm.off_grpo.sync_period=4"),
     "(got 'separate_async'); only off_grpo_sync holds α in vLLM for v steps; 'separate_async' syncs on its own "
     "schedule."),
])  # fmt: skip
def test_a_registered_other_mode_is_named_not_called_async(overrides, said, ray_env):
    with pytest.raises(OffGRPOConfigError) as err:
        _validate(shipped_config(*overrides))
    assert said in str(err.value) and "async modes" not in str(err.value) and "asynchronous" not in str(err.value)


# ----------------------------------------------------------------------------- near misses of the plugin's names
@pytest.mark.parametrize("override, message", [
    ("algorithm.adv_estimator=redrop", "algorithm.adv_estimator='redrop' is not a registered advantage estimator: "
                                       "did you mean algorithm.adv_estimator=red_drop? (the plugin's;"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=off_grop",
     "actor_rollout_ref.actor.policy_loss.loss_mode='off_grop' is not a registered policy loss: did you mean "
     "actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo? (the plugin's;"),
    ("algorithm.adv_estimator=off_gpro", "algorithm.adv_estimator='off_gpro' is not a registered advantage estimator: "
                                         "did you mean algorithm.adv_estimator=off_grpo?"),
])  # fmt: skip
def test_a_near_miss_of_the_plugins_name_fails_at_startup(override, message, ray_env, caplog):
    """In a job that selects the plugin (the other name is its), a misspelt plugin name fails in one line,
    not as a warning followed by verl's failure after the first rollout (nor a note on verl's 'redrop' advantage)."""
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        with pytest.raises(OffGRPOConfigError) as err:
            _validate(shipped_config(override))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


@pytest.mark.parametrize("name", ["off_grpo_v2", "off_gspo", "off_ppo"])
def test_a_name_built_on_the_plugins_or_a_changed_letter_stays_a_warning(ray_env, caplog, name):
    """off_grpo_v2, off_gspo, off_ppo may be custom losses registered only in the workers (external_lib): told,
    not refused; only a slip (case, separators, a letter left out, added or swapped) is refused."""
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo.config.names"):
        _validate(shipped_config(f"actor_rollout_ref.actor.policy_loss.loss_mode={name}"))
    assert f"'{name}' is not a registered policy loss in this process" in caplog.text


# ------------------------------------------------ a config that does not select the plugin (verl's own yaml)
@pytest.mark.parametrize("overrides, message", [
    (["algorithm.adv_estimator=offgrpo"],
     "algorithm.adv_estimator='offgrpo' is not a registered advantage estimator: "
     "did you mean algorithm.adv_estimator=off_grpo? (verl would fail at the first advantage, after the first rollout)"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=Off-GRPO"],
     "actor_rollout_ref.actor.policy_loss.loss_mode='Off-GRPO' is not a registered policy loss: "
     "did you mean actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo?"),
    (["algorithm.adv_estimator=red-drop"], "did you mean algorithm.adv_estimator=red_drop? (verl would fail"),
    (["actor_rollout_ref.actor.policy_loss.loss_mode=REC"], "did you mean actor_rollout_ref.actor.policy_loss.loss_mode=rec?"),
    # verl's val_only stops after the validation only where val_before_train runs it
    (["algorithm.adv_estimator=offgrpo", "trainer.val_only=true", "trainer.val_before_train=false"],
     "did you mean algorithm.adv_estimator=off_grpo?"),
])  # fmt: skip
def test_a_mistyped_plugin_name_in_verls_own_yaml_fails_at_startup(overrides, message, ray_env):
    """It selects nothing, so without this verl would run Ray, load the model and roll out once before its
    lookup fails."""
    from verl.trainer.ppo import core_algos

    config = verl_config(*overrides)
    name = (config.algorithm.adv_estimator if "adv_estimator" in overrides[0]
            else config.actor_rollout_ref.actor.policy_loss.loss_mode)
    assert name not in {**core_algos.ADV_ESTIMATOR_REGISTRY, **core_algos.POLICY_LOSS_REGISTRY}  # verl would fail
    with pytest.raises(OffGRPOConfigError) as err:
        _validate(config)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("overrides", [
    ["algorithm.adv_estimator=GRPO"],  # verl's own name mistyped: verl's business
    ["actor_rollout_ref.actor.policy_loss.loss_mode=off_gspo"],  # a changed letter: may be a custom loss
    ["algorithm.adv_estimator=off_grpo_v2"], ["actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo2"],  # built on it
    ["algorithm.adv_estimator=off_grop"], ["algorithm.adv_estimator=redrop"],  # a letter left out or swapped
    ["actor_rollout_ref.actor.policy_loss.loss_mode=red_weight"],  # the paper's name: may be someone's loss
    # a module verl imports in its TaskRunner and workers, after this check, may register it
    ["algorithm.adv_estimator=offgrpo", "actor_rollout_ref.model.external_lib=my_team.losses"],
    # verl validates and stops, looking up neither name: val_only as verl reads it (truthy)
    ["algorithm.adv_estimator=offgrpo", "trainer.val_only=true"], ["algorithm.adv_estimator=offgrpo", "trainer.val_only=1"],
    ["algorithm.adv_estimator=offgrpo", "trainer.val_only='true'"],
    ["algorithm.adv_estimator=offgrpo", "~trainer.val_before_train", "trainer.val_only=true"],  # verl's default: true
    ["algorithm.adv_estimator=null"], ["algorithm.adv_estimator=5"],  # no name at all: verl's business
    ["actor_rollout_ref.model.external_lib=${oc.env:OFFGRPO_UNSET_LIB}"],  # resolves only where verl imports it
])  # fmt: skip
def test_other_unregistered_names_in_verls_own_yaml_are_left_to_verl(overrides, ray_env, caplog):
    with caplog.at_level(logging.WARNING, logger="verl_offgrpo"):
        _validate(verl_config(*overrides))  # verl's checks pass, as without the plugin
    assert not [r for r in caplog.records if r.name.startswith("verl_offgrpo")]


def test_a_near_miss_that_is_registered_is_someone_elses_name(ray_env, monkeypatch):
    """``offgrpo`` registered in the driver by another package: a plain job verl runs, not a typo."""
    from verl.trainer.ppo import core_algos

    monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, "offgrpo", core_algos.ADV_ESTIMATOR_REGISTRY["grpo"])
    _validate(verl_config("algorithm.adv_estimator=offgrpo"))


def test_a_mistyped_plugin_name_is_refused_where_the_selection_cannot_be_read(ray_env, monkeypatch):
    monkeypatch.delenv("OFFGRPO_UNSET_V", raising=False)
    config = verl_config("algorithm.adv_estimator=offgrpo", "+algorithm.off_grpo.sync_period=${oc.env:OFFGRPO_UNSET_V}")
    with pytest.raises(OffGRPOConfigError, match=r"did you mean algorithm\.adv_estimator=off_grpo\?"):
        _validate(config)
