#!/usr/bin/env bash
# GSM8K, Qwen2.5-0.5B-Instruct: off-policy GRPO at v = 10 with the windowed rollout: the step after each sync
# generates the batches of the whole window at once (V1 trainer); the same lag schedule and prompts per step
# as gsm8k_offpolicy_v10.sh.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
offgrpo_run gsm8k trainer.experiment_name=gsm8k_offpolicy_v10_window \
    algorithm.off_grpo.sync_period=10 algorithm.off_grpo.rollout_schedule=window \
    actor_rollout_ref.actor.ppo_epochs=1 algorithm.off_grpo.zero_var_mask=true \
    -- "$@"
