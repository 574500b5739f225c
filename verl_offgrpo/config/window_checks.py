"""The checks of ``rollout_schedule=window``: whether a config can generate a whole sync window of v steps in
one generation phase (V1 trainer mode ``off_grpo_sync`` only, no refills), which
``auto`` (the default) resolves to at v > 1 wherever it can, and how many samples that puts on each vLLM engine:

    samples per engine = ⌈v · data.train_batch_size · rollout.n / engines⌉,  engines = ⌊GPUs / (TP·DP·PP)⌋ · DP
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Any

from verl_offgrpo import TRAINER_MODE

from .off_grpo import AUTO, PREFIX, OffGRPOConfig
from .readers import flag_at, knobs_of, rollout_layout, samples_per_step, uses_v1, v1_mode
from .refill_checks import REFILLS
from .values import OffGRPOConfigError
from .values import config_value as _get
from .values import is_int as _is_int

logger = logging.getLogger(__name__)


#: a user's replay-buffer class in verl's V1 trainer (``PPOTrainer._create_replay_buffer``), handed ``refill_fn``
CUSTOM_SAMPLER = "trainer.v1.sampler.custom_sampler"
#: where verl's V1 trainer keeps rollouts until their step trains on them (its ``transfer_queue`` yaml)
STORAGE_SIZE = "transfer_queue.backend.SimpleStorage.total_storage_size"


def window_problem(config: Any, knobs: OffGRPOConfig | None = None) -> tuple[str, str] | None:
    """Why ``config`` cannot generate a whole sync window at once, as (cause, fix), or None: the window is the
    V1 trainer mode's, and one generation phase samples the prompts of v steps (v × ``data.train_batch_size``,
    each step's batch fetched as ``per_step`` fetches it, in ``data.gen_batch_size`` chunks where that divides
    the batch: :mod:`.refill_checks`), so nothing may refill a batch after it (verl's own
    ReplayBuffer serves them, no custom sampler), verl's TransferQueue must hold the window's v·B·n samples,
    and a validation inside a window needs a sync (vLLM drops α after generating) and room beside the window.
    ``rollout_schedule=window`` raises "<schedule> <cause>: <fix>."; ``auto`` falls back to per_step and names
    the cause."""
    knobs = knobs_of(config, knobs)
    per_step = f"{PREFIX}.rollout_schedule=per_step"
    if not uses_v1(config):
        return (f"runs in the V1 trainer mode {TRAINER_MODE} only, not with trainer.use_v1=false",
                f"set trainer.use_v1=true, or {per_step}")
    if v1_mode(config) != TRAINER_MODE:
        return f"needs trainer.v1.trainer_mode={TRAINER_MODE} (got {v1_mode(config)!r})", f"set it, or {per_step}"
    for dotted, what in (*REFILLS, ("skip.rollout_tq.enable", "skip rollouts")):
        if flag_at(config, dotted, False):
            return f"cannot {what} after the window's one generation phase", f"set {dotted}=false, or {per_step}"
    if _get(config, f"{CUSTOM_SAMPLER}.path") and _get(config, f"{CUSTOM_SAMPLER}.name"):
        return (f"serves the window's buffered batches through verl's ReplayBuffer, not a custom sampler "
                f"({CUSTOM_SAMPLER}, which verl lets refill)", f"drop {CUSTOM_SAMPLER}, or {per_step}")
    train = _get(config, "data.train_batch_size")
    k = _get(config, "trainer.v1.sync.parameter_sync_step", 1)
    if k not in (None, 1):
        return (f"does not combine with trainer.v1.sync.parameter_sync_step={k!r} (verl's own batched generation)",
                "drop that override")
    n = _get(config, "actor_rollout_ref.rollout.n", 1)
    size = _get(config, STORAGE_SIZE) if _get(config, "transfer_queue.backend.storage_backend") == "SimpleStorage" else None
    steps = longest_window(config, knobs.sync_period)
    if all(_is_int(x) for x in (size, train, n)) and steps * train * n > size:
        spans = "v" if steps == knobs.sync_period else "T"  # trainer.total_training_steps ends the one window
        return (f"holds a window's {spans}·B·n = {steps * train * n} samples at once in verl's TransferQueue, "
                f"more than {STORAGE_SIZE}={size}", f"raise it (host memory), or {per_step}")
    test_freq = _get(config, "trainer.test_freq", -1)
    val_batch, val_n = _get(config, "data.val_batch_size"), _get(config, "actor_rollout_ref.rollout.val_kwargs.n", 1)
    total = total_training_steps(config)
    if (_is_int(test_freq) and test_freq > 0 and all(_is_int(x) for x in (size, train, n, val_batch, val_n))
            and (held := validation_peak(knobs.sync_period, test_freq, train * n, val_batch * val_n, total)) > size):
        return (f"can hold a validation batch (data.val_batch_size × rollout.val_kwargs.n) beside the window's "
                f"samples still in verl's TransferQueue, {held} in all, more than {STORAGE_SIZE}={size}",
                f"raise it (host memory), lower data.val_batch_size, or {per_step}")
    if _is_int(test_freq) and test_freq > 0 and not knobs.sync_before_validate:
        return ("lets vLLM drop α after each window's generation, so validation needs a sync",
                f"set {PREFIX}.sync_before_validate=true (or trainer.test_freq=-1)")
    return None


def total_training_steps(config: Any) -> int | None:
    """T = ``trainer.total_training_steps`` where set (≥ 1); None where verl derives it from the data."""
    total = _get(config, "trainer.total_training_steps")
    return total if _is_int(total) and total >= 1 else None


def window_length(step: int, period: int, total_steps: int | None = None) -> int:
    """k(s): steps in the window that starts at step ``step`` (≥ 1), ending at the next sync step or T:
    k(s) = min(⌈s/v⌉·v, T) − s + 1 (the trainer's schedule, :mod:`verl_offgrpo.sync.window`, reads it here)."""
    step, period = int(step), int(period)
    if step < 1 or period < 1:
        raise ValueError(f"window_length needs step >= 1 and period >= 1 (got step={step}, period={period})")
    end = -(-step // period) * period  # ⌈s/v⌉·v: the step whose slot syncs next
    if total_steps is not None:
        end = min(end, int(total_steps))
    return max(1, end - step + 1)


def longest_window(config: Any, period: int) -> int:
    """The most steps one window spans: v, or T (:func:`total_training_steps`) where that is set below it (the
    last window ends at T, :func:`window_length`). An unset T reads as v."""
    total = total_training_steps(config)
    return period if total is None else min(period, total)


def validation_peak(period: int, test_freq: int, batch_samples: int, val_samples: int, total: int | None = None) -> int:
    """Samples in verl's TransferQueue during a validation inside a window: verl validates after step s before it
    clears s's batch, and the window holds its steps up to end(s) = min(⌈s/v⌉·v, T), so the most is

        max_s (end(s) − s + 1)·B·n + val      over s = test_freq, 2·test_freq, … ≤ T, and s = T (verl validates
                                              after the last step too)

    which, once T reaches lcm(test_freq, v) + v (or T unknown: ``total`` None), is (v − gcd(test_freq, v) + 1)·B·n +
    val: (−s) mod v takes its largest value v − gcd within one lcm of steps, with a whole window after it."""
    if total is None or total >= math.lcm(test_freq, period) + period:
        return (period - math.gcd(test_freq, period) + 1) * batch_samples + val_samples
    held = max(window_length(s, period, total) for s in [*range(test_freq, total + 1, test_freq), total])
    return held * batch_samples + val_samples


def resolve_rollout_schedule(config: Any, knobs: OffGRPOConfig | None = None) -> OffGRPOConfig:
    """``knobs`` with ``rollout_schedule`` resolved from ``auto`` (the default): ``window`` where sync_period > 1
    and :func:`window_problem` finds nothing, else ``per_step``. Pure over the config, so the driver and the
    trainer's processes resolve it alike (:func:`tell_rollout_schedule` says which, once, in the driver)."""
    knobs = knobs_of(config, knobs)
    if knobs.rollout_schedule != AUTO:
        return knobs
    can_window = knobs.sync_period > 1 and window_problem(config, knobs) is None
    return dataclasses.replace(knobs, rollout_schedule="window" if can_window else "per_step")


def tell_rollout_schedule(config: Any, requested: OffGRPOConfig) -> None:
    """One line at sync_period > 1 when ``rollout_schedule=auto`` was resolved: the window (info), or per_step
    and the window's refusal with its fix (:func:`window_problem`; a warning, since the run loses the window's
    speed)."""
    if requested.rollout_schedule != AUTO or requested.sync_period == 1:
        return
    problem = window_problem(config, requested)
    if problem:
        cause, fix = problem
        logger.warning(
            "off_grpo: %s.rollout_schedule=auto generates every step at sync_period=%d: the window (vLLM generating "
            "a sync window's rollouts at once, faster where generation is a large part of the step) %s; for the "
            "window: %s.",
            PREFIX, requested.sync_period, cause, fix.removesuffix(f", or {PREFIX}.rollout_schedule=per_step"),
        )
    else:
        logger.info("off_grpo: %s.rollout_schedule=auto: vLLM generates the rollouts of each window of %d steps at "
                    "once (window); %s.rollout_schedule=per_step generates every step.",
                    PREFIX, longest_window(config, requested.sync_period), PREFIX)


def refuse_impossible_window(config: Any, knobs: OffGRPOConfig | None = None) -> OffGRPOConfig:
    """Raise :class:`OffGRPOConfigError` if ``rollout_schedule=window`` cannot run with ``config``
    (:func:`window_problem`); return the knobs, ``auto`` resolved. Logs nothing."""
    knobs = resolve_rollout_schedule(config, knobs)
    if knobs.rollout_schedule == "window":
        problem = window_problem(config, knobs)
        if problem:
            raise OffGRPOConfigError(f"{PREFIX}.rollout_schedule=window {problem[0]}: {problem[1]}.")
    return knobs


def check_window_config(config: Any, knobs: OffGRPOConfig | None = None) -> OffGRPOConfig:
    """:func:`refuse_impossible_window`, then :func:`advise_on_window`; return the knobs, ``auto`` resolved."""
    knobs = refuse_impossible_window(config, knobs)
    advise_on_window(config, knobs)
    return knobs


def advise_on_window(config: Any, knobs: OffGRPOConfig) -> None:
    """The advisory lines of a window that :func:`refuse_impossible_window` let through (``knobs`` resolved)."""
    if knobs.rollout_schedule != "window":
        return
    why = f"{PREFIX}.rollout_schedule=window"
    if knobs.sync_period == 1:
        logger.warning("off_grpo: %s with sync_period=1 is on-policy GRPO (a window of one step).", why)
    if knobs.keep_weights == "no_sleep":
        logger.info(
            "off_grpo: %s.keep_weights=no_sleep does nothing with %s: a window's rollouts are all generated right "
            "after its sync, so vLLM holds no α that a later step needs.", PREFIX, why,
        )
    if knobs.empty_cache_on_skip == "always":
        logger.info(
            "off_grpo: %s.empty_cache_on_skip=always does nothing with %s: a window wakes vLLM only to sync, never on "
            "a skipped sync.", PREFIX, why,
        )
    save_freq = _get(config, "trainer.save_freq", -1)
    if knobs.sync_period > 1 and _is_int(save_freq) and save_freq > 0 and save_freq % knobs.sync_period:
        logger.info(
            "off_grpo: trainer.save_freq=%d is not a multiple of sync_period=%d, so checkpoints fall inside windows; "
            "a resume from one starts a new window and generates the rest of the old one's prompts (up to %d "
            "steps' worth) again, from the resumed policy. A multiple of %d avoids that.",
            save_freq, knobs.sync_period, knobs.sync_period - 1, knobs.sync_period,
        )


def window_samples_per_engine(config: Any, sync_period: int) -> int | None:
    """Samples each vLLM engine holds when a window of ``sync_period`` steps (at most T: :func:`longest_window`) is
    generated at once, or None.

    ⌈v · ``data.train_batch_size`` · ``rollout.n`` / engines⌉, engines of :class:`.readers.RolloutLayout`: verl
    spreads the requests over its replicas, and each engine (one per data-parallel rank of a replica) has its own
    ``max_num_seqs``.
    """
    layout, samples = rollout_layout(config), samples_per_step(config)
    if layout is None or samples is None:
        return None
    return math.ceil(longest_window(config, sync_period) * samples / max(layout.engines, 1))


def token_budget(config: Any) -> int | None:
    """The tokens vLLM may schedule in one step: ``rollout.max_num_batched_tokens``, which verl itself raises
    to ``max_model_len`` only without chunked prefill (verl 0.9.1 ``vLLMHttpServer._validate_configs``; an unset
    ``max_model_len`` becomes :func:`model_max_position_embeddings`); None if not a number or not known here.
    vLLM refuses to start with fewer than ``max_num_seqs`` (each running sequence needs one token of it)."""
    rollout = "actor_rollout_ref.rollout"
    tokens = _get(config, f"{rollout}.max_num_batched_tokens")
    if not _is_int(tokens):
        return None
    if flag_at(config, f"{rollout}.enable_chunked_prefill", True):
        return tokens
    model_len = _get(config, f"{rollout}.max_model_len")
    if not _is_int(model_len):
        model_len = model_max_position_embeddings(config)
    return max(tokens, model_len) if _is_int(model_len) else None


def model_max_position_embeddings(config: Any) -> int | None:
    """What verl 0.9.1 makes of an unset ``rollout.max_model_len``: the model's ``max_position_embeddings``
    (``verl.workers.rollout.utils.get_max_position_embeddings``: the HF config's, else its ``text_config``'s, after
    ``model.override_config``), read here from a local model folder's ``config.json``; None where the model is not
    a local folder (a hub id: unknown before verl downloads it) or the value is not there."""
    model = "actor_rollout_ref.model"
    override = _get(config, f"{model}.override_config") or {}
    if hasattr(override, "get"):
        override = override.get("model_config", override)
        if _is_int(value := override.get("max_position_embeddings")):
            return value
    path = _get(config, f"{model}.hf_config_path") or _get(config, f"{model}.path")
    config_file = Path(str(path)) / "config.json" if path else None  # verl reads ~ as written (.tilde_path_checks)
    if config_file is None or not config_file.is_file():
        return None
    try:
        hf = json.loads(config_file.read_text())
    except (OSError, ValueError):
        return None
    value = hf.get("max_position_embeddings")
    if value is None and isinstance(hf.get("text_config"), dict):
        value = hf["text_config"].get("max_position_embeddings")
    return value if _is_int(value) else None


def check_max_num_seqs_fits_batched_tokens(config: Any) -> None:
    """vLLM refuses ``max_num_seqs`` above the step's :func:`token_budget` at startup: checked before any GPU
    work, since raising ``max_num_seqs`` for a window is the advice of :func:`tell_if_window_runs_in_waves`."""
    rollout = "actor_rollout_ref.rollout"
    if _get(config, f"{rollout}.name", "vllm") != "vllm":
        return
    seqs, budget = _get(config, f"{rollout}.max_num_seqs"), token_budget(config)
    if _is_int(seqs) and budget is not None and budget < seqs:
        raised = "" if budget == _get(config, f"{rollout}.max_num_batched_tokens") else (
            " (verl raises it to max_model_len without chunked prefill)")
        raise OffGRPOConfigError(
            f"{rollout}.max_num_seqs={seqs} is more than {rollout}.max_num_batched_tokens={budget}{raised}, which vLLM "
            f"refuses at startup: set {rollout}.max_num_batched_tokens={seqs} (or more) too."
        )


def tell_if_window_runs_in_waves(config: Any, sync_period: int) -> None:
    """One info line when vLLM's ``max_num_seqs`` cannot hold a window's samples: the window's generation
    then runs at most ``max_num_seqs`` at a time, ≈ ⌈samples / max_num_seqs⌉ rounds (vLLM refills a
    finished sequence's slot at once, so the rounds overlap). Information, not a warning: where the
    engine is already busy at ``max_num_seqs``, one batch per window is not much faster; and no number is
    suggested: a window's whole count (thousands of sequences) can take the GPU's memory."""
    per_engine = window_samples_per_engine(config, sync_period)
    seqs = _get(config, "actor_rollout_ref.rollout.max_num_seqs")
    if per_engine is None or not _is_int(seqs) or seqs <= 0 or seqs >= per_engine:
        return
    rollout = "actor_rollout_ref.rollout"
    budget = token_budget(config)
    tokens = " (and max_num_batched_tokens, as large)" if budget is not None and budget < per_engine else ""
    logger.info(
        "off_grpo: each vLLM engine runs its %d window samples %d at a time (≈ %d rounds); where it is not busy at "
        "%d, a larger %s.max_num_seqs%s shortens generation, at a GPU-memory cost: raise it in a short run first "
        "(docs/window.md).",
        per_engine, seqs, math.ceil(per_engine / seqs), seqs, rollout, tokens,
    )

