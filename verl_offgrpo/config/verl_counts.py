"""verl's own counts that a selecting job's checks and trainers read, which must be integers before they do.

verl 0.9.1's ``validate_config`` meets a word or a null in ``data.train_batch_size`` with
``TypeError: not all arguments converted during string formatting``, and ``trainer.test_freq=null`` passes
it and every check, then stops the V1 trainer's ``fit`` at its first step, after Ray, vLLM and the model have
started. The rollout's sizes (``tensor_model_parallel_size``, ``data_parallel_size``, ``max_num_seqs``,
``val_kwargs.n``), the TransferQueue's ``total_storage_size`` and V1's ``parameter_sync_step`` pick which of the
plugin's checks and trainer paths run (the window's room, its rounds, the served-weights check's reach): a word
there passes verl's ``validate_config`` and would skip them. For a config that selects the plugin each is one
line before any of that; a plain verl config is left to verl."""

from __future__ import annotations

from typing import Any

from .values import OffGRPOConfigError, is_int, quoted_number_error, written_value

ROLLOUT = "actor_rollout_ref.rollout"
#: dotted path -> (least value or None, the rest of its line, whether a null is left to verl); absent keys are left
#: to verl
COUNTS = {
    "data.train_batch_size": (1, "it counts the prompts per step", False),
    "actor_rollout_ref.actor.ppo_mini_batch_size": (1, "it counts the prompts per optimizer step", False),
    "trainer.test_freq": (None, "validation runs every that many steps, and -1 turns it off", False),
    "trainer.n_gpus_per_node": (1, "it counts the GPUs per node", False),
    "trainer.nnodes": (1, "it counts the nodes", False),
    f"{ROLLOUT}.tensor_model_parallel_size": (1, "it counts the GPUs of one vLLM replica's tensor parallelism", True),
    f"{ROLLOUT}.data_parallel_size": (1, "it counts the vLLM data-parallel ranks of one replica", True),
    f"{ROLLOUT}.max_num_seqs": (1, "it counts the sequences one vLLM engine runs at once", True),
    f"{ROLLOUT}.val_kwargs.n": (1, "it counts the responses per validation prompt", True),
    "transfer_queue.backend.SimpleStorage.total_storage_size": (1, "it counts the samples verl's TransferQueue holds",
                                                                True),
    "trainer.v1.sync.parameter_sync_step": (1, "it counts the optimizer steps per weight sync of V1's sync mode", True),
}
_ABSENT = object()


def check_verl_counts(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` for a count of :data:`COUNTS` that is not an integer (a quoted number
    is told to drop its quotes) or is below its least value: "``path`` must be an integer >= 1 (got 'abc'); ..."."""
    for dotted, (least, what, null_is_verls) in COUNTS.items():
        value = written_value(config, dotted, _ABSENT)
        if value is _ABSENT or (value is None and null_is_verls):
            continue
        rule = "an integer" if least is None else f"an integer >= {least}"
        quoted = quoted_number_error(dotted, value, rule)
        if quoted is not None:
            raise quoted
        if not is_int(value) or (least is not None and value < least):
            raise OffGRPOConfigError(f"{dotted} must be {rule} (got {value!r}); {what}.")
