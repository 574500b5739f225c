"""clip_mode=ring with an infinite ε_high (actor.clip_ratio_high=inf): no finite ε′_high exceeds it, so the fix the
message gives must not be "set eps_high_prime above inf" (eps_high_prime must be finite)."""

import pytest

import verl  # noqa: F401  (loads the plugin)
from verl_offgrpo.config import OffGRPOConfigError
from verl_offgrpo.config.validate import validate_off_grpo_config

from _overrides import shipped_config

REC = ("actor_rollout_ref.actor.policy_loss.loss_mode=rec", "actor_rollout_ref.actor.policy_loss.rec.clip_mode=ring")


def test_ring_with_infinite_clip_ratio_high_names_a_fix_that_can_work():
    with pytest.raises(OffGRPOConfigError) as err:
        validate_off_grpo_config(shipped_config(*REC, "actor_rollout_ref.actor.clip_ratio_high=inf"))
    said = str(err.value)
    assert "above inf" not in said
    assert "actor_rollout_ref.actor.clip_ratio_high" in said and "\n" not in said
