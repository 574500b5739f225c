"""The V1 trainer mode ``off_grpo_sync``: verl's colocated ``PPOTrainerSync`` with the lagged sync.

Selected by ``trainer.v1.trainer_mode=off_grpo_sync`` (the shipped yaml sets it); registered with
verl's ``register_trainer`` when ``verl.trainer.ppo.v1`` is imported (see :func:`register`).

* It presents itself to verl as ``"sync"``: ``trainer_mode`` is a property that returns "sync" and
  ignores verl's assignment in ``PPOTrainer.__init__`` (the configured name is kept in
  ``configured_trainer_mode``). Every ``self.trainer_mode == "sync"`` test in ``trainer_base`` (replay
  buffer class, exact refill, TransferQueue checkpointing, in-flight re-issue) and the per-mode config
  ``trainer.v1.sync`` behave as in verl's sync mode.
* Construction checks the config (:func:`verl_offgrpo.config.check_sync_config`, and the
  plugin's own startup checks) before any worker exists; with ``keep_weights=no_sleep`` and
  ``sync_period > 1`` it sets ``rollout.free_cache_engine=false`` itself.
* Its replay buffer polls the TransferQueue every :data:`SAMPLE_POLL_S` (verl 0.9.1's ``ReplayBuffer``
  constructor argument ``poll_interval``, 2 s by default), so a step's sampling ends when its last
  group finishes rather than on the next 2 s tick.
* ``_setup`` swaps verl's ``CheckpointEngineManager`` for :class:`LaggedCheckpointManager` (same
  config, actor group and replicas) right after verl built it, so every ``update_weights`` call —
  ``on_init_end``, ``on_step_end``, the wake inside ``_validate`` — goes through the schedule.
* ``on_step_end`` runs verl's (``update_weights`` timer) and hands the slot's metrics to verl's
  ``_pending_sync_metrics``, which ``fit`` merges into the step's metrics right after ``on_step_end``.
  Validation runs after ``on_step_end``; the manager already synced π in that slot when
  ``sync_before_validate`` is on.
* ``rollout_schedule=window`` (:mod:`.window`): ``prepare_step`` (verl: submit this step's prompts)
  submits the k batches of B prompts of a whole window on the window's first step, each tagged with the
  step that trains on it, and nothing on the others; verl's sync replay buffer then serves each step its
  own B finished groups from the TransferQueue. A checkpoint inside a window saves the dataloader state
  after the step's own batch. The
  window's first step waits until every group of the window is finished (``on_sample_begin``), then
  samples and sleeps vLLM; the other steps do not touch vLLM, and their sync slots neither transfer
  nor wake (the manager's ``window`` mode). A validation inside a window wakes vLLM with a
  forced sync; ``_validate`` puts it back to sleep and returns that sleep's metrics (``fit`` merged the
  step's sync metrics before it validated). One global step stays one update.
* ``skip_old_log_prob`` (:mod:`.old_log_prob_skip`): on a lagged batch ``_compute_old_log_prob`` and
  ``_compute_advantage`` run verl's bypass mode, and the loss takes π_k from the update's forward.

The subclass overrides and calls members of verl's trainer and replay buffer, private ones included:
:data:`VERL_INTERNALS` names them, and :func:`verl_offgrpo.patches.preflight` checks that they exist
before a selecting job starts (:data:`verl_offgrpo.patches.INTERNALS_MODULES`).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager, nullcontext
from typing import Any

from omegaconf import open_dict

from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from verl_offgrpo import ESTIMATOR_NAMES, PRESENTED_MODE, TRAINER_MODE

from ..config import OffGRPOConfig, advisories_silenced, resolve_rollout_schedule, validate_off_grpo_config
from ..config import config_value as _get
from ..config.readers import guards_verls_advantage
from .lagged_manager import LaggedCheckpointManager
from .old_log_prob_skip import (
    bypass_mode_for_this_batch,
    one_optimizer_step,
    rprime_terms_after_update,
    skipped_batch_metrics,
    skips_old_log_prob,
)
from .window import WINDOW, WindowSchedule

logger = logging.getLogger(__name__)

_TRAINER = "verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync"
_REPLAY_BUFFER = "verl.trainer.ppo.v1.replay_buffer.ReplayBuffer"
#: Written for verl 0.9.1: the class attributes of verl's V1 sync trainer and replay buffer that this
#: module overrides or calls; :func:`verl_offgrpo.patches.preflight` checks that they exist. It also
#: relies on instance attributes, which exist only once verl's constructors ran: ``PPOTrainer.trainer_mode``
#: (assigned in ``__init__``; shadowed here by a property), ``curr_step_profile``, ``global_steps`` (which
#: ``_next_train_batch`` and ``_submit_batch_to_rollout`` read as the prompts' tag), ``train_dataloader`` (its
#: ``state_dict``, which ``_save_checkpoint`` saves), ``total_training_steps``, ``steps_per_epoch``,
#: ``checkpoint_manager`` (verl's ``CheckpointEngineManager``: ``config``, ``actor_wg``, ``replicas``),
#: ``replay_buffer``, ``_pending_sync_metrics`` (read by ``_consume_sync_metrics`` right after ``on_step_end``),
#: and ``ReplayBuffer.poll_interval`` and ``ReplayBuffer.{pending,running,finished,failure}_keys``.
VERL_INTERNALS = (
    *(f"{_TRAINER}.{name}" for name in (
        "_setup", "_build_replay_buffer", "_compute_old_log_prob", "_compute_advantage", "_update_actor",
        "_add_prompts_to_generate", "_save_checkpoint",
        "_stop_rollout_profiling", "_consume_sync_metrics",
        "prepare_step", "on_sample_begin", "on_sample_end", "_validate", "on_step_end",
    )),
    f"{_REPLAY_BUFFER}._sync_metadata_from_transfer_queue",
)  # fmt: skip
#: verl 0.9.1's ``_consume_sync_metrics`` logs ``_pending_sync_metrics`` with the step (:meth:`OffGRPOSyncTrainer.on_step_end`
#: leaves the plugin's per-step metrics there; :func:`verl_offgrpo.patches.uses_problems`)
VERL_USES = ((f"{_TRAINER}._consume_sync_metrics", ("_pending_sync_metrics",)),)

#: seconds between the replay buffer's looks at the TransferQueue while a step waits for its groups
#: (verl 0.9.1's ``ReplayBuffer(poll_interval=2.0)``, which its trainer does not configure: a step's
#: generation then ends on the next 2 s tick, on average 1 s after its last group finished)
SAMPLE_POLL_S = 0.1


def wait_for_window(replay_buffer, num_prompts: int, partition_id: str = "train", poll_s: float = SAMPLE_POLL_S) -> None:
    """Block until ``num_prompts`` prompt groups of ``partition_id`` are terminal (finished or failed)
    and none is pending or running.

    Reads verl 0.9.1's ``ReplayBuffer`` metadata (``_sync_metadata_from_transfer_queue``, then its
    ``{pending,running,finished,failure}_keys``), the state its own ``sample`` polls.
    """
    import time

    while True:
        replay_buffer._sync_metadata_from_transfer_queue()
        terminal = len(replay_buffer.finished_keys[partition_id]) + len(replay_buffer.failure_keys[partition_id])
        inflight = len(replay_buffer.pending_keys[partition_id]) + len(replay_buffer.running_keys[partition_id])
        if terminal >= num_prompts and inflight == 0:
            return
        time.sleep(poll_s)


def submit_window(trainer, start: int, length: int) -> dict[int, Any]:
    """Submit the window's ``length`` batches, one ``train_batch_size`` fetch each, as the steps ``start``,
    ``start+1``, … would in ``per_step``; returns each step's dataloader state after its own batch.

    verl tags every prompt with ``trainer.global_steps`` at submission (``_next_train_batch``,
    ``_submit_batch_to_rollout``) and its sync replay buffer serves the lowest tags first
    (``ReplayBuffer._select_prompt_uids``), so tagging batch j with step start+j makes step start+j train on
    exactly its own batch, as ``per_step`` would; one tag for the whole window would split it at random."""
    batch_size = int(trainer.config.data.train_batch_size)
    states = {}
    step = trainer.global_steps
    try:
        for j in range(length):
            trainer.global_steps = start + j
            trainer._add_prompts_to_generate(batch_size)
            states[start + j] = trainer.train_dataloader.state_dict()
    finally:
        trainer.global_steps = step
    return states


@contextmanager
def dataloader_state_as(dataloader, state: Any):
    """``dataloader.state_dict()`` returns ``state`` inside the block (what verl's ``_save_checkpoint`` saves)."""
    dataloader.state_dict = lambda: state
    try:
        yield
    finally:
        del dataloader.state_dict


def prepare_v1_config(config: Any) -> OffGRPOConfig:
    """Checks (and the one automatic setting) done when the V1 mode is constructed; returns the knobs."""
    knobs = resolve_rollout_schedule(config, OffGRPOConfig.from_algorithm(_get(config, "algorithm")))  # logs nothing
    if (
        knobs.sync_period > 1
        and knobs.keep_weights == "no_sleep"
        and knobs.rollout_schedule != WINDOW  # the window never wakes vLLM without a sync: nothing to keep
        and bool(_get(config, "actor_rollout_ref.rollout.free_cache_engine", True))
    ):
        with open_dict(config):
            config.actor_rollout_ref.rollout.free_cache_engine = False
        logger.warning("verl-offgrpo: keep_weights=no_sleep: set actor_rollout_ref.rollout.free_cache_engine=False")
    with advisories_silenced():  # the driver's validate_config advised on this config already
        knobs = validate_off_grpo_config(config)
    if knobs.skips_lagged_old_log_prob:  # the loss runs in the actor workers: tell it there
        with open_dict(config):
            config.actor_rollout_ref.actor.policy_loss.pi_k_from_forward = True
    return knobs


class OffGRPOSyncTrainer(PPOTrainerSync):
    """``PPOTrainerSync`` whose weight sync follows the off-policy lag schedule."""

    def __init__(self, config):
        self.off_grpo_knobs = prepare_v1_config(config)
        self.windowed = self.off_grpo_knobs.rollout_schedule == WINDOW
        self.window_schedule: WindowSchedule | None = None
        self.window_generated = True  # whether this step's rollout ran (always, per_step)
        self.window_generation_began = 0.0  # perf_counter when the current window's prompts were submitted
        self.window_data_states: dict[int, Any] = {}  # per step of the window: dataloader state after its batch
        # the served-policy guard reads r' off a batch whose advantage is verl's only where r' is exact
        self.guards_verls_advantage = guards_verls_advantage(config)
        self.old_log_prob_skipped = False  # this step's batch: π_k from the update's forward (skip_old_log_prob)
        self.skip_refused_warned = False
        super().__init__(config)

    # verl assigns self.trainer_mode = config.trainer.v1.trainer_mode; keep presenting "sync".
    @property
    def trainer_mode(self) -> str:
        return PRESENTED_MODE

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.configured_trainer_mode = value

    def _setup(self):
        super()._setup()
        self.checkpoint_manager = self._make_lagged_manager(self.checkpoint_manager)

    def _build_replay_buffer(self):
        """verl's replay buffer, polling every :data:`SAMPLE_POLL_S` instead of its default 2 s."""
        replay_buffer = super()._build_replay_buffer()
        if getattr(replay_buffer, "poll_interval", 0.0) > SAMPLE_POLL_S:
            replay_buffer.poll_interval = SAMPLE_POLL_S
        return replay_buffer

    def _make_lagged_manager(self, base) -> LaggedCheckpointManager:
        if isinstance(base, LaggedCheckpointManager):
            return base
        return LaggedCheckpointManager(
            config=base.config, actor_wg=base.actor_wg, replicas=base.replicas, trainer=self, trainer_kind="v1"
        )

    # ------------------------------------------------------------------ windowed rollout
    def _windows(self) -> WindowSchedule:
        if self.window_schedule is None:
            self.window_schedule = WindowSchedule(self.off_grpo_knobs.sync_period, self._last_step())
            self.checkpoint_manager.window_schedule = self.window_schedule
        return self.window_schedule

    def _last_step(self) -> Any:
        """The last step verl's ``fit`` runs: ``total_training_steps``, or the end of ``trainer.total_epochs``
        epochs if that comes first (its loop stops there too), so the last window generates no unused batch."""
        total = getattr(self, "total_training_steps", None)
        per_epoch, epochs = getattr(self, "steps_per_epoch", None), _get(self.config, "trainer.total_epochs", None)
        if total is None or not per_epoch or epochs is None:
            return total
        return min(int(total), int(per_epoch) * int(epochs))

    def prepare_step(self) -> dict:
        """verl submits one train batch per step; with ``window`` the window's first step submits the
        whole window (k·B prompts) and the other steps submit nothing."""
        if not self.windowed:
            return super().prepare_step()
        windows = self._windows()
        step = int(self.global_steps)
        self.window_generated = windows.starts_window(step)
        if self.window_generated:
            version = self.checkpoint_manager.schedule.version
            if version != step - 1:  # vLLM slept at level 2 since its last sync: it holds no policy to sample
                raise RuntimeError(
                    f"verl-offgrpo: step {step} starts a rollout window, but vLLM was last synced at step {version}; "
                    "a window must start right after a sync (a bug in verl-offgrpo: report it)."
                )
            window = windows.begin(step, version)
            self.window_generation_began = time.perf_counter()
            self.window_data_states = submit_window(self, window.start, window.length)
        windows.draw()
        return windows.metrics(step, self.window_generated)

    def _save_checkpoint(self):
        """verl's, with the dataloader state of this step's own batch inside a window (:func:`submit_window`):
        a resume then fetches exactly the prompts the interrupted window had not trained on."""
        state = self.window_data_states.get(int(self.global_steps)) if self.windowed else None
        if state is None:
            return super()._save_checkpoint()
        with dataloader_state_as(self.train_dataloader, state):
            return super()._save_checkpoint()

    def on_sample_begin(self):
        """A window's first step waits until every group of the window is finished before it samples.

        verl's sync replay buffer returns as soon as B groups are finished, and the sleep after it only
        drains the requests vLLM already holds: groups of the window still queued in the agent loop
        would reach a sleeping engine (empty responses) and the B groups of the first step would be
        the ones that finished first (the shortest). Waiting for all of them keeps every step's batch its own,
        complete batch of prompts, as ``per_step`` gives it."""
        super().on_sample_begin()
        if self.windowed and self.window_generated:
            wait_for_window(self.replay_buffer, self.window_schedule.current.length * int(self.config.data.train_batch_size))

    def on_sample_end(self):
        """verl sleeps vLLM after every rollout; a step of a window that generated nothing leaves it asleep."""
        if self.window_generated:
            ended = super().on_sample_end()
            if self.windowed:  # vLLM asleep: the window's generation phase is over
                self.window_schedule.current.generation_s = time.perf_counter() - self.window_generation_began
            return ended
        if self.curr_step_profile:
            self._stop_rollout_profiling()

    def _validate(self) -> dict:
        """verl's validation; inside a window, which it woke (a forced sync), vLLM then sleeps again: the window's
        steps need no engine. ``fit`` merged the step's sync metrics before validating, so what the manager
        recorded for the step meanwhile (that sleep, a colocated reward model's; sums with the step's own) comes
        back with the validation's metrics, which ``fit`` merges into the step's."""
        manager, step = self.checkpoint_manager, int(self.global_steps)
        before = manager.step_metrics(step)
        metrics = super()._validate()
        windows = self.window_schedule
        if self.windowed and windows is not None and windows.current is not None and windows.current.remaining > 0:
            manager.sleep_replicas()
        recorded = {key: value for key, value in manager.step_metrics(step).items() if before.get(key) != value}
        return {**metrics, **recorded}

    def _compute_old_log_prob(self, batch, metrics: dict):
        """verl's π_k pass; with ``skip_old_log_prob`` on a lagged batch, verl's bypass of it
        (:mod:`.old_log_prob_skip`: α's log-probs stand in, the loss takes π_k from its own forward)."""
        if self.windowed:  # after this step's sampling: its window's generation is timed by now
            metrics.update(self.window_schedule.generation_metrics())
        knobs, manager = self.off_grpo_knobs, self.checkpoint_manager
        lag = manager.rollout_lag_of(int(self.global_steps))
        skip = skips_old_log_prob(knobs.skips_lagged_old_log_prob, lag)
        # lagged batches without the exact served-weights check on every worker keep the pass: the guard's
        # lagged limit is then their only check, and it reads r' before the update
        guarded = manager.lagged_limit_warns or knobs.max_log_rprime_lagged <= 0
        if skip and not (guarded and one_optimizer_step(len(batch), self.config)):
            skip = False
            if not self.skip_refused_warned:
                self.skip_refused_warned = True
                logger.warning(
                    "verl-offgrpo: step %s: skip_old_log_prob: verl's old_log_prob pass runs on this lagged batch "
                    "(%s); said once a run.", self.global_steps,
                    ("the window's sync is not checked on every vLLM engine, its lag-0 batch cannot reach them all, "
                     "or max_log_rprime_after_sync=0 leaves it unchecked" if self.windowed else
                     "the exact served-weights check does not reach every vLLM worker") if not guarded else
                    f"its {len(batch)} rows are more than one optimizer step of ppo_mini_batch_size × rollout.n",
                )  # fmt: skip
        self.old_log_prob_skipped = skip
        with self._bypass_if_skipped():
            return super()._compute_old_log_prob(batch, metrics=metrics)

    def _bypass_if_skipped(self):
        """verl's bypass mode around a call for this step's batch if its π_k pass is skipped, else nothing."""
        return bypass_mode_for_this_batch(self.config) if self.old_log_prob_skipped else nullcontext()

    def _compute_advantage(self, batch, metrics: dict):
        """verl's, then the rows that left the loss (zero-variance mask, RED-Drop) on ``loss_mask``/``response_mask``
        and the bound monitor; with another estimator (verl's, under the plugin's loss) only its r' terms. Either
        way the served-policy guard checks the batch before the update (a batch whose π_k pass was skipped has
        no r' before the update: lagged, see :mod:`.old_log_prob_skip`)."""
        import transfer_queue as tq

        from verl_offgrpo.sync.advantage_v1 import after_advantage_v1, rprime_metrics_v1

        with self._bypass_if_skipped():  # a skipped batch: no rollout_is_weights from α's log-probs twice
            batch = super()._compute_advantage(batch, metrics)
        if self.config.algorithm.adv_estimator in ESTIMATOR_NAMES:
            step_metrics = after_advantage_v1(tq, batch, self.config.algorithm)
        elif self.guards_verls_advantage:  # an error reading r' propagates: the guard must not pass it unread
            step_metrics = rprime_metrics_v1(tq, batch, self.off_grpo_knobs.allow_truncated_rprime)
        else:
            return batch
        if self.off_grpo_knobs.skip_old_log_prob:
            step_metrics = skipped_batch_metrics(step_metrics, self.old_log_prob_skipped)
        metrics.update(step_metrics)
        metrics.update(self.checkpoint_manager.check_served_policy(step_metrics, int(self.global_steps)))
        return batch

    def _update_actor(self, batch, metrics: dict):
        """verl's; after the update of a batch whose π_k pass was skipped, the bound monitor's r' terms from the
        loss and the served-policy guard on them (lagged limit and NaN, one update late: :mod:`.old_log_prob_skip`)."""
        batch = super()._update_actor(batch, metrics)
        if self.old_log_prob_skipped:
            terms = rprime_terms_after_update(metrics)
            metrics.update(terms)
            metrics.update(self.checkpoint_manager.check_served_policy(terms, int(self.global_steps)))
        return batch

    def on_step_end(self):
        super().on_step_end()
        pending = dict(getattr(self, "_pending_sync_metrics", None) or {})
        pending.update(self.checkpoint_manager.step_metrics(self.global_steps))
        self._pending_sync_metrics = pending


def register() -> type:
    """Register :class:`OffGRPOSyncTrainer` as ``off_grpo_sync`` (idempotent; raises on a name clash)."""
    if TRAINER_REGISTRY.get(TRAINER_MODE) is not OffGRPOSyncTrainer:
        register_trainer(TRAINER_MODE)(OffGRPOSyncTrainer)
    return OffGRPOSyncTrainer


# Imported before verl's V1 trainer package finished its own import hook (this module imports it), the
# hook leaves the registration to this line (:func:`verl_offgrpo.sync._register_v1_trainer`).
register()
