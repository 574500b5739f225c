"""Every trained rollout must be sampled now, by vLLM, from the policy its log-probs α describe.

The plugin's loss and its served-policy guard read r' = π_k/α with α the log-probs vLLM returned while sampling at
``rollout.temperature``. Two verl 0.9.1 features hand the trainer rollouts that break this, without a word:

* verl's rollout skip (``skip.rollout``, ``skip.rollout_tq``, ``skip.async_rollout``, ``verl.utils.skip``) replays
  the trajectories and log-probs an earlier run dumped instead of generating them, so α is whatever policy served
  that run, under a lag the plugin's schedule does not know;
* a ``__do_sample__`` column in the training data: verl's V1 agent loop (``agent_loop_tq``) pops it from each prompt
  and samples the rows where it is false greedily (temperature 0), while vLLM reports the log-softmax of the raw
  logits for the argmax tokens, not the probability they were drawn with.

A selecting job with either is refused before any GPU work.
"""

from __future__ import annotations

from typing import Any, Optional

from .readers import flag_at, local_parquet_files
from .values import OffGRPOConfigError
from .values import config_value as _get

#: verl 0.9.1's rollout-skip switches (``skip.*.enable``, the ``SkipManagerConfig`` of ppo_trainer.yaml)
SKIPS = ("skip.rollout.enable", "skip.rollout_tq.enable", "skip.async_rollout.enable")
#: the per-prompt column verl's V1 agent loop reads as "sample this row" (false: greedy)
DO_SAMPLE = "__do_sample__"


def check_rollouts_are_sampled_now(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` for a rollout skip that is on, or training data with a ``__do_sample__``
    column."""
    for dotted in SKIPS:
        if flag_at(config, dotted, False):
            raise OffGRPOConfigError(
                f"{dotted}=true replays the rollouts and log-probs an earlier run dumped instead of sampling them from "
                "vLLM, so α would not be the policy this run serves (the loss's r' and the served-policy guard read "
                f"it): set {dotted}=false."
            )
    for path in local_parquet_files(_get(config, "data.train_files")):
        if _has_column(path, DO_SAMPLE):
            raise OffGRPOConfigError(
                f"data.train_files: {path} has a {DO_SAMPLE} column: verl's V1 agent loop samples the rows where it is "
                "false greedily, while vLLM's log-probs α describe sampling at rollout.temperature, so the loss's r' "
                f"would be wrong there: drop the column."
            )


def _has_column(path: str, name: str) -> Optional[bool]:
    """Whether the parquet file's schema has ``name``; None where it cannot be read here (left to verl)."""
    try:
        import pyarrow.parquet as pq

        return name in pq.read_schema(path).names
    except Exception:  # noqa: BLE001 - not parquet, not readable: verl reads it and says so, or not
        return None


__all__ = ["DO_SAMPLE", "SKIPS", "check_rollouts_are_sampled_now"]
