#!/usr/bin/env bash
# DeepScaleR, DeepSeek-R1-Distill-Qwen-1.5B: off-policy GRPO (v = 10, i = 1), mask on; val AIME24 + MATH-500.
source "$(dirname "${BASH_SOURCE[0]}")/_common.sh"
offgrpo_run deepscaler trainer.experiment_name=deepscaler_offpolicy_v10 \
    algorithm.off_grpo.sync_period=10 actor_rollout_ref.actor.ppo_epochs=1 algorithm.off_grpo.zero_var_mask=true \
    -- "$@"
