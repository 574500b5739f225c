#!/usr/bin/env bash
# GSM8K, Qwen2.5-0.5B-Instruct: sample reuse, i = 10 passes over each batch, v = 1, mask on.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
offgrpo_run gsm8k trainer.experiment_name=gsm8k_reuse_i10 \
    algorithm.off_grpo.sync_period=1 actor_rollout_ref.actor.ppo_epochs=10 algorithm.off_grpo.zero_var_mask=true \
    -- "$@"
