#!/usr/bin/env bash
# DeepScaleR, DeepSeek-R1-Distill-Qwen-1.5B: on-policy GRPO (v = 1, i = 1), mask on; val AIME24 + MATH-500.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
offgrpo_run deepscaler trainer.experiment_name=deepscaler_onpolicy \
    algorithm.off_grpo.sync_period=1 actor_rollout_ref.actor.ppo_epochs=1 algorithm.off_grpo.zero_var_mask=true \
    -- "$@"
