#!/usr/bin/env python3
"""What the learning curves say about the paper's ordering (issue 7 §2): per config and seed, then over seeds.

For the committed add1 runs (``results/learning.json``, steps = global steps); the runs since issue 34
(steps = optimizer updates, held-out accuracy over seeds with intervals) are summarised by
``benchmarks/learning_stats.py``.

Reads ``learning.json`` (``benchmarks/learning.py``) and, for every config and seed, over the steps
``1 … H`` (``--horizon``; a run with fewer steps is summarised over the steps it has, and says so):

    steps             trained steps logged (≤ H)
    first_step_075    first step whose train reward ≥ 0.75 (None: not reached by H)
    reward_auc        mean train reward over steps 1 … min(H, steps): the area under the reward curve
                      per step, i.e. per prompt (every config sees the same prompts in the same order)
    reward_lag0       mean train reward on the steps whose samples came from the current π_k
                      (``rollout_lag`` 0: every step for v = 1; steps 1, 11, 21 … for v = 10)
    val_pass1         greedy held-out pass@1 at the validated steps ≤ H (step 0 = the starting policy)
    wall_s            training wall-clock to the last step ≤ H (start-up excluded; ``learning.curve``)
    wall_s_to_075     training wall-clock to ``first_step_075``
    step_time_s       median step time over steps 2 … H, leaving out the first step of every resumed
                      part (it repeats one-time start costs)
    device, concurrent_jobs, machine   where it ran (side-by-side jobs share a host; ``machine`` is
                      ``learning.py --machine``, the lease; wall-clock compares only within one of them)

and, per seed, the paired differences the paper's claims are about:

    mask_minus_on_policy   train reward, on_policy_mask − on_policy, mean over their common steps (paper: ≥ 0)
    v10_minus_mask         off_policy_v10 − on_policy_mask, mean over the common steps (v = 10 samples from
                           α = π_{k−lag}, so its train reward lags by design)
    v10_minus_mask_lag0    the same over the steps where v = 10 sampled from the current π_k (its
                           rollout lag 0: steps 1, 11, …), the like-for-like comparison (paper: ≈ 0)
    v10_wall_ratio         wall_s(off_policy_v10) / wall_s(on_policy_mask) to the same step  (paper: < 1)
    reuse_minus_mask       reuse_i10 − on_policy_mask, mean over the common steps: per prompt
    reuse_step_ratio       step_time_s(reuse_i10) / step_time_s(on_policy_mask)     (paper: ≫ 1)

Usage (no GPU)::

    python3 benchmarks/learning_summary.py --learning benchmarks/results/learning.json --horizon 19 --out benchmarks/results/learning_summary.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

#: train reward that counts as "learned" for ``first_step_075`` (the starting policy's samples score ~0.16)
LEARNED_REWARD = 0.75


def _resumed_first_steps(run: dict | None) -> set[int]:
    """The first step of every continued part of ``run`` (``resumed_from + 1``): it carries start costs."""
    parts = (run or {}).get("parts") or []
    return {p["resumed_from"] + 1 for p in parts if p.get("resumed_from")}


def seed_summary(rows: list[dict], horizon: int, run: dict | None = None) -> dict:
    """One run's curve ``rows`` (``learning.curve`` rows) summarised over steps 1 … ``horizon``."""
    trained = [r for r in rows if 1 <= r["step"] <= horizon and r.get("train_reward") is not None]
    rewards = [r["train_reward"] for r in trained]
    lag0 = [r["train_reward"] for r in trained if not r.get("rollout_lag")]
    skip = {1} | _resumed_first_steps(run)
    times = [r["step_time_s"] for r in trained if r["step"] not in skip and r.get("step_time_s") is not None]
    last = trained[-1] if trained else None
    learned = next((r for r in trained if r["train_reward"] >= LEARNED_REWARD), None)
    return {
        "steps": len(trained),
        "first_step_075": learned["step"] if learned else None,
        "wall_s_to_075": round(learned["wall_s"], 1) if learned else None,
        "reward_auc": round(statistics.fmean(rewards), 4) if rewards else None,
        "reward_lag0": round(statistics.fmean(lag0), 4) if lag0 else None,
        "val_pass1": {str(r["step"]): r["val_pass1"] for r in rows
                      if r["step"] <= horizon and r.get("val_pass1") is not None},  # fmt: skip
        "wall_s": round(last["wall_s"], 1) if last else None,
        "step_time_s": round(statistics.median(times), 3) if times else None,
        "device": (run or {}).get("device"),
        "concurrent_jobs": (run or {}).get("concurrent_jobs", 1),
        "machine": (run or {}).get("machine"),
    }


def _over_seeds(values: list[float | None]) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"mean": round(statistics.fmean(values), 4), "min": min(values), "max": max(values), "n": len(values)}


def reward_diff(rows_a: list[dict], rows_b: list[dict], horizon: int, lag0_of_a: bool = False) -> float | None:
    """Mean over the steps 1 … ``horizon`` that both curves have of train reward a − b (only the steps
    where ``a`` sampled from the current policy with ``lag0_of_a``); None without common steps."""
    def rewards(rows, lag0=False):
        return {r["step"]: r["train_reward"] for r in rows if 1 <= r["step"] <= horizon and r.get("train_reward")
                is not None and not (lag0 and r.get("rollout_lag"))}  # fmt: skip

    a, b = rewards(rows_a, lag0_of_a), rewards(rows_b)
    common = sorted(set(a) & set(b))
    return round(statistics.fmean(a[s] - b[s] for s in common), 4) if common else None


def _ratio(a: dict | None, b: dict | None, key: str) -> float | None:
    """``a[key] / b[key]`` for two runs on the same device and machine at the same concurrency (timings
    compare only there: two leases are two hosts), else None."""
    if not a or not b or not a.get(key) or not b.get(key):
        return None
    where = ("device", "concurrent_jobs", "machine")
    if [a.get(k) for k in where] != [b.get(k) for k in where]:
        return None
    return round(a[key] / b[key], 3)


def summarize(learning: dict, horizon: int) -> dict:
    """``{horizon, configs: {name: {seeds: {seed: seed_summary}, over_seeds: {...}}}, paired: {seed: {...}}}``."""
    runs = {(r["config"], str(r["seed"])): r for r in learning.get("runs", [])}
    configs = {}
    for name, cfg in learning["configs"].items():
        seeds = {s: seed_summary(rows, horizon, runs.get((name, s))) for s, rows in sorted(cfg["seeds"].items())}
        full = [x for x in seeds.values() if x["steps"] == horizon]  # seeds that reached the horizon
        configs[name] = {
            "v": cfg.get("v"), "i": cfg.get("i"), "zero_var_mask": cfg.get("zero_var_mask"), "seeds": seeds,
            "over_seeds": {key: _over_seeds([x[key] for x in full])
                           for key in ("first_step_075", "wall_s_to_075", "reward_auc", "reward_lag0", "step_time_s")},
        }  # fmt: skip
    paired = {}
    for seed in sorted({s for cfg in learning["configs"].values() for s in cfg["seeds"]}):
        def rows(name):
            return learning["configs"].get(name, {}).get("seeds", {}).get(seed, [])

        def summary(name):
            return configs.get(name, {}).get("seeds", {}).get(seed)

        mask, v10 = summary("on_policy_mask"), summary("off_policy_v10")
        same_steps = bool(mask and v10 and mask["steps"] == v10["steps"])
        paired[seed] = {
            "mask_minus_on_policy": reward_diff(rows("on_policy_mask"), rows("on_policy"), horizon),
            "v10_minus_mask": reward_diff(rows("off_policy_v10"), rows("on_policy_mask"), horizon),
            "v10_minus_mask_lag0": reward_diff(rows("off_policy_v10"), rows("on_policy_mask"), horizon, lag0_of_a=True),
            "v10_wall_ratio": _ratio(v10, mask, "wall_s") if same_steps else None,
            "reuse_minus_mask": reward_diff(rows("reuse_i10"), rows("on_policy_mask"), horizon),
            "reuse_step_ratio": _ratio(summary("reuse_i10"), mask, "step_time_s"),
        }
    return {"horizon": horizon, "task": learning.get("task"), "model": learning.get("model"),
            "configs": configs, "paired": paired}  # fmt: skip


def table(summary: dict) -> str:
    """The summary as a markdown table, one row per config and seed."""
    lines = ["| config | seed | device (jobs at once) | steps | first step ≥ 0.75 (wall-clock, s) | mean reward "
             "| mean reward, lag 0 | pass@1 by step | wall-clock (s) | median step (s) |", "|" + "---|" * 10]  # fmt: skip
    for name, cfg in summary["configs"].items():
        for seed, x in cfg["seeds"].items():
            val = " ".join(f"{k}:{v:.2f}" for k, v in x["val_pass1"].items())
            lines.append(f"| {name} | {seed} | {x['device']} ({x['concurrent_jobs']}) | {x['steps']} | {x['first_step_075']} ({x['wall_s_to_075']}) "
                         f"| {x['reward_auc']} | {x['reward_lag0']} | {val} | {x['wall_s']} | {x['step_time_s']} |")  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--learning", default=str(Path(__file__).resolve().parent / "results" / "learning.json"))
    p.add_argument("--horizon", type=int, default=19, help="summarise steps 1 … H (the steps every run has)")
    p.add_argument("--out", default=None, help="write the summary JSON here")
    args = p.parse_args(argv)
    summary = summarize(json.loads(Path(args.learning).read_text()), args.horizon)
    print(table(summary))
    print(json.dumps({"over_seeds": {n: c["over_seeds"] for n, c in summary["configs"].items()},
                      "paired": summary["paired"]}, indent=1))  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
