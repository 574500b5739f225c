"""``python -m verl_offgrpo compose/check``: whose error a rejected config gets. The plugin's checks say a value
they cannot read as the plugin's one-line error (exit 2), never a bare ``ValueError`` that the CLI would
call verl's; the CLI says "verl's validate_config" (exit 4) only for what verl's own code raised, and keeps
the traceback of anything else the plugin's checks raise. In-process (``main``/``dry_run``), no subprocess."""

import os
import re

import pytest
from omegaconf import OmegaConf

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError, validate_off_grpo_config

from _cases import slow_after
from _overrides import BASE, shipped_config, validate_as_main_ppo

VLLM = "actor_rollout_ref.rollout.name=vllm"
#: verl's GRPO from the plugin's yaml: a job that does not select the plugin
PLAIN_VERL = ("algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla",
              "trainer.v1.trainer_mode=sync", "algorithm.rollout_correction.rollout_is=null")
#: a value the plugin's loss checks read as a number, set to something that is not one: what the error names
BAD_NUMBERS = [
    ("actor_rollout_ref.actor.clip_ratio_high=abc",
     "actor_rollout_ref.actor.clip_ratio_high (ε of the off_grpo clip window) must be a number > 0 (got 'abc')."),
    ("actor_rollout_ref.actor.clip_ratio_low=true",
     "actor_rollout_ref.actor.clip_ratio_low (ε of the off_grpo clip window) must be a number > 0 (got True)."),
    ("actor_rollout_ref.actor.clip_ratio=[1]",
     "actor_rollout_ref.actor.clip_ratio (ε of the off_grpo clip window) must be a number > 0 (got [1])."),
    ("algorithm.rollout_correction.rollout_is_threshold=abc",
     "algorithm.rollout_correction.rollout_is_threshold must be a number (inf: r' untruncated) or verl's IcePop "
     "'lower_upper' (got 'abc')."),
    ("actor_rollout_ref.rollout.top_p=abc", "actor_rollout_ref.rollout.top_p must be a number (got 'abc')."),
    ("actor_rollout_ref.rollout.top_k=abc", "actor_rollout_ref.rollout.top_k must be an integer (got 'abc')."),
]


@pytest.mark.parametrize("override, message", BAD_NUMBERS, ids=[o for o, _ in BAD_NUMBERS])
def test_a_value_that_is_no_number_is_the_plugins_error_naming_it(override, message):
    """Through hydra's composition and the plugin's checks (alone, and in verl's validate_config as main_ppo
    calls it): an OffGRPOConfigError naming the field and the value, not float()'s bare ValueError."""
    config = shipped_config(VLLM, override)
    for validate in (validate_off_grpo_config, validate_as_main_ppo):
        with pytest.raises(OffGRPOConfigError) as raised:
            validate(config)
        assert str(raised.value) == message


@pytest.mark.parametrize("override, message", BAD_NUMBERS[:1] + BAD_NUMBERS[3:4], ids=["clip_ratio_high", "threshold"])
def test_compose_says_a_value_that_is_no_number_as_the_plugins_error(capsys, override, message):
    """The README's first compose command with a bad ε: exit 2 and the plugin's one line (it was exit 4,
    "config error (verl's validate_config): could not convert string to float: 'abc'")."""
    from verl_offgrpo.cli.main import main

    readme = ["actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", VLLM, "actor_rollout_ref.rollout.n=8",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
              "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
              "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "algorithm.off_grpo.sync_period=10"]
    assert main(["compose", *readme, override]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == f"off_grpo config error: {message}"
    assert "verl's validate_config" not in captured.err and "Traceback" not in captured.err


def test_quoted_numbers_in_verls_instantiated_fields_say_drop_the_quotes():
    """verl builds the actor and rollout configs with hydra's instantiate, which keeps '0.3' a string for the
    workers to fail on: the plugin says so in one line. rollout_is_threshold, which verl parses from a string
    (the yaml's is the string inf), still passes."""
    for override, field in (("actor_rollout_ref.actor.clip_ratio_high='0.3'", "actor_rollout_ref.actor.clip_ratio_high"),
                            ("actor_rollout_ref.rollout.top_p='1.0'", "actor_rollout_ref.rollout.top_p"),
                            ("actor_rollout_ref.rollout.top_k='-1'", "actor_rollout_ref.rollout.top_k")):  # fmt: skip
        with pytest.raises(OffGRPOConfigError, match=rf"^{re.escape(field)}.* \(got the string '.*'\): drop the quotes\.$"):
            validate_off_grpo_config(shipped_config(VLLM, override))
    config = shipped_config(VLLM)
    assert config.algorithm.rollout_correction.rollout_is_threshold == "inf"
    validate_off_grpo_config(config)


@pytest.mark.parametrize("error", [ValueError("a bug"), AssertionError("a bug")], ids=["ValueError", "AssertionError"])
def test_compose_keeps_the_traceback_of_a_value_or_assertion_error_of_the_plugins_checks(monkeypatch, error):
    """A ValueError or AssertionError raised in the plugin's checks is a bug of the plugin's: re-raised, not
    said as verl's validate_config (exit 4) as it was."""
    import verl_offgrpo.config
    from verl_offgrpo.cli.compose import dry_run

    def broken(config):
        raise error

    monkeypatch.setattr(verl_offgrpo.config, "validate_off_grpo_config", broken)
    with pytest.raises(type(error)):
        dry_run([*BASE, VLLM])


@pytest.mark.parametrize("overrides, says", [
    ([*BASE, VLLM, "trainer.n_gpus_per_node=3",  # an assert in verl's validate_config itself
      "actor_rollout_ref.rollout.tensor_model_parallel_size=1"],  # (TP = 2 on 3 GPUs: the plugin's error, first)
     "real_train_batch_size (4096) must be divisible by minimal possible batch size (3)"),
    ([o for o in BASE if "rollout.log_prob" not in o] + [VLLM],  # a ValueError of a helper nested in it
     "[actor_rollout_ref.rollout] Please set at least one of 'actor_rollout_ref.rollout.log_prob_micro_batch_size'"),
], ids=["AssertionError", "ValueError"])
def test_compose_says_verls_own_assertion_or_value_error_as_verls(capsys, overrides, says):
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run(overrides) == 4
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("config error")]
    assert len(err) == 1 and err[0].startswith("config error (verl's validate_config): " + says), err


@pytest.mark.parametrize("override, says", [
    ("actor_rollout_ref.rollout.mode=sync", "Rollout mode 'sync' has been removed."),
    ("actor_rollout_ref.rollout.expert_parallel_size=3",
     "expert_parallel_size must be equal to tensor_model_parallel_size * data_parallel_size"),
], ids=["mode_sync", "expert_parallel"])
def test_compose_builds_the_rollout_config_verls_workers_build(capsys, override, says):
    """verl 0.9.1's validate_config passes these (a plain verl config); its workers' ``RolloutConfig`` refuses them
    after Ray started. compose builds it too: one line, exit 4, for a job that selects the plugin (whose
    validate_config wrapper builds it) and for plain verl's."""
    from verl.utils.config import omega_conf_to_dataclass

    from verl_offgrpo.cli.compose import compose, dry_run

    config = compose([*BASE, VLLM, override, *PLAIN_VERL])
    validate_as_main_ppo(config)
    with pytest.raises(Exception):  # the worker's own build (engine_workers: omega_conf_to_dataclass)
        omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    for overrides in ([*BASE, VLLM, override], [*BASE, VLLM, override, *PLAIN_VERL]):
        assert dry_run(overrides) == 4
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("config error")]
        assert len(err) == 1 and err[0].startswith(
            "config error (verl's RolloutConfig, which its workers build after Ray started): " + says), err


def test_compose_with_the_plugin_turned_off_checks_a_plain_config_and_refuses_one_that_selects_it(capsys, monkeypatch):
    """``VERL_OFFGRPO_DISABLE=1`` (the README's way back to plain verl): verl's own yaml, or the plugin's with verl's
    GRPO, composes and passes verl's checks (exit 0, the verdict says the plugin is off); a config that selects the
    plugin is one line, exit 1 (main_ppo would fail on a name the switched-off plugin does not register)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from verl_offgrpo.cli.compose import compose, dry_run

    monkeypatch.setenv("VERL_OFFGRPO_DISABLE", "1")
    verl_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    plain = [*BASE, VLLM, "algorithm.adv_estimator=grpo"]
    assert dry_run(plain, config_path=verl_dir, config_name="ppo_trainer") == 0
    captured = capsys.readouterr()
    assert "# composed and validated: verl's validate_config passed (verl-offgrpo turned off: VERL_OFFGRPO_DISABLE=1)" \
        in captured.err
    assert dry_run([*BASE, VLLM, *PLAIN_VERL]) == 0
    capsys.readouterr()
    bad = [*BASE, VLLM, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",
           "actor_rollout_ref.actor.ppo_micro_batch_size=null"]  # verl's own checks still run: its error, exit 4
    config = compose(bad, config_path=verl_dir, config_name="ppo_trainer")
    with pytest.raises(Exception):
        validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    assert dry_run(bad, config_path=verl_dir, config_name="ppo_trainer") == 4
    capsys.readouterr()
    assert dry_run([*BASE, VLLM]) == 1  # the shipped yaml selects the plugin (its estimator, loss, trainer mode)
    assert capsys.readouterr().err.splitlines() == [
        "verl-offgrpo is turned off (VERL_OFFGRPO_DISABLE=1) but this config selects it (the plugin's estimator, loss, "
        "trainer mode or knobs): main_ppo would fail on the names it does not register; unset VERL_OFFGRPO_DISABLE, or "
        "compose verl's own yaml (--config-path <verl/trainer/config> --config-name ppo_trainer)."]


#: what compose and check say for the one ??? value of the shipped yaml that no switched-off section holds
ROLLOUT_NAME_UNSET = ("incomplete config: the mandatory value actor_rollout_ref.rollout.name is still ???; set it "
                      "as an override, e.g. actor_rollout_ref.rollout.name=vllm (verl's own checks pass a ???, so "
                      "main_ppo would start Ray, then fail on the first ??? it reads)")


#: the shipped yaml's rollout.name as verl's yaml leaves it (the tests' BASE sets it)
UNSET = "actor_rollout_ref.rollout.name=???"


@pytest.mark.parametrize("overrides", [
    [*BASE, UNSET],  # else runnable
    [*BASE, "actor_rollout_ref.rollout.n=1", UNSET],  # the plugin's checks would reject it (exit 2)
    [*(o for o in BASE if "micro_batch" not in o), UNSET],  # verl's validate_config would reject it (exit 4)
], ids=["runnable", "plugin_rejects", "verl_rejects"])
def test_compose_says_a_missing_value_first_and_alone(capsys, overrides):
    """A mandatory value still ??? is what compose says, first and alone, before the plugin's or verl's checks run
    (they read it as unset; main_ppo would pass them, start Ray and fail on it): exit 3, one line on stderr,
    no yaml, no info line or banner of a validation. The ??? of a switched-off section
    (reward.reward_model.rollout.name) is not named."""
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run(overrides) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [ROLLOUT_NAME_UNSET], captured.err


def test_a_missing_value_behind_an_interpolation_is_named_not_a_traceback(capsys):
    """``trainer.use_v1=${x}`` with ``x=???``: omegaconf's missing_keys raised on resolving the interpolation (a
    traceback, exit 1); the ??? it reaches is named, exit 3."""
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run([*BASE, "+x=???", "trainer.use_v1=${x}"]) == 3
    captured = capsys.readouterr()
    assert captured.err.splitlines()[-1].startswith("incomplete config: the mandatory value x is still ???"), captured.err
    assert "Traceback" not in captured.err


def test_the_missing_values_line_names_each_and_suggests_a_value():
    from verl_offgrpo.config.missing_values import incomplete

    assert incomplete(["data.train_files", "trainer.x"]) == (
        "incomplete config: the mandatory values data.train_files, trainer.x are still ???; set each as an override, "
        "e.g. data.train_files=... (verl's own checks pass a ???, so main_ppo would start Ray, then fail on the first "
        "??? it reads)")


def test_a_missing_value_a_check_reads_in_a_switched_off_section_is_exit_3_not_a_traceback(monkeypatch, capsys):
    """missing_values leaves out the sections switched off (``enable: false``); should a check read one of their
    ??? values anyway, compose names it (exit 3), as main_ppo would fail on it, instead of a traceback."""
    import verl_offgrpo.config
    from verl_offgrpo.cli.compose import dry_run

    monkeypatch.setattr(verl_offgrpo.config, "validate_off_grpo_config",
                        lambda config: config.reward.reward_model.rollout.name)
    assert dry_run([*BASE, VLLM]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("incomplete config: the mandatory value reward.reward_model.rollout.name is still ???; "
                              "set it as an override, e.g. reward.reward_model.rollout.name=... "), err


def test_python_m_entry_is_thin():
    """``verl_offgrpo.__main__`` is the entry of ``verl_offgrpo.cli`` and nothing else; ``config-dir`` answers
    without importing verl (the CLI's import quieting runs before verl's)."""
    import subprocess
    import sys

    from verl_offgrpo import __main__ as entry
    from verl_offgrpo.cli import main, paths

    assert entry.main is main.main and [n for n in vars(entry) if not n.startswith("__")] == ["sys", "main"]
    code = ("import runpy, sys; sys.argv = ['verl_offgrpo', 'config-dir']\ntry:\n"
            "    runpy.run_module('verl_offgrpo', run_name='__main__')\nexcept SystemExit as done:\n"
            "    print(done.code, 'verl' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout == f"{paths.config_dir()}\n0 False\n", proc.stderr[-2000:]


#: overrides hydra composes (or hydra's defaults list refuses) but whose config cannot be read: an interpolation that
#: does not resolve, a section of verl's set to null or a value. Each was a traceback on exit 1, the install's code.
UNREADABLE = [
    ("algorithm.off_grpo.sync_period=${oc.env:OFF_GRPO_TEST_UNSET_V}",
     "algorithm.off_grpo.sync_period=${oc.env:OFF_GRPO_TEST_UNSET_V} does not resolve: the environment variable "
     "OFF_GRPO_TEST_UNSET_V is not set: export it, or give oc.env a default (${oc.env:OFF_GRPO_TEST_UNSET_V,<value>})."),
    ("algorithm.off_grpo.sync_period=${algorithm.nope}",
     "algorithm.off_grpo.sync_period=${algorithm.nope} does not resolve: algorithm.nope is not a key of the config."),
    # verl's own interpolations that refer to it (rollout.prometheus.served_model_name) are not what is named
    ("actor_rollout_ref.model.path=${oc.env:OFF_GRPO_TEST_UNSET_M}",
     "actor_rollout_ref.model.path=${oc.env:OFF_GRPO_TEST_UNSET_M} does not resolve: the environment variable "
     "OFF_GRPO_TEST_UNSET_M is not set: export it, or give oc.env a default (${oc.env:OFF_GRPO_TEST_UNSET_M,<value>})."),
    *((f"{section}={value}", f"{section}={value} replaces a section of verl's config, which its trainer reads key by key: "
       f"drop that override and set single keys instead ({section}.<key>=...).")
      for section, value in (("algorithm", "null"), ("transfer_queue", "null"), ("actor_rollout_ref", "null"),
                             ("trainer", "null"), ("actor_rollout_ref.actor", "null"), ("algorithm", "5"),
                             ("trainer.v1", "null"))),
]


@pytest.mark.parametrize("override, says", slow_after(2, UNREADABLE, [o for o, _ in UNREADABLE]),
                         ids=[o for o, _ in UNREADABLE])
def test_compose_says_an_unreadable_config_in_one_line_on_exit_5(capsys, override, says):
    """python -m verl_offgrpo compose (main, as the shell runs it): exit 5 and one line on stderr, no traceback,
    no yaml; check <overrides> says the same."""
    from verl_offgrpo.cli.main import main

    readme = ["actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", VLLM, "actor_rollout_ref.rollout.n=8",
              "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
              "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
              "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8"]
    assert main(["compose", *readme, override]) == 5
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert captured.err.splitlines()[-1] == f"config error (unreadable): {says}", captured.err
    assert main(["check", *readme, override]) == 5
    checked = capsys.readouterr()
    assert f"config error (unreadable): {says}" in checked.out + checked.err and "Traceback" not in checked.err


def test_compose_says_an_override_without_a_key_as_hydras_error(capsys):
    """``=5``: hydra's defaults list's bare ValueError (a traceback on exit 1) is hydra's one line, exit 4."""
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run([*BASE, "=5"]) == 4
    assert capsys.readouterr().err.splitlines() == ["config error (hydra): the override '=5' names no key: write key=value."]


def test_main_ppos_validate_config_says_an_unreadable_selecting_config_in_one_line():
    """main_ppo's validate_config (the plugin's wrapper): the same line, a hydra-compact OffGRPOConfigError, before
    any check reads the value; a plain verl config is left to verl."""
    from verl_offgrpo.config.readable import UnreadableConfigError
    from _overrides import verl_config

    with pytest.raises(UnreadableConfigError) as raised:
        validate_as_main_ppo(shipped_config(UNREADABLE[0][0]))
    assert str(raised.value) == UNREADABLE[0][1]
    validate_as_main_ppo(verl_config("trainer.test_freq=${oc.env:OFF_GRPO_TEST_UNSET_TF}"))


def test_main_ppos_validate_config_builds_verls_rollout_config_for_a_selecting_config(capsys):
    """main_ppo's validate_config (the plugin's wrapper), for a config that selects the plugin: verl's own checks pass
    ``rollout.mode=sync``, and verl's workers refuse it only after Ray and the model started; the wrapper builds verl's
    RolloutConfig in the driver and says verl's line, hydra-compact. A plain verl config is left to verl, as before."""
    from hydra.errors import CompactHydraException

    from verl_offgrpo.patches.rollout_config import RolloutConfigError
    from _overrides import verl_config

    with pytest.raises(RolloutConfigError) as raised:
        validate_as_main_ppo(shipped_config("actor_rollout_ref.rollout.mode=sync"))
    assert isinstance(raised.value, CompactHydraException) and "\n" not in str(raised.value)
    assert str(raised.value) == (
        "verl's RolloutConfig, which its workers build after Ray started: Rollout mode 'sync' has been removed. Please "
        "set `actor_rollout_ref.rollout.mode=async` or remove the mode setting entirely. (actor_rollout_ref.rollout)")
    assert "checks passed" not in capsys.readouterr().out  # before verl's checks and their success banner
    validate_as_main_ppo(shipped_config("actor_rollout_ref.rollout.mode=async"))
    validate_as_main_ppo(verl_config("actor_rollout_ref.rollout.mode=sync"))  # plain verl: its workers say it


def test_the_sections_refused_as_values_are_sections_of_the_composed_yaml():
    """readable.SECTIONS names sections of the config the shipped yaml composes (verl 0.9.1's ppo_trainer): every
    top-level section among them."""
    from omegaconf import DictConfig

    from verl_offgrpo.config.readable import SECTIONS

    config = shipped_config()
    assert all(isinstance(OmegaConf.select(config, s), DictConfig) for s in SECTIONS)
    assert {k for k in config if isinstance(config[k], DictConfig)} <= set(SECTIONS)


def test_compose_of_a_config_that_selects_nothing_of_the_plugin_says_plain_verl(capsys):
    """The plugin installed and on, the shipped yaml with verl's GRPO (estimator, loss, trainer mode): verl's checks
    pass, and the verdict does not claim the plugin's ran (a newcomer's trial: it said "+ off_grpo checks passed")."""
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run([*BASE, VLLM, *PLAIN_VERL]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "# composed and validated: verl's validate_config passed (the config selects no part of verl-offgrpo: " \
           "plain verl, its checks do not apply)" in err
    assert not any("off_grpo checks passed" in line for line in err)


def test_compose_repeats_the_plugins_warnings_under_the_yaml(capsys):
    """A warning logged while the config is checked (top_p < 1 biases r') is said again after the printed config,
    in the verdict's line and below it, once each; a config without one keeps the plain verdict. Exit 0 both ways."""
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run([*BASE, VLLM, "actor_rollout_ref.rollout.top_p=0.9"]) == 0
    err = capsys.readouterr().err.splitlines()
    verdict = next(i for i, line in enumerate(err) if line.startswith("# composed and validated"))
    assert err[verdict].endswith("checks passed with 1 warning:")
    assert err[verdict + 1].startswith("#   [WARNING] off_grpo: rollout top_p=0.9 top_k=-1: ")
    assert sum("top_p=0.9 top_k=-1" in line for line in err) == 2  # logged above, repeated once below
    assert dry_run([*BASE, VLLM]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "# composed and validated: verl's validate_config + off_grpo checks passed" in err
    assert not any("[WARNING]" in line for line in err)


def test_compose_takes_your_own_yaml_as_main_ppo_does(tmp_path, monkeypatch, capsys):
    """``compose --config-path DIR --config-name NAME`` composes a user's yaml (here verl's ppo_trainer selecting the
    plugin's estimator and loss) and runs the same checks main_ppo's driver would. Usage errors (64): one flag without
    the other, and a relative path, which main_ppo (hydra) would read from verl/trainer/, not from here."""
    from verl_offgrpo.cli.main import EX_USAGE, main

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "my_grpo.yaml").write_text(
        "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\n"
        "defaults:\n  - ppo_trainer\n  - _self_\n"
        "algorithm:\n  adv_estimator: off_grpo\n"
        "actor_rollout_ref:\n  actor:\n    policy_loss:\n      loss_mode: off_grpo\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["compose", "--config-path", str(tmp_path / "mine"), "--config-name", "my_grpo", *BASE]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("off_grpo config error: algorithm.off_grpo.zero_var_mask=true on the V1 trainer needs "
                          "trainer.v1.trainer_mode=off_grpo_sync (got 'sync')"), err
    for flags, says in ((["--config-path", str(tmp_path / "mine")], "--config-path and --config-name go together"),
                        (["--config-name", "my_grpo"], "--config-path and --config-name go together"),
                        (["--config-path", "mine", "--config-name", "my_grpo"],
                         "--config-path mine is relative, which main_ppo (hydra) reads from verl/trainer/, not from "
                         "here: pass an absolute path, e.g. \"$(pwd)/mine\"")):
        with pytest.raises(SystemExit) as stopped:
            main(["compose", *flags, *BASE])
        assert stopped.value.code == EX_USAGE
        assert says in capsys.readouterr().err


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None,
                    reason="vLLM is installed here: verl's LoRA checks can run")
def test_a_config_verls_checks_cannot_finish_without_vllm_is_exit_6_not_a_config_error(capsys):
    """verl 0.9.1's LoRA checks import ``verl.third_party.vllm``, which raises "vllm version None not supported"
    where vLLM is not installed: the config is not wrong, this machine cannot check it (the newcomer's CPU check
    called it a config error). A config the plugin refuses is still the plugin's error, first."""
    from verl_offgrpo.cli.compose import dry_run

    lora = ["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16"]
    assert dry_run([*BASE, *lora]) == 6
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("not checked here")]
    assert err == ["not checked here: verl's validate_config needs vLLM installed for this config (ValueError: vllm "
                   "version None not supported and SGLang also not Found. Currently supported vllm versions are "
                   "0.18.0+); the plugin's checks, which run first, passed. Check it where the job will run."]
    assert dry_run([*BASE, *lora, "algorithm.off_grpo.sync_period=10"]) == 2  # LoRA at v > 1: refused first
    from verl_offgrpo.cli.main import main

    capsys.readouterr()
    assert main(["check", *BASE, *lora]) == 6  # check: the same exit, a verdict that says it could not finish
    err = capsys.readouterr().err.splitlines()
    assert "check INCOMPLETE" in err[0] and any("not finished here (last line)" in line for line in err)
    assert err[-1].startswith("not checked here: verl's validate_config needs vLLM installed")
    # a plain verl job (verl's own yaml, its GRPO): the same exit, and no word of checks that did not run
    from pathlib import Path

    verls = str(Path(verl.__file__).parent / "trainer" / "config")
    assert dry_run([*BASE, *lora, "algorithm.adv_estimator=grpo"], config_path=verls, config_name="ppo_trainer") == 6
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("not checked here")]
    assert len(err) == 1 and "plugin" not in err[0]


def test_only_an_unreachable_hub_is_not_checkable_here_not_the_hubs_answer():
    """A hub that answered "no such repository" (transformers wraps it in an OSError naming huggingface.co) is the
    config's mistake (exit 4); a hub that could not be reached (offline, refused) is this machine's (exit 6)."""
    from huggingface_hub import errors

    from verl_offgrpo.cli.compose import _what_this_machine_lacks

    def wrapped(inner):
        try:
            try:
                raise inner
            except Exception as err:
                raise OSError("x/y is not a local folder and is not a valid model identifier listed on "
                              "'https://huggingface.co/models'") from err
        except OSError as outer:
            return outer

    answered = errors.RepositoryNotFoundError.__new__(errors.RepositoryNotFoundError)
    answered.args = ("404 Client Error. Repository Not Found for url: https://huggingface.co/api/models/x/y",)
    assert _what_this_machine_lacks(wrapped(answered)) is None
    unreachable = errors.LocalEntryNotFoundError("Cannot find the requested files in the disk cache")
    what, said = _what_this_machine_lacks(wrapped(unreachable))
    assert what.startswith("the model hub (the network") and said is unreachable


def test_a_config_verls_checks_cannot_finish_offline_is_exit_6_not_a_config_error(capsys):
    """A critic given a hub id makes verl's checks load its tokenizer: offline, that is the hub's error, not the
    config's; a local path that does not exist stays verl's config error (exit 4)."""
    import os
    import subprocess
    import sys

    from verl_offgrpo.cli.main import main

    base = [o for o in BASE if not o.startswith("actor_rollout_ref.model.path")]
    gae = ["algorithm.adv_estimator=gae", "actor_rollout_ref.model.path=/models/none"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def compose(critic):
        return subprocess.run([sys.executable, "-m", "verl_offgrpo", "compose", *base, *gae, critic],
                              capture_output=True, text=True, timeout=240, env=env)

    offline = compose("critic.model.path=offgrpo-nobody/no-such-model")
    assert offline.returncode == 6, offline.stderr[-2000:]
    assert offline.stderr.splitlines()[-1].startswith(
        "not checked here: verl's validate_config needs the model hub (the network; a model path that is not a local "
        "directory here is read as a hub id) for this config (LocalEntryNotFoundError: ")
    # the local path needs no offline hub: checked in this process (a second interpreter cost ~10 s)
    assert main(["compose", *base, *gae, "critic.model.path=/models/none"]) == 4
    assert capsys.readouterr().err.splitlines()[-1].startswith("config error (verl's validate_config)")


def test_what_this_machine_lacks_follows_the_whole_chain_and_names_its_innermost_error():
    """A connection error behind an implicit ``__context__`` (raised without ``from``) counts, and the line quotes it,
    not the wrapper; an error raised in verl's third_party import of vLLM or SGLang names that engine."""
    import requests

    from verl_offgrpo.cli.compose import _what_this_machine_lacks

    try:
        try:
            try:
                raise requests.exceptions.ConnectionError("inner")
            except Exception:
                raise ValueError("tokenizer could not be loaded")  # noqa: B904 - __context__ only, as verl's code does
        except ValueError as err:
            raise OSError("We couldn't connect to 'https://huggingface.co'") from err
    except OSError as outer:
        what, said = _what_this_machine_lacks(outer)
    assert what.startswith("the model hub") and str(said) == "inner"
    for engine, name in (("vllm", "vLLM installed"), ("sglang", "SGLang installed")):
        code = compile("raise ValueError('version None not supported')", f"/x/verl/third_party/{engine}/__init__.py",
                       "exec")
        try:
            exec(code)
        except ValueError as err:
            assert _what_this_machine_lacks(err)[0] == name


def test_check_takes_your_own_yaml_as_compose_does(capsys):
    """``check --config-path DIR --config-name NAME [overrides]`` (was a usage error naming every override): the
    yaml is validated as compose validates it, the report names it; a rejected one fails with compose's line."""
    from verl_offgrpo.cli.main import main

    verl_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    own = ["--config-path", verl_dir, "--config-name", "ppo_trainer"]
    assert main(["check", *own, *BASE, VLLM, "algorithm.adv_estimator=grpo"]) == 0
    out = capsys.readouterr().out
    assert f"config: {verl_dir}/ppo_trainer.yaml + {len(BASE) + 2} overrides — selects the plugin: no" in out
    assert "validated as compose validates it: passed" in out
    assert main(["check", *own, *BASE, VLLM, "algorithm.adv_estimator=off_grpo", "actor_rollout_ref.rollout.n=1"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "off_grpo config error: actor_rollout_ref.rollout.n=1 with algorithm.adv_estimator=off_grpo")
    with pytest.raises(SystemExit) as usage:  # compose's rule: the two go together
        main(["check", "--config-path", verl_dir, *BASE])
    assert usage.value.code == 64


def test_verls_error_on_a_model_path_names_its_key(capsys):
    """A ``gae`` job on verl's critic default (``~/models/deepseek-llm-7b-chat``): transformers' "Repo id must be in
    the form ..." quotes the path, not the key; compose's line names it."""
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run([*BASE, VLLM, "algorithm.adv_estimator=gae"]) == 4
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("config error")]
    assert len(err) == 1 and err[0].startswith("config error (verl's validate_config): ") and err[0].endswith(
        "'~/models/deepseek-llm-7b-chat'. Use `repo_type` argument if needed. "
        "(critic.model.path=~/models/deepseek-llm-7b-chat)"), err


def test_check_validates_your_yaml_without_overrides(capsys):
    from verl_offgrpo.cli.main import main

    verl_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    assert main(["check", "--config-path", verl_dir, "--config-name", "ppo_trainer"]) == 3
    err = capsys.readouterr().err
    assert (f"config: {verl_dir}/ppo_trainer.yaml — selects the plugin: no; trainer: V1 sync; validated as compose "
            "validates it: FAILED (last line)") in err
    assert err.splitlines()[-1].startswith("incomplete config: the mandatory value actor_rollout_ref.rollout.name")
    assert err.splitlines()[0].endswith(" check FAILED: the config (last line); the install passed"), err


def test_checks_headline_says_failed_alone_where_the_install_has_a_problem(capsys):
    """The headline names the config as what failed only where the install passed: with a problem of the install too,
    it says FAILED alone (the problem lines follow)."""
    from verl_offgrpo.cli import install_check

    found = install_check._Findings(overrides=["x=1"], config_code=2, config_error="off_grpo config error: bad",
                                    problems=["a patch target is missing"])
    install_check._report(found)
    assert capsys.readouterr().err.splitlines()[0].endswith(" check FAILED")


def test_compose_says_a_missing_transfer_queue_on_the_v1_trainer_as_check_does(monkeypatch):
    """verl imports TransferQueue only inside Ray (its V1 TaskRunner): a valid V1 config is exit 1 with check's line,
    not "composed and validated"; the v0 trainer does not need it."""
    import importlib.util

    from verl_offgrpo.cli.compose import TRANSFER_QUEUE_MISSING, validate

    assert validate(list(BASE))[:2] == (0, None)  # installed here: valid
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] == "transfer_queue" else real(name, *a))
    assert validate(list(BASE))[:2] == (1, f"verl-offgrpo cannot run here: {TRANSFER_QUEUE_MISSING}")
    assert validate([*BASE, "trainer.use_v1=false"])[:2] == (0, None)


def test_the_readme_use_it_with_verl_command_validates_as_written():
    """The README's main_ppo command, its overrides exactly as printed (the data paths are only noted by compose)."""
    import shlex
    from pathlib import Path

    from verl_offgrpo.cli.compose import validate

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Use it with verl", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    command = next(line for line in block.replace("\\\n", " ").splitlines() if "verl.trainer.main_ppo" in line)
    words = shlex.split(command, comments=True)
    overrides = words[words.index("off_grpo_trainer") + 1:]
    assert overrides and all("=" in word for word in overrides) and "algorithm.off_grpo.sync_period=10" in overrides
    assert validate(overrides)[:2] == (0, None)


def test_version_and_config_dirs_usage_error(capsys):
    """``--version`` names the package; an argument to config-dir is a usage error (64) that says it takes none."""
    from verl_offgrpo import __version__
    from verl_offgrpo.cli.main import EX_USAGE, main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"verl-offgrpo {__version__}\n"
    with pytest.raises(SystemExit) as done:
        main(["config-dir", "extra"])
    assert done.value.code == EX_USAGE
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: unrecognized arguments: extra; config-dir takes no arguments")
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "``" not in capsys.readouterr().out  # the docstring's reST quotes, as a terminal shows them


@pytest.mark.parametrize("argv0, prog", [("/venv/bin/verl-offgrpo", "verl-offgrpo"),
                                         ("/x/verl_offgrpo/__main__.py", "python -m verl_offgrpo")])
def test_usage_names_the_command_as_run_from_sys_argv(monkeypatch, capsys, argv0, prog):
    from verl_offgrpo.cli.main import EX_USAGE, main

    monkeypatch.setattr("sys.argv", [argv0, "config-dir", "extra"])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == EX_USAGE and err.startswith(f"usage: {prog} ")
    assert err.splitlines()[-1] == f"{prog}: error: unrecognized arguments: extra; config-dir takes no arguments"


@pytest.mark.parametrize("key, what", [
    ("actor_rollout_ref.model.path", "a local model directory or a hub id"),
    ("data.val_files", "your validation data (verl builds it at start-up whether or not the job validates)"),
])
def test_compose_says_a_null_model_path_or_data_file_first_and_alone(capsys, key, what):
    """verl's validate_config passes ``actor_rollout_ref.model.path=null`` (its TaskRunner then fails on
    ``HFModelConfig(path=None)``, after Ray started) and a null data file: compose says it like a ???, exit 3, one line."""
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run([*BASE, VLLM, f"{key}=null"]) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.splitlines() == [
        f"incomplete config: {key} is null: set it to {what} (verl's own checks pass a null there, so main_ppo would "
        "start Ray, then fail where it reads it)"], captured.err


def test_main_ppos_check_refuses_a_null_training_file_of_a_selecting_job():
    """Through verl's validate_config (the wrap main_ppo's driver runs): a selecting job with ``data.train_files=null``
    is refused in one line naming the key (the row check said "more than the 0 rows of data.train_files"); two
    nulls, one line naming both in NOT_NULL's order."""
    with pytest.raises(OffGRPOConfigError) as err:
        validate_as_main_ppo(shipped_config("data.train_files=null"))
    assert str(err.value) == (
        "incomplete config: data.train_files is null: set it to your training data (a parquet or jsonl file, or a list "
        "of them) (verl's own checks pass a null there, so main_ppo would start Ray, then fail where it reads it)")
    with pytest.raises(OffGRPOConfigError, match=r"^incomplete config: actor_rollout_ref.model.path is null: set it to "
                       r"a local model directory or a hub id; data.train_files is null: "):
        validate_as_main_ppo(shipped_config("data.train_files=null", "actor_rollout_ref.model.path=null"))


def test_a_dataset_class_of_your_own_may_take_null_data_files():
    """With ``data.custom_cls.path`` set, the class reads the data files its way: a null one is not refused as unset
    (the model path still is)."""
    from verl_offgrpo.config.missing_values import null_values

    own = ("data.custom_cls.path=/x/my_dataset.py", "data.custom_cls.name=MyDataset")
    assert null_values(shipped_config(*own, "data.train_files=null", "data.val_files=null")) == []
    assert null_values(shipped_config(*own, "data.val_files=null", "actor_rollout_ref.model.path=null")) == [
        "actor_rollout_ref.model.path"]
    assert null_values(shipped_config("data.val_files=null")) == ["data.val_files"]


def test_compose_names_the_fix_for_a_bare_tilde_in_an_override(capsys, monkeypatch):
    """bash leaves ``data.train_files=~/...`` as typed (not a shell variable's assignment) and hydra's grammar refuses the
    ``~`` with a lexer error that names no fix: compose says to write the path in full (verl reads ``~`` as written),
    spelt out for one path, in general terms for a list (a rewrite of a list's items could miss a quoted or spaced one)."""
    from verl_offgrpo.cli.compose import dry_run

    monkeypatch.setenv("HOME", "/home/u")
    said = "hydra takes no bare ~ in a value, and verl reads data and model paths as written: write "
    assert dry_run([*BASE, "data.train_files=~/data/gsm8k/train.parquet"]) == 4
    assert capsys.readouterr().err.splitlines() == [
        f"config error (hydra): data.train_files=~/data/gsm8k/train.parquet: {said}"
        "data.train_files=/home/u/data/gsm8k/train.parquet (in a shell, data.train_files=$HOME/data/gsm8k/train.parquet)"]
    for listed in ("data.val_files=[~/a.parquet,/b.parquet]", "data.val_files=[/a.parquet, ~/b.parquet]"):
        assert dry_run([*BASE, listed]) == 4
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"config error (hydra): {listed}: {said}each path in full (/home/u/... for ~/..., or $HOME/... in a shell)")
    assert dry_run([*BASE, "data.train_files=/x/~/y"]) == 4  # no ~ where a path starts: hydra's own line
    assert "LexerNoViableAltException" in capsys.readouterr().err
