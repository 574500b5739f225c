"""Another package registering one of the plugin's names (``rec``, ``red_drop``, ...): verl 0.9.1 keeps the last
registration of a policy loss silently (``register_policy_loss``) and refuses a second estimator. The plugin
keeps the other package's function, says so on stderr, and refuses a job that names it in one line."""

import pytest
from verl.trainer.ppo import core_algos

from verl_offgrpo import plugin
from verl_offgrpo.config import OffGRPOConfigError
from verl_offgrpo.rec_loss import compute_policy_loss_rec

from _overrides import shipped_config, validate_as_main_ppo

REC = ["actor_rollout_ref.actor.policy_loss.loss_mode=rec", "algorithm.norm_adv_by_std_in_grpo=false"]


def their_rec_loss(*args, **kwargs):
    raise AssertionError("never called at startup")


def their_red_drop(*args, **kwargs):
    raise AssertionError("never called at startup")


def test_a_foreign_rec_loss_is_kept_and_a_job_naming_it_is_refused(monkeypatch, capsys):
    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "rec", their_rec_loss)
    plugin.register_algorithms(core_algos)
    assert core_algos.POLICY_LOSS_REGISTRY["rec"] is their_rec_loss
    assert f"'rec' is already registered by {__name__}.their_rec_loss, so the plugin's rec is not" in capsys.readouterr().err
    with pytest.raises(OffGRPOConfigError, match=rf"loss_mode=rec is registered in verl by {__name__}.their_rec_loss, "
                                                 "not by verl-offgrpo"):
        validate_as_main_ppo(shipped_config(*REC))


def test_a_foreign_estimator_name_is_kept_without_verls_value_error(monkeypatch, capsys):
    monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, "red_drop", their_red_drop)
    plugin.register_algorithms(core_algos)  # verl's register_adv_est would raise ValueError here
    assert core_algos.ADV_ESTIMATOR_REGISTRY["red_drop"] is their_red_drop
    assert "'red_drop' is already registered" in capsys.readouterr().err
    with pytest.raises(OffGRPOConfigError, match="adv_estimator=red_drop is registered in verl by"):
        validate_as_main_ppo(shipped_config(*REC, "algorithm.adv_estimator=red_drop"))


def test_the_plugins_own_registration_is_left_as_is(capsys):
    plugin.register_algorithms(core_algos)
    assert core_algos.POLICY_LOSS_REGISTRY["rec"] is compute_policy_loss_rec
    assert capsys.readouterr().err == ""
    validate_as_main_ppo(shipped_config(*REC))


def test_check_fails_on_a_foreign_registration(monkeypatch, capsys):
    from verl_offgrpo.cli.install_check import _Findings, _find_registrations

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "rec", their_rec_loss)
    found = _Findings(overrides=[])
    _find_registrations(found)
    assert f"policy loss rec is registered by {__name__}.their_rec_loss, not by verl-offgrpo" in found.problems[0]
