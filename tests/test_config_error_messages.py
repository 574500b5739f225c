"""Config errors a newcomer's try-out found misleading, through the CLI's compose path (``dry_run``, in-process)
and verl's ``validate_config`` as main_ppo calls it: each says the real cause, in one line, and never advises a
fix that would do nothing or fail in turn."""

import pytest

import verl  # noqa: F401  (loads the plugin)

from _overrides import BASE

VLLM = "actor_rollout_ref.rollout.name=vllm"
K = "actor_rollout_ref.actor.policy_loss"


def _compose_error(capsys, *overrides, code=4):
    """The one line ``python -m verl_offgrpo compose`` says for ``overrides`` (exit ``code``)."""
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run([*BASE, *overrides]) == code
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "error" in line]
    assert captured.out == "" and len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize("override, meant", [
    ("algorithm.offgrpo.red_drop_seed=1", "algorithm.off_grpo.red_drop_seed"),  # a misspelt parent
    (f"actor_rollout_ref.actor.polcy_loss.rec.clip_mode=none", f"{K}.rec.clip_mode"),  # a parent higher up
    (f"{K}.rec.clip_mod=none", f"{K}.rec.clip_mode"),  # a misspelt leaf
    ("algorithm.off_grpo.sync_peroid=3", "algorithm.off_grpo.sync_period"),
], ids=["parent", "grandparent", "rec_leaf", "off_grpo_leaf"])
def test_a_misspelt_path_to_a_knob_names_the_knob_without_hydras_plus_advice(capsys, override, meant):
    """hydra's "To append to your config use +..." would add the misspelt key, which then does nothing: not said."""
    key = override.split("=")[0]
    said = _compose_error(capsys, override)
    assert said == f"config error (hydra): {key} is no knob (did you mean {meant}?); Could not override '{key}'."


def test_a_path_into_a_knob_section_without_a_close_knob_lists_the_knobs(capsys):
    said = _compose_error(capsys, "algorithm.offgrpo.zzz=1")
    assert said.startswith("config error (hydra): algorithm.offgrpo.zzz is no knob (algorithm.off_grpo's knobs: "
                           "std_unbiased, std_eps, "), said
    assert "To append" not in said and "+algorithm" not in said


def test_a_misspelt_path_elsewhere_names_the_closest_and_keeps_hydras_words(capsys):
    said = _compose_error(capsys, "trainer.nnodes_x=1", "algorithm.off_grpo.sync_peroid=3")  # the first is said
    assert said == ("config error (hydra): trainer.nnodes_x is not in the config (did you mean trainer.nnodes?); "
                    "Could not override 'trainer.nnodes_x'. To append to your config use +trainer.nnodes_x=1")
    said = _compose_error(capsys, "trainer.no_such_key_at_all=1")
    assert said == ("config error (hydra): Could not override 'trainer.no_such_key_at_all'. To append to your config "
                    "use +trainer.no_such_key_at_all=1")
