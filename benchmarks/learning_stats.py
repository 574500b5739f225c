#!/usr/bin/env python3
"""Over-seed statistics of the learning runs: which configurations can be told apart (issue 34, CPU only).

Reads ``learning.json`` (``benchmarks/learning.py``; a curve's ``step`` counts optimizer updates) and,
for every config and seed, over updates 0 … H (``--horizon``), with a_k the greedy held-out pass@1
validated at update s_k (s_0 = 0, the starting policy):

    final_acc          a at s = H (None: the run was not validated at H)
    acc_auc            area under the held-out curve per update, by the trapezoid rule over the
                       validated points 0 = s_0 < … < s_m = H:
                       AUC = (1/H) · Σ_k (s_{k+1} − s_k) · (a_k + a_{k+1}) / 2     (None without s_m = H)
    steps_to_target    the first validated s ≤ H with a ≥ τ (``--target``); None: not reached by H
    samples_to_target  the samples generated until then: (s / U) · batches · B · n, with U = i · batches
                       updates per global step (``learning.Config``), B prompts per update, n per prompt
                       (``settings``): reuse (i = 10) generates a tenth of on-policy's per update
    reward_auc         mean train reward over the rows of updates 1 … H
    drift_tv           mean of the bound monitor's ½·E_α|r' − 1| per token over those rows (None when
                       the job logs none: verl's own ``sync`` mode of ``bigbatch_v10``)
    clipfrac           mean fraction of tokens the loss clipped (``actor/pg_clipfrac``) over those rows
                       (None for runs recorded without the column)

Over seeds, every quantity gets its mean and a 95 % percentile-bootstrap interval of the mean
(:func:`bootstrap_mean`: seeds resampled with replacement, fixed RNG seed; None for one seed). Seeds
whose run was not validated at H are left out of that config's statistics (``n`` says how many
count). ``steps_to_target`` and ``samples_to_target`` are censored at H: a seed that did not reach τ
counts as H (and its samples at H), which makes the mean a lower bound; ``censored`` says how many.

Paired comparisons (``--pairs A/B,…``; default every config against ``on_policy_mask``): per common
seed the difference d_s = x(A, s) − x(B, s) of each quantity, its mean and bootstrap interval over the
seeds; an interval that excludes 0 tells A from B at this number of seeds. The noise floor: each
config with ``rerun_of`` (``on_policy_mask_rerun``) is compared with the config it repeats, the same
job and seed run twice: its differences are what run-to-run noise alone gives (``rerun_noise``, with
the mean |d_s|).

Drift per rollout lag (``drift_by_lag``; configs with v > 1): a window is the v updates that train on
rollouts of one policy α, the update at lag ℓ (``rollout_lag``) has drifted ℓ updates from it. Per
config and lag ℓ = 0 … v−1, the mean of ``bound_mean_abs_log_rprime`` (mean |log π_k/α| over the
update's batch) over every (seed, window) unit within updates 1 … H, with the bootstrap interval of
:func:`bootstrap_mean` over those units (every seed's rows count, validated at H or not: a unit is a
row, not a run). The windows of one seed are treated as exchangeable, though they are neighbours of one
run: the interval is narrower than one over seeds would be. Paired per lag (:data:`LAG_PAIRS`, both
configs present): A − B per (seed, window start), i.e. at the same update of the same seed.

Usage (no GPU)::

    python3 benchmarks/learning_stats.py --learning benchmarks/results/learning_largest4/learning.json \\
        --target 0.6 --out benchmarks/results/learning_largest4/learning_stats.json

``--horizon`` defaults to the last update at which every run was validated (:func:`common_horizon`);
fix ``--target`` before looking at the curves.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: the quantities of :func:`run_metrics`, in table order
QUANTITIES = ("final_acc", "acc_auc", "steps_to_target", "samples_to_target", "reward_auc", "drift_tv", "clipfrac")
BASELINE = "on_policy_mask"
#: (A, B) pairs of :func:`drift_by_lag`: A − B per lag, per (seed, window), where both configs ran
LAG_PAIRS = (("window_v10", "off_policy_v10"),)


def bootstrap_mean(values: list[float], level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> dict:
    """Mean of ``values`` and the percentile-bootstrap interval of the mean: ``resamples`` draws of
    len(values) values with replacement (``numpy.random.default_rng(seed)``), the (1 ∓ level)/2
    percentiles of their means. ``low``/``high`` are None for fewer than two values."""
    import numpy as np

    xs = np.asarray([v for v in values if v is not None], dtype=float)
    if xs.size == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    if xs.size == 1:
        return {"mean": float(xs[0]), "low": None, "high": None, "n": 1}
    means = xs[np.random.default_rng(seed).integers(0, xs.size, (resamples, xs.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return {"mean": float(xs.mean()), "low": float(low), "high": float(high), "n": int(xs.size)}


def validated(rows: list[dict], horizon: int) -> list[tuple[int, float]]:
    """The (update, held-out pass@1) points of a curve up to ``horizon``, in order."""
    return sorted((r["step"], r["val_pass1"]) for r in rows if r.get("val_pass1") is not None and r["step"] <= horizon)


def accuracy_auc(points: list[tuple[int, float]], horizon: int) -> float | None:
    """Trapezoid area under the validated points per update over [0, H] (formula in the module
    docstring); None unless the points start at 0 and end at H."""
    if not points or points[0][0] != 0 or points[-1][0] != horizon or horizon <= 0:
        return None
    area = sum((s1 - s0) * (a0 + a1) / 2 for (s0, a0), (s1, a1) in zip(points, points[1:]))
    return area / horizon


def first_reaching(points: list[tuple[int, float]], target: float) -> int | None:
    """The first validated update whose pass@1 is ≥ ``target`` (None: none)."""
    return next((s for s, a in points if a >= target), None)


def samples_at(update: int, entry: dict, settings: dict) -> float:
    """Samples generated by update ``update``: (update / U) · batches · B · n (module docstring)."""
    per = entry.get("updates_per_step", 1)
    return update / per * entry.get("batches", 1) * settings["batch"] * settings["n"]


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def run_metrics(rows: list[dict], entry: dict, settings: dict, horizon: int, target: float) -> dict:
    """One run's quantities (module docstring) over updates 0 … ``horizon``; ``complete``: validated at H."""
    points = validated(rows, horizon)
    complete = bool(points) and points[-1][0] == horizon
    reached = first_reaching(points, target)
    steps = reached if reached is not None else horizon
    trained = [r for r in rows if 1 <= r["step"] <= horizon and r.get("train_reward") is not None]
    return {
        "complete": complete,
        "final_acc": points[-1][1] if complete else None,
        "acc_auc": accuracy_auc(points, horizon),
        "steps_to_target": steps,
        "samples_to_target": samples_at(steps, entry, settings),
        "reached_target": reached is not None,
        "reward_auc": _mean([r["train_reward"] for r in trained]),
        "drift_tv": _mean([r.get("bound_tv_token") for r in trained]),
        "clipfrac": _mean([r.get("clipfrac") for r in trained]),
    }


def per_seed(learning: dict, horizon: int, target: float) -> dict[str, dict[str, dict]]:
    """``{config: {seed: run_metrics}}`` for every config and seed of ``learning``."""
    settings = learning["settings"]
    return {name: {seed: run_metrics(rows, entry, settings, horizon, target) for seed, rows in entry["seeds"].items()}
            for name, entry in learning["configs"].items()}  # fmt: skip


def over_seeds(runs: dict[str, dict]) -> dict:
    """Each quantity's :func:`bootstrap_mean` over the seeds validated at H, and how many of them were censored."""
    full = [m for m in runs.values() if m["complete"]]
    out = {q: bootstrap_mean([m[q] for m in full]) for q in QUANTITIES}
    out["censored"] = sum(not m["reached_target"] for m in full)
    return out


def paired(a: dict[str, dict], b: dict[str, dict]) -> dict:
    """Per quantity, the mean and bootstrap interval of x(a, s) − x(b, s) over the seeds both ran to H,
    and the mean |difference| (``abs_mean``)."""
    seeds = sorted(s for s in set(a) & set(b) if a[s]["complete"] and b[s]["complete"])
    out = {"seeds": seeds}
    for q in QUANTITIES:
        diffs = [a[s][q] - b[s][q] for s in seeds if a[s][q] is not None and b[s][q] is not None]
        out[q] = {**bootstrap_mean(diffs), "abs_mean": sum(map(abs, diffs)) / len(diffs) if diffs else None}
    return out


def drift_units(rows: list[dict], horizon: int) -> dict[int, dict[int, float]]:
    """``{lag: {window start: bound_mean_abs_log_rprime}}`` of one run over updates 1 … ``horizon``; the
    window start is the update minus its logged lag (so a unit pairs with the same update of another run)."""
    out: dict[int, dict[int, float]] = {}
    for r in rows:
        lag, drift = r.get("rollout_lag"), r.get("bound_mean_abs_log_rprime")
        if 1 <= r["step"] <= horizon and lag is not None and drift is not None:
            out.setdefault(int(lag), {})[r["step"] - int(lag)] = drift
    return out


def drift_by_lag(learning: dict, horizon: int, pairs=LAG_PAIRS) -> dict:
    """Per config with v > 1 and lag 0 … v−1, :func:`bootstrap_mean` of the drift over (seed, window) units;
    per pair (A, B) of ``pairs`` with both configs present, of A − B over the units both have (module docstring).
    ``{horizon, unit, configs: {name: {v, seeds, lags: [{lag, mean, low, high, n}]}}, paired: {"A - B": …}}``."""
    lagged = {name: entry for name, entry in learning["configs"].items() if entry.get("v", 1) > 1}
    units = {name: {seed: drift_units(rows, horizon) for seed, rows in sorted(entry["seeds"].items())}
             for name, entry in lagged.items()}  # fmt: skip
    configs = {}
    for name, entry in lagged.items():
        values = [[x for runs in units[name].values() for _, x in sorted(runs.get(lag, {}).items())] for lag in range(entry["v"])]
        configs[name] = {"v": entry["v"], "seeds": sorted(entry["seeds"]),
                         "lags": [{"lag": lag, **bootstrap_mean(xs)} for lag, xs in enumerate(values)]}  # fmt: skip
    paired = {}
    for a, b in pairs:
        if a not in lagged or b not in lagged:
            continue
        if (v := lagged[a]["v"]) != lagged[b]["v"]:
            raise ValueError(f"drift pair {a}/{b}: v = {v} and {lagged[b]['v']}")
        seeds = sorted(set(units[a]) & set(units[b]))
        diffs: list[list[float]] = [[] for _ in range(v)]
        for s in seeds:
            for lag in range(v):
                ua, ub = units[a][s].get(lag, {}), units[b][s].get(lag, {})
                diffs[lag] += [ua[w] - ub[w] for w in sorted(set(ua) & set(ub))]
        paired[f"{a} - {b}"] = {"v": v, "seeds": seeds, "lags": [{"lag": lag, **bootstrap_mean(d)} for lag, d in enumerate(diffs)]}
    return {"horizon": horizon, "unit": "(seed, window)", "configs": configs, "paired": paired}


def common_horizon(learning: dict) -> int:
    """The last update at which every run of ``learning`` was validated: the horizon they all reach."""
    lasts = [max((s for s, _ in validated(rows, 10**9)), default=0)
             for entry in learning["configs"].values() for rows in entry["seeds"].values()]  # fmt: skip
    return min(lasts, default=0)


def default_pairs(configs: dict) -> list[tuple[str, str]]:
    """Every config against :data:`BASELINE` (reruns apart), when the baseline is there."""
    if BASELINE not in configs:
        return []
    return [(name, BASELINE) for name, entry in configs.items() if name != BASELINE and not entry.get("rerun_of")]


def summarize(learning: dict, horizon: int, target: float, pairs: list[tuple[str, str]] | None = None) -> dict:
    """``{horizon, target, configs: {name: {seeds, over_seeds}}, paired: {"A - B": …}, rerun_noise: {"X": …},
    drift_by_lag: …}`` (:func:`drift_by_lag`)."""
    seeds = per_seed(learning, horizon, target)
    pairs = default_pairs(learning["configs"]) if pairs is None else pairs
    if missing := sorted({n for pair in pairs for n in pair} - set(seeds)):
        raise ValueError(f"--pairs names configs that learning.json lacks: {missing}")
    reruns = {name: entry["rerun_of"] for name, entry in learning["configs"].items()
              if entry.get("rerun_of") in learning["configs"]}  # fmt: skip
    return {
        "horizon": horizon, "target": target, "task": learning.get("task"), "model": learning.get("model"),
        "configs": {name: {"seeds": runs, "over_seeds": over_seeds(runs)} for name, runs in seeds.items()},
        "paired": {f"{a} - {b}": paired(seeds[a], seeds[b]) for a, b in pairs},
        "rerun_noise": {name: paired(seeds[name], seeds[of]) for name, of in reruns.items()},
        "drift_by_lag": drift_by_lag(learning, horizon),
    }  # fmt: skip


def _cell(stat: dict, digits: int = 3) -> str:
    if stat["mean"] is None:
        return "–"
    if stat["low"] is None:
        return f"{stat['mean']:.{digits}g} (n=1)"
    return f"{stat['mean']:.{digits}g} [{stat['low']:.{digits}g}, {stat['high']:.{digits}g}] (n={stat['n']})"


def table(summary: dict) -> str:
    """Markdown: one row per config (mean [95 % CI] over seeds), then one per paired difference."""
    head = "| | " + " | ".join(QUANTITIES) + " |"
    lines = [f"Updates 0–{summary['horizon']}, target pass@1 {summary['target']}", "", head,
             "|" + "---|" * (len(QUANTITIES) + 1)]
    for name, cfg in summary["configs"].items():
        stats = cfg["over_seeds"]
        lines.append(f"| {name} (censored {stats['censored']}) | " + " | ".join(_cell(stats[q]) for q in QUANTITIES) + " |")
    for label, block in (("", summary["paired"]), ("rerun noise: ", summary["rerun_noise"])):
        for name, diff in block.items():
            lines.append(f"| {label}{name} | " + " | ".join(_cell(diff[q]) for q in QUANTITIES) + " |")
    return "\n".join(lines)


def lag_table(summary: dict) -> str:
    """Markdown: one row per rollout lag, one column per config of ``drift_by_lag`` and per pair ("" without one)."""
    drift = summary["drift_by_lag"]
    columns = {**drift["configs"], **drift["paired"]}
    if not columns:
        return ""
    lines = [f"Drift per rollout lag: mean |log π_k/α| over {drift['unit']} units, updates 1–{drift['horizon']}, "
             "95 % bootstrap interval", "", "| lag | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]  # fmt: skip
    for lag in range(max(c["v"] for c in columns.values())):
        cells = [_cell(c["lags"][lag]) if lag < c["v"] else "–" for c in columns.values()]
        lines.append(f"| {lag} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_pairs(text: str | None) -> list[tuple[str, str]] | None:
    """``"A/B,C/D"`` → [(A, B), (C, D)] (no config or variant name holds a ``/``); None → the default pairs."""
    if not text:
        return None
    pairs = [tuple(item.split("/")) for item in text.split(",")]
    if bad := ["/".join(p) for p in pairs if len(p) != 2 or not all(p)]:
        raise ValueError(f"--pairs entries are A/B, got {bad}")
    return pairs  # type: ignore[return-value]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--learning", required=True, help="a learning.json of benchmarks/learning.py")
    p.add_argument("--horizon", type=int, default=None,
                   help="updates 0 … H (default: the last update at which every run was validated)")
    p.add_argument("--target", type=float, default=0.6, help="held-out pass@1 for steps/samples to target")
    p.add_argument("--pairs", default=None, help="A/B,… : A − B per seed (default: every config against on_policy_mask)")
    p.add_argument("--out", default=None, help="write the summary JSON here")
    args = p.parse_args(argv)
    learning = json.loads(Path(args.learning).read_text())
    horizon = common_horizon(learning) if args.horizon is None else args.horizon
    try:
        summary = summarize(learning, horizon, args.target, parse_pairs(args.pairs))
    except ValueError as err:
        p.error(str(err))
    print(table(summary))
    if lags := lag_table(summary):
        print("\n" + lags)
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
