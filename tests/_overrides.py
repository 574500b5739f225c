"""Hydra overrides shared by the tests that compose a config (test_config.py, test_patches.py)."""

# what every runnable config needs anyway (verl's own checks)
BASE = [
    "actor_rollout_ref.model.path=/models/none",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
]
