"""The plugin's knobs: everything under ``algorithm.off_grpo.*``.

Paper: Mroueh et al., "Revisiting Group Relative Policy Optimization: Insights into On-Policy and
Off-Policy Training", arXiv 2505.22257 (ICLR 2026). Symbols below follow the paper: v is the sync
period (the rollout engine serves the lagged policy α = π_{k−v}), R the reference reset period, ε the
clip width (taken from verl's ``actor.clip_ratio``), i the SGD passes per batch (verl's
``actor.ppo_epochs``).

The knobs of verl that the method uses are verl's own and are not repeated here:
``actor_rollout_ref.actor.clip_ratio`` (ε; ``clip_ratio_low``/``clip_ratio_high`` per side),
``actor_rollout_ref.actor.ppo_epochs`` (i), ``actor_rollout_ref.actor.use_kl_loss`` /
``kl_loss_coef`` (β) / ``kl_loss_type``, ``algorithm.norm_adv_by_std_in_grpo``.

The defaults live in one place, :class:`OffGRPOKnobs`; the shipped yaml
(``verl_offgrpo/config/off_grpo_trainer.yaml``) is checked against it by the tests.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

KEEP_WEIGHTS_MODES = ("sleep_level1", "no_sleep")
EMPTY_CACHE_ON_SKIP_MODES = ("always", "if_needed")
ROLLOUT_SCHEDULES = ("per_step", "window")


@dataclass(frozen=True)
class OffGRPOKnobs:
    """``algorithm.off_grpo.*`` with their defaults. Grouped as in the paper."""

    # ---- Advantage (paper §2, eq. (1)): A = (r − mean_group(r)) / sqrt(std_group(r)² + ε_std) ----
    std_unbiased: bool = field(
        default=True,
        metadata={"help": "Group std with Bessel's correction (N−1, as torch.std and verl's grpo). "
                  "false: population std (N)."},
    )
    std_eps: float = field(
        default=1e-6,
        metadata={"help": "ε_std in sqrt(std² + ε_std), keeps A finite for low-variance groups. Must be > 0."},
    )
    zero_var_mask: bool = field(
        default=True,
        metadata={"help": "Groups whose rewards are all equal (σ = 0) leave the loss entirely: their tokens "
                  "leave the token-mean denominator and the KL term, not only A = 0 (paper §4, 'masking "
                  "zero-variance groups'). Singleton groups are not masked (verl's grpo behaviour). Needs "
                  "actor.loss_agg_mode token-mean or token-sum: verl's seq-mean modes divide by a fixed "
                  "batch size that masked rows would stay in (rejected at start-up). With a loss other than "
                  "off_grpo, a mini-batch with every group masked logs actor/pg_loss NaN (warned at start-up). "
                  "A mini-batch with every group masked takes no optimizer step (a console line says so, and the "
                  "off_grpo loss logs actor/off_grpo/skipped_optimizer_step_frac): "
                  "AdamW would otherwise move the weights by its momentum (verl_offgrpo/empty_update.py)."},
    )

    # ---- Lagged sync (paper §3: the rollout engine serves α = π_{k−v}) ----
    sync_period: int = field(
        default=1,
        metadata={"help": "v: trainer→vLLM weight sync every v steps. 1 = on-policy GRPO. The first step "
                  "and the step after a resume always sync."},
    )
    rollout_schedule: str = field(
        default="per_step",
        metadata={"help": "When vLLM generates under a lag (V1 trainer). 'per_step': every step wakes vLLM and "
                  "samples its own batch from α. 'window': the step that syncs samples the prompts of all "
                  "v steps of the window at once from α, and the next v steps train on them in order: one "
                  "wake, one generation phase and one sync per window (paper Alg. 1; same data distribution)."},
    )
    sync_before_validate: bool = field(
        default=True,
        metadata={"help": "Sync the current π into vLLM before a validation pass (trainer.test_freq), so "
                  "validation scores the current policy, not α."},
    )
    keep_weights: str = field(
        default="sleep_level1",
        metadata={"help": "How vLLM keeps α between syncs. 'sleep_level1': vLLM sleeps at level 1 (weights "
                  "offloaded to CPU, restored on wake; verl's default level 2 discards them). Costs host "
                  "memory for one copy of the weights and a CPU round trip per step (the copy after every "
                  "rollout is timing_s/off_grpo_sleep: 0.13-0.21 s more than level 2 for 7B at TP=2): a "
                  "skipped sync slot "
                  "took 0.20-0.24 s for a 1.5B model on one H100 vs 0.29-0.41 s for a real sync, and "
                  "0.85 s vs 1.56 s for a 7B model served with TP=4 on four H100s (results/README.md). "
                  "'no_sleep': vLLM never sleeps (rollout.free_cache_engine=False): no round trip (saves "
                  "0.05-0.07 s per step for a 135M model), but its weights and KV cache stay on the GPU "
                  "during training: +42 GiB held at gpu_memory_utilization=0.3 on an "
                  "H200 (results/keep_weights.json). The actor's peak plus vLLM's share must fit: for 7B with "
                  "FSDP param + optimizer offload on two 80 GB H100s the update needed > 61.8 GiB per GPU and "
                  "ran out of memory beside vLLM at 0.2 (17.1 GiB)."},
    )

    empty_cache_on_skip: str = field(
        default="if_needed",
        metadata={"help": "On a skipped sync (sleep_level1), before vLLM wakes, the actor workers may hand "
                  "their cached device memory back (torch empty_cache), as verl's own sync always does. "
                  "'if_needed': each worker first reads its free device memory and empties its cache only "
                  "when free < rollout.gpu_memory_utilization x total memory (the most vLLM's pool can take "
                  "back on wake); otherwise the wake fits beside the cache and the call is skipped. Measured "
                  "on one H100 (1.5B, gpu_memory_utilization 0.4): 0.51 free, the cache stayed on all 17 "
                  "skipped steps, no out-of-memory, skipped slot 0.16 s (wake only); 7B with FSDP offload on two "
                  "H100s: 0.59 free, kept on all 13 skipped steps. A worker that keeps its cache does not wait "
                  "for the device work the actor update left queued (verl's non_blocking FSDP offload copies: "
                  "that wait was 0.57 of the 0.85 s 7B skipped slot; without it the slot was 0.52 s, the "
                  "copies then overlapping vLLM's wake). 'always': every "
                  "skipped step, after that wait (timing_s/off_grpo_skip_actor_wait); wait and empty_cache were "
                  "0.17-0.19 s of a 0.33-0.37 s skipped slot for that 1.5B model, 0.74 of 1.06 s for the 7B "
                  "offload run, and 0.58 of 0.85 s for 7B with TP=4 on four H100s, where the trainer reserves "
                  "51.7 of 79.2 GB per GPU, so if_needed empties there too at 0.4 (results/README.md §3). "
                  "Either way the free memory is logged (off_grpo/skip_min_free_frac); the first time if_needed "
                  "has to empty, it warns once with the free fraction it saw, below which "
                  "rollout.gpu_memory_utilization keeps the cache."},
    )

    verify_served_weights: bool = field(
        default=True,
        metadata={"help": "Exact check, in every vLLM worker, that a wake without a sync serves α bit for bit (checksum "
                  "recorded at each sync); a difference stops the run (ServedPolicyError). ~20 ms a slot at 1.5B (est.)."},
    )
    max_log_rprime_after_sync: float = field(
        default=1.0,
        metadata={"help": "Served-policy guard. On a step whose batch was sampled right after a weight sync "
                  "(rollout lag 0, so α = π_k up to numerics), mean |log π_k/α| over its response tokens above "
                  "this stops the run with an error before the update: the engine is not serving the "
                  "trainer's weights. Correct engines measured 0.001-0.06 (bf16 vLLM vs FSDP); an engine that "
                  "lost its weights and emits token 0 gives about -log pi_k(token 0), ~11 for a random-init "
                  "model. Needs r' (rollout log-probs). 0 = off."},
    )
    max_log_rprime_lagged: float = field(
        default=5.0,
        metadata={"help": "Served-policy guard for lagged batches (rollout lag >= 1, sampled after a skipped "
                  "sync, whose wake restores α without a transfer: where a broken sleep/wake shows). Mean "
                  "|log π_k/α| above this stops the run before the update. It grows with the lag by design: "
                  "0.1-0.5 measured at lag 1-9 (135M at lr 1e-5, a tiny model at lr 1e-3; random-init 1.5B "
                  "and 7B stay near their 0.02-0.06 floor); an engine that lost its weights gives ~11. 0 = off."},
    )

    # ---- Reference policy (paper §3: π_ref ← π_θ every R steps) ----
    ref_reset_period: int = field(
        default=0,
        metadata={"help": "R: copy the actor into the reference model every R steps. 0 = never."},
    )

    # ---- Safety ----
    allow_truncated_rprime: bool = field(
        default=False,
        metadata={"help": "Accept a finite algorithm.rollout_correction.rollout_is_threshold or rejection "
                  "sampling with loss off_grpo (r' = π_k/α truncated or tokens dropped: not the paper's "
                  "objective). false: such configs are rejected at startup."},
    )

    @classmethod
    def from_config(cls, off_grpo_cfg: Mapping[str, Any] | None) -> "OffGRPOKnobs":
        """Read ``algorithm.off_grpo`` (DictConfig, dict or None). Unknown keys raise (typos)."""
        values = dict(off_grpo_cfg or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"Unknown key(s) under algorithm.off_grpo: {unknown}. Known keys: {sorted(known)}."
            )
        return cls(**values)


#: knobs that take one of a few names, and the names
CHOICES = {
    "keep_weights": KEEP_WEIGHTS_MODES,
    "empty_cache_on_skip": EMPTY_CACHE_ON_SKIP_MODES,
    "rollout_schedule": ROLLOUT_SCHEDULES,
}


def invalid_choice(knobs: OffGRPOKnobs) -> str | None:
    """The error message for the first knob of :data:`CHOICES` outside its names; None if all are valid."""
    for name, names in CHOICES.items():
        value = getattr(knobs, name)
        if value not in names:
            return f"algorithm.off_grpo.{name} must be one of {names} (got {value!r})."
    return None


def knobs_from_algorithm(algorithm_cfg: Any) -> OffGRPOKnobs:
    """The knobs from verl's ``algorithm`` config (a DictConfig, a dict or an AlgoConfig)."""
    if algorithm_cfg is None:
        return OffGRPOKnobs()
    getter = algorithm_cfg.get if hasattr(algorithm_cfg, "get") else lambda k, d=None: getattr(algorithm_cfg, k, d)
    return OffGRPOKnobs.from_config(getter("off_grpo", None))


def default_knobs_dict() -> dict[str, Any]:
    return dataclasses.asdict(OffGRPOKnobs())
