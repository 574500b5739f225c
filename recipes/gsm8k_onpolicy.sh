#!/usr/bin/env bash
# GSM8K, Qwen2.5-0.5B-Instruct: on-policy GRPO (v = 1, i = 1), zero-variance groups not masked.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
offgrpo_run gsm8k trainer.experiment_name=gsm8k_onpolicy \
    algorithm.off_grpo.sync_period=1 actor_rollout_ref.actor.ppo_epochs=1 algorithm.off_grpo.zero_var_mask=false \
    -- "$@"
