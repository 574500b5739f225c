"""Hydra overrides and compositions shared by the tests that compose a config (test_config.py,
test_patches.py, test_final_outputs.py)."""

# what every runnable config needs anyway (verl's own checks; rollout.name is ??? in verl's yaml, which a selecting
# job's validation refuses)
BASE = [
    "actor_rollout_ref.model.path=/models/none",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
]

#: the override that selects the plugin's lagged checkpoint manager on the v0 trainer (trainer.use_v1=false)
V0_MANAGER = "+actor_rollout_ref.rollout.checkpoint_manager_class=verl_offgrpo.sync.checkpoint_manager_v0.LaggedCheckpointManager"


def shipped_config(*overrides):
    """The plugin's ``off_grpo_trainer`` yaml with :data:`BASE` and ``overrides``."""
    from hydra import compose, initialize_config_dir

    from verl_offgrpo.cli.paths import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        return compose(config_name="off_grpo_trainer", overrides=BASE + list(overrides))


def verl_config(*overrides):
    """verl's own ppo_trainer config with verl's GRPO: a plain verl job."""
    from pathlib import Path

    import verl
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=BASE + ["algorithm.adv_estimator=grpo", *overrides])


def validate_as_main_ppo(config):
    """verl's ``validate_config`` as main_ppo imports and calls it (the plugin's wrapper, for a selecting config)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    return validate_config(config=config, use_reference_policy=need_reference_policy(config),
                           use_critic=need_critic(config))
