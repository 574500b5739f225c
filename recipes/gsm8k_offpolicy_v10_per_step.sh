#!/usr/bin/env bash
# GSM8K, Qwen2.5-0.5B-Instruct: off-policy GRPO at v = 10 with every step generating its own batch from the
# lagged weights (rollout_schedule=per_step): the same lag schedule and prompts per step as
# gsm8k_offpolicy_v10.sh, whose default (auto) generates each window of 10 steps at once.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
offgrpo_run gsm8k trainer.experiment_name=gsm8k_offpolicy_v10_per_step \
    algorithm.off_grpo.sync_period=10 algorithm.off_grpo.rollout_schedule=per_step \
    actor_rollout_ref.actor.ppo_epochs=1 algorithm.off_grpo.zero_var_mask=true \
    -- "$@"
