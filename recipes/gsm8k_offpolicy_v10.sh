#!/usr/bin/env bash
# GSM8K, Qwen2.5-0.5B-Instruct: off-policy GRPO, vLLM synced every v = 10 steps, i = 1, mask on.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
offgrpo_run gsm8k trainer.experiment_name=gsm8k_offpolicy_v10 \
    algorithm.off_grpo.sync_period=10 actor_rollout_ref.actor.ppo_epochs=1 algorithm.off_grpo.zero_var_mask=true \
    -- "$@"
