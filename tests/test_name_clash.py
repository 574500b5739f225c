"""Another package registering one of the plugin's names (``rec``, ``red_drop``, ...): verl 0.9.1 keeps the last
registration of a policy loss silently (``register_policy_loss``) and refuses a second estimator. The plugin
keeps the other package's function, says so on stderr, and refuses a job that names it in one line. A name
another package holds is not the plugin's: it selects nothing (``patches/selection.plugins_name``), in the driver
or in a worker whose registry holds the other function."""

import pytest
from verl.trainer.ppo import core_algos

from verl_offgrpo import plugin
from verl_offgrpo.config import OffGRPOConfigError
from verl_offgrpo.rec_loss import compute_policy_loss_rec

from _overrides import shipped_config, validate_as_main_ppo, verl_config

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


def test_a_loss_registered_over_the_plugins_after_import_is_refused_too(monkeypatch):
    """``@register_policy_loss("rec")`` after ``core_algos`` is imported (verl overwrites the plugin's silently):
    the same one-line refusal, for the shipped yaml and for verl's own config naming ``rec``."""
    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "rec", compute_policy_loss_rec)
    core_algos.register_policy_loss("rec")(their_rec_loss)
    assert core_algos.POLICY_LOSS_REGISTRY["rec"] is their_rec_loss
    for config in (shipped_config(*REC), verl_config("actor_rollout_ref.actor.policy_loss.loss_mode=rec")):
        with pytest.raises(OffGRPOConfigError, match="loss_mode=rec is registered in verl by "):
            validate_as_main_ppo(config)


def test_a_name_another_package_holds_does_not_select_the_plugin(monkeypatch):
    from verl_offgrpo.patches.selection import config_selects

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "rec", their_rec_loss)
    monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, "red_drop", their_red_drop)
    assert not config_selects(verl_config("actor_rollout_ref.actor.policy_loss.loss_mode=rec"))
    assert not config_selects(verl_config("algorithm.adv_estimator=red_drop"))
    assert config_selects(verl_config("actor_rollout_ref.actor.policy_loss.loss_mode=off_grpo"))  # still the plugin's


def test_a_worker_running_another_packages_rec_steps_as_plain_verl(monkeypatch):
    """An actor worker whose registry holds another package's ``rec`` (e.g. registered by its
    ``model.external_lib``) and no ``VERL_OFFGRPO_JOB``: verl's ``BaseEngine.train_batch`` (wrapped by the plugin,
    verl 0.9.1) takes the optimizer step of a mini-batch without loss tokens, as verl does; with the plugin's ``rec``
    registered it is skipped."""
    from test_empty_update import engine_loss, run

    from verl_offgrpo.patches import JOB_ENV
    from verl.workers.engine import base as engine_base

    monkeypatch.delenv(JOB_ENV, raising=False)
    masks = [[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
    ours, _ = run(engine_base.BaseEngine.train_batch, masks, engine_loss("rec"))
    assert ours.steps_taken == 1  # the plugin's rec: no step on the empty mini-batch
    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "rec", their_rec_loss)
    theirs, _ = run(engine_base.BaseEngine.train_batch, masks, engine_loss("rec"))
    assert theirs.steps_taken == 2
