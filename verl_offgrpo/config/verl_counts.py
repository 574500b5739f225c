"""verl's own counts that a selecting job's checks and trainers read, which must be integers before they do.

verl 0.9.1's ``validate_config`` meets a word or a null in ``data.train_batch_size`` with
``TypeError: not all arguments converted during string formatting``, and ``trainer.test_freq=null`` (or
``save_freq=null``) passes it and every check, then stops the V1 trainer's ``fit`` at its first step, after Ray,
vLLM and the model have started; a ``data.gen_batch_size`` that is not an integer fails in verl's dataloader there
too. The rollout's sizes (``tensor_model_parallel_size``, ``data_parallel_size``, ``max_num_seqs``,
``val_kwargs.n``), the TransferQueue's ``total_storage_size`` and V1's ``parameter_sync_step`` pick which of the
plugin's checks and trainer paths run (the window's room, its rounds, the served-weights check's reach): a word
there passes verl's ``validate_config`` and would skip them. For a config that selects the plugin each is one
line before any of that; a plain verl config is left to verl.

The colocated rollout's layout too (:func:`check_rollout_fits_the_gpus`): verl 0.9.1's actor-rollout worker asserts
that its world (``trainer.n_gpus_per_node`` × ``trainer.nnodes``) divides into replicas of TP × DP × PP GPUs
(``engine_workers.py``, "rollout world_size ... is not divisible by infer_world_size"), after Ray, the model and
FSDP have started; the shipped yaml's TP = 2 on one GPU is the usual case."""

from __future__ import annotations

from typing import Any

from verl_offgrpo import PRESENTED_MODE, TRAINER_MODE

from .readers import flag_at, rollout_layout, uses_v1, v1_mode
from .values import ABSENT, OffGRPOConfigError, is_int, quoted_number_error, written_value

ROLLOUT = "actor_rollout_ref.rollout"
SYNC_STEPS = "trainer.v1.sync.parameter_sync_step"
#: dotted path -> (least value or None, the rest of its line, whether a null is left to verl); absent keys are left
#: to verl
COUNTS = {
    "data.train_batch_size": (1, "it counts the prompts per step", False),
    "data.gen_batch_size": (1, "it counts the prompts of one dataloader fetch", True),
    "actor_rollout_ref.actor.ppo_mini_batch_size": (1, "it counts the prompts per optimizer step", False),
    "trainer.test_freq": (None, "validation runs every that many steps, and -1 turns it off", False),
    "trainer.save_freq": (None, "a checkpoint is saved every that many steps, and -1 turns it off", False),
    "trainer.total_training_steps": (1, "it counts the steps of the run (null: from the data and total_epochs)", True),
    "trainer.n_gpus_per_node": (1, "it counts the GPUs per node", False),
    "trainer.nnodes": (1, "it counts the nodes", False),
    f"{ROLLOUT}.tensor_model_parallel_size": (1, "it counts the GPUs of one vLLM replica's tensor parallelism", True),
    f"{ROLLOUT}.data_parallel_size": (1, "it counts the vLLM data-parallel ranks of one replica", True),
    f"{ROLLOUT}.max_num_seqs": (1, "it counts the sequences one vLLM engine runs at once", True),
    f"{ROLLOUT}.val_kwargs.n": (1, "it counts the responses per validation prompt", True),
    "transfer_queue.backend.SimpleStorage.total_storage_size": (1, "it counts the samples verl's TransferQueue holds",
                                                                True),
    SYNC_STEPS: (1, "it counts the optimizer steps per weight sync of V1's sync mode", True),
}


def check_verl_counts(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` for a count of :data:`COUNTS` that is not an integer (a quoted number
    is told to drop its quotes) or is below its least value: "``path`` must be an integer >= 1 (got 'abc'); ..."."""
    for dotted, rule in COUNTS.items():
        _check_count(config, dotted, *rule)
    check_parameter_sync_step_divides(config)


def _check_count(config: Any, dotted: str, least: int | None, what: str, null_is_verls: bool) -> None:
    """One count of :data:`COUNTS` (or another key read by the same rule): absent, or a null left to verl, passes."""
    value = written_value(config, dotted, ABSENT)
    if value is ABSENT or (value is None and null_is_verls):
        return
    rule = "an integer" if least is None else f"an integer >= {least}"
    quoted = quoted_number_error(dotted, value, rule)
    if quoted is not None:
        raise quoted
    if not is_int(value) or (least is not None and value < least):
        raise OffGRPOConfigError(f"{dotted} must be {rule} (got {value!r}); {what}.")


def check_parameter_sync_step_divides(config: Any) -> None:
    """verl 0.9.1's V1 ``PPOTrainer.step`` splits each batch of ``data.train_batch_size`` prompts into
    ``parameter_sync_step`` local updates and asserts that it divides, at the first step, after Ray and vLLM. It reads
    ``trainer.v1.<its mode>.parameter_sync_step``; the plugin's mode presents itself as ``sync``."""
    if not uses_v1(config):
        return
    mode = v1_mode(config)
    key = f"trainer.v1.{PRESENTED_MODE if mode == TRAINER_MODE else mode}.parameter_sync_step"
    if key not in COUNTS:  # another mode's: the same rule as the sync mode's
        _check_count(config, key, *COUNTS[SYNC_STEPS])
    steps = written_value(config, key, None)
    batch = written_value(config, "data.train_batch_size", None)
    if is_int(steps) and is_int(batch) and steps > 1 and batch % steps:
        raise OffGRPOConfigError(
            f"{key}={steps} must divide data.train_batch_size={batch}: verl's V1 trainer splits each batch into that "
            "many local updates and stops at its first step otherwise."
        )


def check_rollout_fits_the_gpus(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` where the colocated rollout's replica (TP × DP × PP GPUs of
    ``actor_rollout_ref.rollout``) does not divide the trainer's GPUs (``n_gpus_per_node`` × ``nnodes``); counts
    that are absent or not integers are left to :func:`check_verl_counts` and verl, and so is a rollout outside the
    hybrid engine (``actor_rollout_ref.hybrid_engine=false``: verl's separate rollout pool, its own GPU counts)."""
    if not flag_at(config, "actor_rollout_ref.hybrid_engine", True):
        return
    layout = rollout_layout(config)
    if layout is None or layout.gpus % layout.replica_gpus == 0:
        return
    written = " × ".join([f"tensor_model_parallel_size={layout.tensor}"]
                         + [f"{name}={value}" for name, value in (("data_parallel_size", layout.data),
                                                                  ("pipeline_model_parallel_size", layout.pipeline))
                            if value > 1])
    default = " (verl's yaml sets 2)" if layout.tensor == 2 else ""
    fix = (f"set {ROLLOUT}.tensor_model_parallel_size to one that divides {layout.gpus}{default}"
           if layout.data == layout.pipeline == 1 else
           f"choose {ROLLOUT}'s tensor × data × pipeline parallel sizes so that their product divides {layout.gpus}")
    raise OffGRPOConfigError(
        f"{ROLLOUT}.{written} makes a vLLM replica of {layout.replica_gpus} GPUs, which the trainer's {layout.gpus} "
        f"(trainer.n_gpus_per_node={layout.per_node} × trainer.nnodes={layout.nodes}) cannot be split into, and verl "
        f"would stop at its workers' start-up, after Ray and the model: {fix}."
    )
