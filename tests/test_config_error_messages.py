"""Config errors a newcomer's try-out found misleading, through the CLI's compose path (``dry_run``, in-process)
and verl's ``validate_config`` as main_ppo calls it: each says the real cause, in one line, and never advises a
fix that would do nothing or fail in turn."""

import subprocess

import pytest


import verl  # noqa: F401  (loads the plugin)

from _cases import slow_after
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


@pytest.mark.parametrize("override, meant", [
    ("algorithm.sync_period=10", "algorithm.off_grpo.sync_period=10"),
    ("actor_rollout_ref.actor.skip_old_log_prob=true", "algorithm.off_grpo.skip_old_log_prob=true"),
    (f"{K}.clip_mode=ring", f"{K}.rec.clip_mode=ring"),  # hydra's own hint was policy_loss.loss_mode
])
def test_a_plugin_knob_under_another_section_names_its_own_path_not_hydras_plus(capsys, override, meant):
    """hydra's "To append to your config use +..." would put the knob where nothing reads it (refused next, one
    round trip later): compose names the knob's own section at once (a newcomer's trial)."""
    key = override.split("=")[0]
    said = _compose_error(capsys, override)
    assert said == (f"config error (hydra): {key} is not where the plugin reads it: set {meant} instead (no +: the "
                    f"yaml sets every knob); Could not override '{key}'.")


@pytest.mark.parametrize("override, section", [
    ("algorithm.offgrpo=1", "algorithm.off_grpo"),
    ("actor_rollout_ref.actor.policy_loss.recc=none", "actor_rollout_ref.actor.policy_loss.rec"),
])
def test_a_misspelt_section_set_to_a_value_points_to_its_knobs(capsys, override, section):
    """Following "did you mean <section>?" would set the section to a value (refused next): the hint says
    <section>.<knob>=... and lists the knobs."""
    said = _compose_error(capsys, override)
    key = override.split("=")[0]
    assert said.startswith(f"config error (hydra): {key} is no knob (did you mean {section}.<knob>=...? its knobs: "), said


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


@pytest.mark.parametrize("overrides, said", [
    (["+algorithm.offgrpo.red_drop_seed=1"],  # what hydra's advice to append the misspelt key led to: passed, ignored
     "algorithm.offgrpo is no field of verl's algorithm section (did you mean algorithm.off_grpo?): "
     "algorithm.offgrpo.red_drop_seed=1 would do nothing; replace it with algorithm.off_grpo.red_drop_seed=1 (no +: the plugin's "
     "yaml sets every knob)."),
    (["+algorithm.offgrpo.sync_peroid=3"],
     "algorithm.offgrpo is no field of verl's algorithm section (did you mean algorithm.off_grpo?): "
     "algorithm.offgrpo.sync_peroid=3 would do nothing; replace it with algorithm.off_grpo.sync_period=3 (no +: "),
    (["+algorithm.offgrpo_x=1"],
     "algorithm.offgrpo_x is no field of verl's algorithm section (did you mean algorithm.off_grpo?): "
     "algorithm.offgrpo_x=1 would do nothing; drop it and set the knobs as algorithm.off_grpo.<knob>=..."),
    (["+algorithm.off-grpo.x=1"], "algorithm.off-grpo is no field of verl's algorithm section (did you mean "),
], ids=["offgrpo", "offgrpo_knob_typo", "offgrpo_x", "off-grpo"])
def test_a_section_misspelling_off_grpo_under_algorithm_is_refused(capsys, overrides, said):
    """Refused by the plugin's checks in verl's validate_config, before main_ppo starts Ray (compose: exit 2)."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    with pytest.raises(OffGRPOConfigError) as raised:
        validate_as_main_ppo(shipped_config(*overrides))
    assert str(raised.value).startswith(said), str(raised.value)
    assert _compose_error(capsys, *overrides, code=2).startswith(f"off_grpo config error: {said}")


@pytest.mark.parametrize("override", ["+algorithm.grpo.x=1", "+algorithm.off_policy.x=1", "+algorithm.gspo=1",
                                      "algorithm.gamma=0.9", "algorithm.use_pf_ppo=true",
                                      "+algorithm.gdpo_reward_keys=[a]"])
def test_verls_algorithm_fields_and_keys_not_close_to_off_grpo_pass(override):
    """verl's AlgoConfig fields (pf_ppo, filter_groups, ... none close to off_grpo) and other packages' keys pass
    (verl's validate_config as main_ppo calls it, the plugin's checks first)."""
    from _overrides import shipped_config, validate_as_main_ppo

    validate_as_main_ppo(shipped_config(override))


#: a numeric knob of the plugin's set to a word, a bool, a list or null: it must be a number (was: "must be > 0 (got
#: 'abc')", its range's error), with its range and default
NOT_NUMBERS = [
    (f"{K}.rec.tau=abc", f"{K}.rec.tau must be a number > 0 (got 'abc'); the default is 1.0."),
    (f"{K}.rec.eps_low_prime=true", f"{K}.rec.eps_low_prime must be a number in (0, 1] (got True); the default is 0.6."),
    (f"{K}.rec.eps_high_prime=[1]", f"{K}.rec.eps_high_prime must be a number > 0 (got [1]); the default is 2.0."),
    ("algorithm.off_grpo.std_eps=abc", "algorithm.off_grpo.std_eps must be a number > 0 (got 'abc'); the default is 1e-06."),
    ("algorithm.off_grpo.max_log_rprime_lagged=abc",
     "algorithm.off_grpo.max_log_rprime_lagged must be a number >= 0 (got 'abc'); the default is 1.5."),
    ("algorithm.off_grpo.red_drop_seed=null", "algorithm.off_grpo.red_drop_seed must be an integer >= 0 (got None); "
                                              "the default is 0."),
    (f"{K}.rec.tau='2'", f"{K}.rec.tau must be a number (got the string '2'): drop the quotes."),
]


@pytest.mark.parametrize("override, said", NOT_NUMBERS, ids=[o.rpartition(".")[2] for o, _ in NOT_NUMBERS])
def test_a_numeric_knob_that_is_no_number_says_it_must_be_a_number(override, said):
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    rec = [f"{K}.loss_mode=rec", "algorithm.norm_adv_by_std_in_grpo=false"] if ".rec." in override else []
    with pytest.raises(OffGRPOConfigError) as raised:
        validate_as_main_ppo(shipped_config(*rec, override))
    assert str(raised.value) == said


#: verl's counts a selecting job reads (config/verl_counts.py): verl says "TypeError: not all arguments converted
#: during string formatting" for the first, and lets test_freq=null and save_freq=null through to the trainer's
#: first step (its fit compares them with 0)
VERL_COUNTS = [
    ("data.train_batch_size=abc", "data.train_batch_size must be an integer >= 1 (got 'abc'); it counts the prompts "
                                  "per step."),
    ("trainer.test_freq=null", "trainer.test_freq must be an integer (got None); validation runs every that many "
                               "steps, and -1 turns it off."),
    ("trainer.save_freq=null", "trainer.save_freq must be an integer (got None); a checkpoint is saved every that many "
                               "steps, and -1 turns it off."),
    ("trainer.nnodes=0", "trainer.nnodes must be an integer >= 1 (got 0); it counts the nodes."),
    ("data.gen_batch_size=32.0", "data.gen_batch_size must be an integer >= 1 (got 32.0); it counts the prompts of "
                                 "one dataloader fetch."),
    ("actor_rollout_ref.actor.ppo_mini_batch_size='8'",
     "actor_rollout_ref.actor.ppo_mini_batch_size must be an integer >= 1 (got the string '8'): drop the quotes."),
    # counts the plugin's checks pick their paths by, which verl's validate_config lets through as words
    ("transfer_queue.backend.SimpleStorage.total_storage_size=abc",
     "transfer_queue.backend.SimpleStorage.total_storage_size must be an integer >= 1 (got 'abc'); it counts the "
     "samples verl's TransferQueue holds."),
    ("actor_rollout_ref.rollout.max_num_seqs=abc", "actor_rollout_ref.rollout.max_num_seqs must be an integer >= 1 "
                                                   "(got 'abc'); it counts the sequences one vLLM engine runs at once."),
    ("+trainer.v1.sync.parameter_sync_step=abc",
     "trainer.v1.sync.parameter_sync_step must be an integer >= 1 (got 'abc'); it counts the optimizer steps per "
     "weight sync of V1's sync mode."),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size=abc",
     "actor_rollout_ref.rollout.tensor_model_parallel_size must be an integer >= 1 (got 'abc'); it counts the GPUs "
     "of one vLLM replica's tensor parallelism."),
    ("actor_rollout_ref.rollout.val_kwargs.n=abc", "actor_rollout_ref.rollout.val_kwargs.n must be an integer >= 1 "
                                                   "(got 'abc'); it counts the responses per validation prompt."),
    ("actor_rollout_ref.rollout.data_parallel_size=2.5",
     "actor_rollout_ref.rollout.data_parallel_size must be an integer >= 1 (got 2.5); it counts the vLLM "
     "data-parallel ranks of one replica."),
    ("actor_rollout_ref.rollout.data_parallel_size=[2]",
     "actor_rollout_ref.rollout.data_parallel_size must be an integer >= 1 (got [2]); it counts the vLLM "
     "data-parallel ranks of one replica."),
]


@pytest.mark.parametrize("override, said", slow_after(5, VERL_COUNTS, [o for o, _ in VERL_COUNTS]),
                         ids=[o for o, _ in VERL_COUNTS])
def test_a_verl_count_a_selecting_job_reads_must_be_an_integer(override, said):
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    with pytest.raises(OffGRPOConfigError) as raised:
        validate_as_main_ppo(shipped_config(override))
    assert str(raised.value) == said


@pytest.mark.parametrize("override", ["actor_rollout_ref.rollout.max_num_seqs=null",
                                      "actor_rollout_ref.rollout.data_parallel_size=null",
                                      "+trainer.v1.sync.parameter_sync_step=1"])
def test_a_null_rollout_count_is_left_to_verl(override):
    """A null max_num_seqs (vLLM's own default) or data_parallel_size (1) passes, as verl passes it."""
    from _overrides import shipped_config, validate_as_main_ppo

    validate_as_main_ppo(shipped_config("algorithm.off_grpo.sync_period=4", override))


@pytest.mark.parametrize("value, got", slow_after(1, [("abc", "'abc'"), ("[2]", "[2]"), ("2.5", "2.5")]))
def test_compose_says_a_data_parallel_size_that_is_no_integer_in_one_line(capsys, value, got):
    """With skip_old_log_prob at a lag (whose check reads the data-parallel size): it was int()'s bare ValueError
    (a word), a TypeError (a list) or 2.5 read as 2; now the plugin's line, exit 2."""
    line = _compose_error(capsys, "algorithm.off_grpo.sync_period=4", "algorithm.off_grpo.skip_old_log_prob=true",
                          "actor_rollout_ref.actor.ppo_mini_batch_size=1024", "algorithm.off_grpo.rollout_schedule=per_step",
                          f"actor_rollout_ref.rollout.data_parallel_size={value}", code=2)
    assert line == (f"off_grpo config error: actor_rollout_ref.rollout.data_parallel_size must be an integer >= 1 "
                    f"(got {got}); it counts the vLLM data-parallel ranks of one replica.")


@pytest.mark.parametrize("override, key, rule", slow_after(1, [
    ("trainer.test_freq=${oc.env:OFF_GRPO_TEST_UNSET_TF,5}", "trainer.test_freq", "an integer"),
    ("algorithm.off_grpo.sync_period=${oc.env:OFF_GRPO_TEST_UNSET_V,4}", "algorithm.off_grpo.sync_period", "an integer"),
    ("actor_rollout_ref.rollout.n=${oc.env:OFF_GRPO_TEST_UNSET_N,4}", "actor_rollout_ref.rollout.n", "an integer"),
], ["test_freq", "sync_period", "rollout.n"]), ids=["test_freq", "sync_period", "rollout.n"])
def test_a_number_from_oc_env_says_to_decode_it_not_to_drop_quotes(capsys, override, key, rule):
    """oc.env returns a string, default included: "drop the quotes" would be no way out. The line names the
    interpolation and the override that works (oc.decode, quoted whole), which then passes."""
    raw = override.partition("=")[2]
    line = _compose_error(capsys, override, code=2)
    value = raw.rstrip("}").rpartition(",")[2]
    fix = f'{key}="${{oc.decode:{raw}}}"'
    assert line.endswith(f"must be {rule} (got the string '{value}': {raw} resolves to a string): wrap it in "
                         f"oc.decode, quoted for hydra and the shell alike: '{fix}'."), line
    from verl_offgrpo.cli.compose import dry_run

    assert dry_run([*BASE, fix]) == 0  # the argument the shell passes for '{fix}'
    pasted = subprocess.run(["bash", "-c", f"printf '%s' '{fix}'"], capture_output=True, text=True).stdout
    assert pasted == fix  # the line as pasted into bash reaches hydra whole
    capsys.readouterr()


def test_a_plain_verl_job_keeps_verls_own_handling_of_its_counts():
    """Not selecting the plugin: test_freq=null passes verl's validate_config as it does without the plugin, and
    a word for the batch size meets verl's own TypeError, not the plugin's line."""
    from _overrides import validate_as_main_ppo, verl_config

    validate_as_main_ppo(verl_config("trainer.test_freq=null"))
    with pytest.raises(TypeError):
        validate_as_main_ppo(verl_config("data.train_batch_size=abc"))


KL_IN_LOSS = "put the KL in the loss (actor_rollout_ref.actor.use_kl_loss=true, algorithm.use_kl_in_reward=false)"


def test_kl_in_the_reward_is_refused_where_a_group_is_judged_by_its_rewards():
    """verl subtracts β·KL from each sample's reward before the estimator sees it: a group whose task rewards are
    all equal no longer has zero variance (the mask would miss it), and RED-Drop would count negatives on the
    penalised rewards. Without the mask, or with the KL in the loss, the config passes."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    kl = "algorithm.use_kl_in_reward=true"
    with pytest.raises(OffGRPOConfigError) as raised:
        validate_as_main_ppo(shipped_config(kl))
    assert str(raised.value) == (
        "algorithm.off_grpo.zero_var_mask=true with algorithm.use_kl_in_reward=true: β·KL makes the rewards of a "
        f"group whose task rewards are all equal differ, so the mask would miss it; {KL_IN_LOSS}, or set "
        "algorithm.off_grpo.zero_var_mask=false.")
    red_drop = ["algorithm.adv_estimator=red_drop", f"{K}.loss_mode=rec", "algorithm.norm_adv_by_std_in_grpo=false",
                f"{K}.rec.clip_mode=none"]
    with pytest.raises(OffGRPOConfigError) as raised:
        validate_as_main_ppo(shipped_config(*red_drop, kl, "algorithm.off_grpo.zero_var_mask=false"))
    assert str(raised.value) == (
        "algorithm.adv_estimator=red_drop with algorithm.use_kl_in_reward=true would count each group's negatives "
        f"(r < mean) on rewards minus β·KL, not on the task rewards: {KL_IN_LOSS}.")
    validate_as_main_ppo(shipped_config(kl, "algorithm.off_grpo.zero_var_mask=false"))
    validate_as_main_ppo(shipped_config("actor_rollout_ref.actor.use_kl_loss=true"))


def test_compose_says_a_rec_knob_that_is_no_number_must_be_one(capsys):
    said = _compose_error(capsys, f"{K}.loss_mode=rec", "algorithm.norm_adv_by_std_in_grpo=false", f"{K}.rec.tau=abc",
                          code=2)
    assert said == f"off_grpo config error: {NOT_NUMBERS[0][1]}"


@pytest.mark.parametrize("override, said", [
    (f"+{K}.recc.clip_mode=none", f"{K}.recc is no knob (did you mean {K}.rec?): OffGRPOPolicyLossConfig "
                                  "(policy_loss._target_) has no field 'recc', so verl would refuse the job."),
    (f"+{K}.zzzz=1", f"{K}.zzzz is no knob: OffGRPOPolicyLossConfig (policy_loss._target_) has no field 'zzzz', so "
                     "verl would refuse the job (its fields: loss_mode, "),
], ids=["recc", "zzzz"])
def test_a_key_under_policy_loss_that_is_no_field_is_named_with_the_field_it_misspells(capsys, override, said):
    """It was verl's "OffGRPOPolicyLossConfig.__init__() got an unexpected keyword argument 'recc'" (compose exit 4)."""
    rec = [f"{K}.loss_mode=rec", "algorithm.norm_adv_by_std_in_grpo=false"]
    assert _compose_error(capsys, *rec, override, code=2).startswith(f"off_grpo config error: {said}")


@pytest.mark.parametrize("override, said", [
    (f"{K}=null", f"{K} is null: it must be a section (not null) with its loss_mode (off_grpo or rec, the plugin's "
                  "losses) and the rec knobs, as the plugin's yaml sets it: drop the override that sets it to null, and "
                  "change single keys instead (e.g. policy_loss.loss_mode=rec)."),
    (f"{K}=rec", f"{K} must be a section with its loss_mode (got 'rec'): did you mean policy_loss.loss_mode=rec?"),
], ids=["null", "a_loss_name"])
def test_a_policy_loss_that_is_no_section_says_so(capsys, override, said):
    """It was "sync_period=10 trains on samples of a lagged policy α: set ...loss_mode=off_grpo or rec", at v = 1
    "checks passed" (verl would fail later)."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    for v in (1, 10):
        with pytest.raises(OffGRPOConfigError) as raised:
            validate_as_main_ppo(shipped_config(override, f"algorithm.off_grpo.sync_period={v}"))
        assert str(raised.value) == said
    assert _compose_error(capsys, override, code=2) == f"off_grpo config error: {said}"


NO_LOGPROBS = [f"{K}.loss_mode=rec", "algorithm.norm_adv_by_std_in_grpo=false",
               "actor_rollout_ref.rollout.calculate_log_probs=false"]
ANCHOR_ALPHA = (f"{K}.rec.anchor=alpha measures ρ against α, so it needs α's log-probs as r' per token: set "
                "actor_rollout_ref.rollout.calculate_log_probs=true and algorithm.rollout_correction.rollout_is=token ")


@pytest.mark.parametrize("v, rollout_is, said", [
    (10, "token", "(got False, 'token'); at algorithm.off_grpo.sync_period=10 every anchor needs them."),
    (1, "sequence", f"(got False, 'sequence'); {K}.rec.anchor=pi_k needs rollout_is=token (or null) too."),
    (1, "token", f"(got False, 'token'), or {K}.rec.anchor=pi_k."),
], ids=["lagged", "v1_sequence", "v1_token"])
def test_rec_without_alphas_log_probs_offers_anchor_pi_k_only_where_it_passes(v, rollout_is, said):
    """anchor=pi_k was offered at sync_period=10 too, where it fails on "sync_period=10 needs α's log-probs"."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    overrides = [*NO_LOGPROBS, f"algorithm.off_grpo.sync_period={v}", f"algorithm.rollout_correction.rollout_is={rollout_is}"]
    with pytest.raises(OffGRPOConfigError) as raised:
        validate_as_main_ppo(shipped_config(*overrides))
    assert str(raised.value) == ANCHOR_ALPHA + said
    following = shipped_config(*overrides, f"{K}.rec.anchor=pi_k")
    if said.endswith(f", or {K}.rec.anchor=pi_k."):  # offered: following it passes
        validate_as_main_ppo(following)
    else:
        with pytest.raises(OffGRPOConfigError):
            validate_as_main_ppo(following)


@pytest.mark.parametrize("overrides, said", [
    (["+algorithm.sync_period=10"],  # hydra's advice for algorithm.sync_period=10: passed, trained at v = 1
     "algorithm.sync_period is not where the plugin reads it: nothing reads it there, so the job would run as if it "
     "were unset; set algorithm.off_grpo.sync_period=10 instead (no +: the plugin's yaml sets every knob)."),
    (["+algorithm.zero_var_mask=false"], "algorithm.zero_var_mask is not where the plugin reads it: nothing reads it "
     "there, so the job would run as if it were unset; set algorithm.off_grpo.zero_var_mask=False instead (no +: "),
    (["+actor_rollout_ref.rollout.sync_period=4"], "actor_rollout_ref.rollout.sync_period is not where the plugin "
     "reads it: nothing reads it there, so the job would run as if it were unset; set algorithm.off_grpo.sync_period=4"),
    (["+algorithm.rec.clip_mode=ring"], "algorithm.rec is not where the plugin reads it: nothing reads it there, so "
     f"the job would run as if it were unset; set {K}.rec.clip_mode=ring instead (no +: the plugin's yaml sets every "
     "knob)."),
    ([f"+{K}.eps_low_prime=0.2"], f"{K}.eps_low_prime is not where the plugin reads it: nothing reads it there, so "
     f"the job would run as if it were unset; set {K}.rec.eps_low_prime=0.2 instead (no +: the plugin's yaml sets every knob)."),
    (["+trainer.off_grpo.sync_period=3"], "trainer.off_grpo is not where the plugin reads it: nothing reads it "
     "there, so the job would run as if it were unset; set algorithm.off_grpo.sync_period=3 instead (no +: the "
     "plugin's yaml sets every knob)."),
    # the knob flattened into its section's name, and the paper's symbols as keys of algorithm
    (["+algorithm.off_grpo_sync_period=10"], "algorithm.off_grpo_sync_period is not where the plugin reads it: nothing "
     "reads it there, so the job would run as if it were unset; set algorithm.off_grpo.sync_period=10 instead (no +: "),
    (["+offgrpo-zero-var-mask=false"], "offgrpo-zero-var-mask is not where the plugin reads it: "
     "nothing reads it there, so the job would run as if it were unset; set algorithm.off_grpo.zero_var_mask=False"),
    (["+algorithm.OFF_GRPO_SYNC_PERIOD=10"], "algorithm.OFF_GRPO_SYNC_PERIOD is not where the plugin reads it: "
     "nothing reads it there, so the job would run as if it were unset; set algorithm.off_grpo.sync_period=10 instead"),
    (["+algorithm.v=10"], "algorithm.v is not where the plugin reads it: nothing reads it there, so the job would run "
     "as if it were unset; set algorithm.off_grpo.sync_period=10 instead (no +: "),
    (["+algorithm.i=2"], "algorithm.i is not where the plugin reads it: nothing reads it there, so the job would run "
     "as if it were unset; set actor_rollout_ref.actor.ppo_epochs=2 instead (no +: verl's yaml sets it)."),
], ids=["algorithm", "algorithm_mask", "rollout", "algorithm_rec", "policy_loss_leaf", "section_elsewhere",
        "flattened", "flattened_elsewhere", "flattened_upper", "symbol_v", "symbol_i"])
def test_a_plugin_knob_appended_outside_its_section_is_refused(capsys, overrides, said):
    """hydra's "To append to your config use +..." for a knob without its section led here: verl's checks pass, nothing
    reads the key and the job trains at the knob's default. Refused in verl's validate_config before Ray (compose:
    exit 2), naming the knob's path."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    with pytest.raises(OffGRPOConfigError) as raised:
        validate_as_main_ppo(shipped_config(*overrides))
    assert str(raised.value).startswith(said), str(raised.value)
    assert _compose_error(capsys, *overrides, code=2).startswith(f"off_grpo config error: {said}")


@pytest.mark.parametrize("override", ["+algorithm.weight=2", "+reward_model.tau=0.5", "+data.anchor=x",
                                      "+trainer.v=1", "+data.i=0", "+v=10", "+i=2", "+algorithm.off_grpo_note=x",
                                      "+reward.custom_reward_function.reward_kwargs.off_grpo_std_eps=0.1"])
def test_common_words_among_the_rec_knobs_pass_elsewhere(override):
    """The rec knobs with common names (weight, tau, anchor) may be another package's keys: left alone; so are v and i
    outside ``algorithm``, an ``off_grpo_`` key that names no knob, and one in a free-form map (a reward function's
    kwargs)."""
    from _overrides import shipped_config, validate_as_main_ppo

    validate_as_main_ppo(shipped_config(override))


def test_trainer_v1_set_to_null_is_refused_where_the_v1_trainer_reads_it():
    """main_ppo picks the V1 trainer's class by config.trainer.v1.trainer_mode: a null section failed there, after
    Ray started (with the mask on, the plugin's check named mode 'sync' instead). v0 never reads it: passes."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config.readable import UnreadableConfigError

    with pytest.raises(UnreadableConfigError, match=r"^trainer\.v1=null replaces a section of verl's config"):
        validate_as_main_ppo(shipped_config("trainer.v1=null", "algorithm.off_grpo.zero_var_mask=false"))
    validate_as_main_ppo(shipped_config("trainer.v1=null", "trainer.use_v1=false"))


def test_a_parameter_sync_step_that_does_not_divide_the_batch_is_refused_on_v1():
    """verl's V1 step asserts train_batch_size % parameter_sync_step == 0 at its first step, after Ray and vLLM
    (the window, refused with it, falls back to per_step under auto, so nothing else stopped it): refused before.
    One that divides passes; v0 never reads it."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    with pytest.raises(OffGRPOConfigError, match=r"^trainer\.v1\.sync\.parameter_sync_step=3 must divide "
                                                 r"data\.train_batch_size=1024: verl's V1 trainer splits"):
        validate_as_main_ppo(shipped_config("+trainer.v1.sync.parameter_sync_step=3"))
    validate_as_main_ppo(shipped_config("+trainer.v1.sync.parameter_sync_step=4"))
    validate_as_main_ppo(shipped_config("+trainer.v1.sync.parameter_sync_step=3", "trainer.use_v1=false"))
    # verl reads trainer.v1.<its mode>.parameter_sync_step (the plugin's mode presents itself as sync)
    colocate = ("trainer.v1.trainer_mode=colocate_async", "algorithm.off_grpo.zero_var_mask=false")
    validate_as_main_ppo(shipped_config(*colocate, "+trainer.v1.sync.parameter_sync_step=3"))
    with pytest.raises(OffGRPOConfigError, match=r"^trainer\.v1\.colocate_async\.parameter_sync_step=3 must divide"):
        validate_as_main_ppo(shipped_config(*colocate, "+trainer.v1.colocate_async.parameter_sync_step=3"))
    with pytest.raises(OffGRPOConfigError, match=r"^trainer\.v1\.colocate_async\.parameter_sync_step must be an integer "
                                                 r">= 1 \(got 0\); it counts the optimizer steps"):
        validate_as_main_ppo(shipped_config(*colocate, "+trainer.v1.colocate_async.parameter_sync_step=0"))


@pytest.mark.parametrize("override, code, said", [
    ("trainer.use_v1=${oc.env:OFF_GRPO_TEST_UNSET_U}", 5, "config error (unreadable): trainer.use_v1="
     "${oc.env:OFF_GRPO_TEST_UNSET_U} does not resolve: the environment variable OFF_GRPO_TEST_UNSET_U is not set"),
    ("trainer.use_v1=null", 2, "off_grpo config error: trainer.use_v1"),
], ids=["unresolved", "null"])
def test_a_trainer_flag_that_is_not_one_is_said_in_one_line(capsys, override, code, said):
    """Whether trainer.v1 must be a section depends on trainer.use_v1: a use_v1 that cannot be read is said in its
    own line (the unresolved ${...}, the flag's check), not a traceback from the section check."""
    assert _compose_error(capsys, override, code=code).startswith(said)


def test_a_field_of_a_sections_own_dataclass_is_not_a_misplaced_knob(tmp_path, monkeypatch):
    """Another package's policy-loss dataclass with a clip_mode field of its own: its key is that class's, not a rec
    knob without rec. (the walk skips fields of the section's _target_)."""
    import dataclasses
    import sys
    import types

    from verl_offgrpo.config.misplaced import refuse_misplaced_knobs

    module = types.ModuleType("other_pkg_losses")

    @dataclasses.dataclass
    class OtherLoss:
        loss_mode: str = "x"
        clip_mode: str = "dual"

    module.OtherLoss = OtherLoss
    monkeypatch.setitem(sys.modules, "other_pkg_losses", module)
    config = {"actor_rollout_ref": {"actor": {"policy_loss": {"_target_": "other_pkg_losses.OtherLoss",
                                                               "loss_mode": "x", "clip_mode": "dual"}}}}
    refuse_misplaced_knobs(config)
    config["actor_rollout_ref"]["actor"]["policy_loss"]["_target_"] = "other_pkg_losses.Missing"
    with pytest.raises(Exception, match=r"^actor_rollout_ref\.actor\.policy_loss\.clip_mode is not where"):
        refuse_misplaced_knobs(config)


@pytest.mark.parametrize("section", ["algorithm.off_grpo", "actor_rollout_ref.actor.policy_loss.rec"])
def test_a_plugin_section_set_to_null_is_refused(section):
    """``algorithm.off_grpo=null`` after ``sync_period=10`` dropped every knob before it and ran on-policy on the
    defaults without a word (and ``rec=null`` the rec knobs): one line, as for a section of verl's."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config.readable import UnreadableConfigError

    escaped = section.replace(".", r"\.")
    with pytest.raises(UnreadableConfigError, match=rf"^{escaped}=null replaces a section of the plugin's config, "
                                                    rf"which its trainer reads key by key: drop that override"):
        validate_as_main_ppo(shipped_config("algorithm.off_grpo.sync_period=10", f"{section}=null"))


@pytest.mark.parametrize("override, hint", [
    ("+algorithm.off_grpo.rec.clip_mode=two-side", "'rec' belongs under actor_rollout_ref.actor.policy_loss.rec: "
                                                   "actor_rollout_ref.actor.policy_loss.rec.<knob>=..."),
    ("+algorithm.off_grpo.tau=0.5", "'tau' belongs under actor_rollout_ref.actor.policy_loss.rec: "
                                    "actor_rollout_ref.actor.policy_loss.rec.tau=..."),
])
def test_a_rec_knob_under_algorithm_off_grpo_points_to_its_section(override, hint):
    """The rec loss's knobs live in the actor's policy_loss section; written under algorithm.off_grpo, the unknown-key
    line says where they belong."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    with pytest.raises(OffGRPOConfigError, match=r"^Unknown key\(s\) under algorithm\.off_grpo") as raised:
        validate_as_main_ppo(shipped_config(override))
    assert hint in str(raised.value)


def test_a_custom_reward_function_verl_could_not_load_is_refused_before_the_workers(tmp_path):
    """verl loads reward.custom_reward_function after Ray, the actor and vLLM started (FileNotFoundError,
    AttributeError there): a missing file or module, a missing or misspelt name, each one line before; the plugin's
    own scorer, a name defined in a try block, and a module whose names cannot be read without running it pass."""
    from _overrides import shipped_config, validate_as_main_ppo

    from verl_offgrpo.config import OffGRPOConfigError

    def reward(path, name="compute_score"):
        return shipped_config(f"reward.custom_reward_function.path={path}", f"reward.custom_reward_function.name={name}")

    validate_as_main_ppo(reward("pkg://verl_offgrpo.rewards"))
    with pytest.raises(OffGRPOConfigError, match=r"^reward\.custom_reward_function\.name=compute_scor: "
                                                 r"pkg://verl_offgrpo\.rewards defines no compute_scor \(did you mean "
                                                 r"compute_score\?\); verl would stop at its first reward"):
        validate_as_main_ppo(reward("pkg://verl_offgrpo.rewards", "compute_scor"))
    with pytest.raises(OffGRPOConfigError, match=r"^reward\.custom_reward_function\.path=pkg://no_such\.module: no "
                                                 r"module no_such\.module is importable here"):
        validate_as_main_ppo(reward("pkg://no_such.module"))
    missing = tmp_path / "absent.py"
    with pytest.raises(OffGRPOConfigError, match=rf"^reward\.custom_reward_function\.path={missing}: no such file"):
        validate_as_main_ppo(reward(missing))
    guarded = tmp_path / "guarded.py"
    guarded.write_text("try:\n    import math\n    def score(**kw):\n        return 1.0\nexcept ImportError:\n    pass\n")
    validate_as_main_ppo(reward(f"file://{guarded}", "score"))
    with pytest.raises(OffGRPOConfigError, match=r"defines no compute_score"):
        validate_as_main_ppo(reward(guarded))
    starred = tmp_path / "starred.py"
    starred.write_text("from math import *\n")
    validate_as_main_ppo(reward(starred, "anything"))


def test_a_knob_inside_a_list_is_refused_and_a_knob_in_its_own_section_has_no_other_home():
    """"A key anywhere in the config": a list's dicts are walked too (``x[0].sync_period``); home_of names a knob's
    section only where the key is elsewhere (compose's hint), None where it already sits there."""
    from verl_offgrpo.config.misplaced import home_of, refuse_misplaced_knobs

    with pytest.raises(Exception, match=r"^custom\.hooks\[0\]\.sync_period is not where the plugin reads it: .*set "
                                        r"algorithm\.off_grpo\.sync_period=10 instead\.$"):
        refuse_misplaced_knobs({"custom": {"hooks": [{"name": "h", "sync_period": 10}]}})
    assert home_of("algorithm.sync_period") == "algorithm.off_grpo"
    assert home_of("algorithm.off_grpo.sync_period") is None
    assert home_of("actor_rollout_ref.actor.policy_loss.rec.clip_mode") is None
    assert home_of("algorithm.clip_mode") == "actor_rollout_ref.actor.policy_loss.rec"
