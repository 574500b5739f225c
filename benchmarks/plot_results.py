#!/usr/bin/env python3
"""Plots of the committed GPU results (reads ``benchmarks/results/*.json``, writes PNGs next to them).

* ``sync_e2e.png``: mean |log r'| (= |log π_k/α|) per step and the sync steps, per run;
* ``ref_reset.png``: the logged KL(π_θ‖π_ref) per step, reset steps marked;
* ``throughput.png``: median step-time breakdown per (machine, v), and per-step times of the lagged
  runs split by whether the previous slot was a real sync or a skip;
* ``learning.png``: train reward per step, held-out pass@1 against training wall-clock and
  mean |log r'| per step, per configuration and seed;
* ``<dir>/learning.png`` for each ``<dir>/learning.json`` under the results (``learning_largest4/``):
  held-out pass@1 per optimizer update (mean over seeds, bootstrap band from two seeds on), the drift
  per rollout lag of ``learning_stats.drift_by_lag`` and the clip fraction per update.

    python3 benchmarks/plot_results.py --results benchmarks/results      # needs matplotlib
    python3 benchmarks/plot_results.py --learning benchmarks/results/learning_largest4/learning.json   # that one only
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning_stats  # the bootstrap and the drift per lag of the per-update learning plot
import mainppo_job  # the layout labels of throughput.py's rows


def _load(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def plot_sync(data: dict, out: Path, plt) -> None:
    runs = [r for r in data["runs"] if r.get("steps")]
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.4), squeeze=False)
    for ax, run in zip(axes[0], runs):
        steps = [s["step"] for s in run["steps"]]
        rp = [s["mean_abs_log_rprime"] for s in run["steps"]]
        ax.plot(steps, rp, "o-", color="tab:blue", label="mean |log r'|")
        for s in run["steps"]:
            if s["synced"] == 1.0:
                ax.axvline(s["step"] + 0.5, color="tab:red", alpha=0.4, lw=1)
        ax.set_title(f"{run['trainer']} v={run['sync_period']} ({run['device']})", fontsize=9)
        ax.set_xlabel("step (red: sync at the end of the step)")
        ax.set_ylabel("|log π_k/α| per token")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_ref_reset(data: dict, out: Path, plt) -> None:
    fig, ax = plt.subplots(figsize=(5, 3.2))
    steps = [s["step"] for s in data["steps"]]
    ax.plot(steps, [s["kl"] for s in data["steps"]], "o-", label="KL(π_θ‖π_ref) (actor/kl_loss)")
    for s in data["steps"]:
        if s["reset"]:
            ax.axvline(s["step"] + 0.5, color="tab:green", alpha=0.5, lw=1)
    ax.set_title(f"π_ref ← π_θ every {data['ref_reset_period']} steps ({data['device']})", fontsize=9)
    ax.set_xlabel("step (green: reset at the end of the step)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


#: a row's layout, ``<layout>-NAME`` for a control job (``throughput.py --control NAME=…``)
CONTROL_LAYOUT = re.compile(f"^{mainppo_job.LAYOUT_AND_CONTROL}$")


def base_layout(row: dict) -> tuple[str, str | None]:
    """(layout, control) of a row: a control job's bars go into the panel of the layout it controls."""
    match = CONTROL_LAYOUT.match(row["layout"])
    return (match["layout"], match["control"]) if match else (row["layout"], None)  # a --layout of one's own


def plot_throughput(data: dict, out: Path, plt) -> None:
    """One row of panels per (model, layout), control jobs with the layout they control: the median
    step split into its parts, and the step times of lagged runs after a skipped vs after a real sync."""
    rows = [r for r in data["rows"] if r.get("step_time_s")]
    groups = list(dict.fromkeys((r["model"], base_layout(r)[0]) for r in rows))
    fig, axes = plt.subplots(len(groups), 2, figsize=(14, 4.2 * len(groups)), squeeze=False)
    for (ax, ax2), group in zip(axes, groups):
        _plot_throughput_group([r for r in rows if (r["model"], base_layout(r)[0]) == group], ax, ax2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def _measured_steps(row: dict) -> list[dict]:
    """A throughput row's measured steps (rows from before ``measured`` was recorded: steps after 2)."""
    return [s for s in row["steps"] if s.get("measured", s["step"] > 2)]


def _median_of_steps(row: dict, key: str) -> float:
    """Median of one per-step part over a row's measured steps (0 where the part was not logged)."""
    vals = [s[key] for s in _measured_steps(row) if s.get(key) is not None]
    return statistics.median(vals) if vals else 0.0


def _throughput_label(row: dict) -> str:
    """x label of one bar: host, lease, v, and what sets it apart (jobs side by side, cache, no_sleep)."""
    host, _, lease = row["machine"].partition("-")
    control = base_layout(row)[1]
    label = f"{host}\n{lease.removeprefix('2026-')}\nv={row['v']}" + (f" {control}" if control else "")
    if row.get("concurrent_jobs", 1) > 1:
        label += f"\n{row['concurrent_jobs']} jobs"
    if row.get("empty_cache_on_skip") == "if_needed":
        label += "\nkeep cache"
    if row.get("keep_weights") == "no_sleep":
        label += "\nno_sleep"
    return label


def _plot_throughput_group(rows: list[dict], ax, ax2) -> None:
    """Left: median gen, update_actor and old_log_prob, the mean sync slot, and the rest of the median
    step. Right: each lagged step's time, split by whether the slot before it synced or skipped."""
    bottoms = [0.0] * len(rows)
    parts = [("gen", "gen_s"), ("update_actor", "update_actor_s"), ("old_log_prob", "old_log_prob_s"), ("sync slot (mean)", None)]
    for name, key in parts:
        vals = []
        for r in rows:
            if key:
                vals.append(_median_of_steps(r, key))
            else:
                steps = [s for s in _measured_steps(r) if s["sync_slot_s"] is not None]
                vals.append(sum(s["sync_slot_s"] for s in steps) / max(1, len(steps)))
        ax.bar(range(len(rows)), vals, bottom=bottoms, label=name)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    other = [max(0.0, r["step_time_s"] - b) for r, b in zip(rows, bottoms)]
    ax.bar(range(len(rows)), other, bottom=bottoms, label="other (median step − parts)", color="lightgray")
    # room above the tallest bar for the legend, which would otherwise cover the first bars
    ax.set_ylim(0, 1.3 * max(max(bottoms), max(r["step_time_s"] for r in rows)))
    ax.set_xticks(range(len(rows)), [_throughput_label(r) for r in rows], fontsize=7 if len(rows) <= 10 else 5)
    ax.set_ylabel("seconds per step (median)")
    ax.set_title(f"{rows[0]['model']} random init, {base_layout(rows[0])[0]}, {rows[0]['batch']}", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    for r in rows:
        if r["v"] == 1:
            continue
        prev = {(s.get("run", 0), s["step"]): s["synced"] for s in r["steps"]}
        xs = _measured_steps(r)
        after_sync = [(s["step"], s["step_s"]) for s in xs if prev.get((s.get("run", 0), s["step"] - 1)) == 1.0]
        after_skip = [(s["step"], s["step_s"]) for s in xs if prev.get((s.get("run", 0), s["step"] - 1)) == 0.0]
        tag = f"{r['machine'].replace('-2026-', ' ')} v={r['v']}"
        if after_skip:
            ax2.plot(*zip(*after_skip), "o", label=f"{tag}: after a skipped sync", alpha=0.8)
        if after_sync:
            ax2.plot(*zip(*after_sync), "x", ms=9, label=f"{tag}: after a real sync")
    ax2.set_xlabel("step")
    ax2.set_ylabel("step time (s)")
    ax2.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))


def plot_learning(data: dict, out: Path, plt) -> None:
    """Train reward by step, held-out pass@1 by wall-clock, |log r'| by step: one colour per config, one
    line per seed (variants such as +no_sleep dashed)."""
    fig, (ax, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, (name, cfg) in enumerate(data["configs"].items()):
        style, color = ("--" if "+" in name else "-"), colors[n % len(colors)]
        label = f"{name} (v={cfg['v']}, i={cfg['i']}, mask={cfg['zero_var_mask']}), seeds {','.join(sorted(cfg['seeds']))}"
        for k, rows in enumerate(cfg["seeds"].values()):
            kw = {"color": color, "alpha": 0.75, "lw": 1.2, "label": label if k == 0 else None}
            train = [(r["step"], r["train_reward"]) for r in rows if r["train_reward"] is not None]
            val = [(r["wall_s"], r["val_pass1"]) for r in rows if r["val_pass1"] is not None]
            rprime = [(r["step"], r["mean_abs_log_rprime"]) for r in rows if r.get("mean_abs_log_rprime") is not None]
            if train:
                ax.plot(*zip(*train), style, **kw)
            if val:
                ax2.plot(*zip(*val), "o" + style, ms=3, **kw)
            if rprime:
                ax3.plot(*zip(*rprime), style, **kw)
    ax.set_xlabel("step (same prompts for every config)")
    ax.set_ylabel("train reward (samples of the policy in vLLM)")
    ax2.set_xlabel("training wall-clock (s, start-up excluded; devices differ by seed)")
    ax2.set_ylabel("held-out greedy pass@1")
    ax3.set_xlabel("step")
    ax3.set_ylabel("mean |log π_k/α| per response token")
    ax.set_title(f"{data['model']} on {data['task'].split(' ')[0]}", fontsize=9)
    ax2.set_title(data["device"], fontsize=8)
    ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def _by_update(seeds: dict[str, list[dict]], key: str) -> list[tuple[int, dict]]:
    """(update, bootstrap_mean over seeds) of ``key`` at every update where each seed logged it."""
    values: dict[int, list[float]] = {}
    for rows in seeds.values():
        for r in rows:
            if r.get(key) is not None:
                values.setdefault(r["step"], []).append(r[key])
    return [(s, learning_stats.bootstrap_mean(xs)) for s, xs in sorted(values.items()) if len(xs) == len(seeds)]


def plot_learning_updates(data: dict, out: Path, plt) -> None:
    """Per optimizer update: held-out greedy pass@1 (mean over seeds, 95 % bootstrap band from two seeds on),
    mean |log π_k/α| per rollout lag over (seed, window) units up to the common horizon with its interval
    (``learning_stats.drift_by_lag``), and the clip fraction (mean over seeds)."""
    fig, (ax, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if len(data["configs"]) > len(colors):  # one colour a configuration
        colors = [plt.get_cmap("tab20")(k) for k in range(20)]
    color = {name: colors[k % len(colors)] for k, name in enumerate(data["configs"])}
    for name, cfg in data["configs"].items():
        label = f"{name} (v={cfg['v']}, {cfg.get('updates_per_step', 1)} updates/step), n={len(cfg['seeds'])}"
        for axis, key in ((ax, "val_pass1"), (ax3, "clipfrac")):
            if points := _by_update(cfg["seeds"], key):
                steps, stats = zip(*points)
                zero = key == "clipfrac" and all(x["mean"] == 0 for x in stats)  # lines on top of each other
                axis.plot(steps, [x["mean"] for x in stats], "o-", ms=3, lw=1.2, color=color[name],
                          label=label + (": 0 at every update" if zero else ""))  # fmt: skip
                if band := [(s, x) for s, x in points if x["low"] is not None]:
                    axis.fill_between([s for s, _ in band], [x["low"] for _, x in band], [x["high"] for _, x in band],
                                      color=color[name], alpha=0.2)  # fmt: skip
    horizon = learning_stats.common_horizon(data)
    drift = learning_stats.drift_by_lag(data, horizon)
    for k, (name, cfg) in enumerate(drift["configs"].items()):
        lags = [x for x in cfg["lags"] if x["mean"] is not None]
        xs = [x["lag"] + 0.12 * (k - (len(drift["configs"]) - 1) / 2) for x in lags]
        ys = [x["mean"] for x in lags]
        err = [[y - (x["low"] if x["low"] is not None else y) for x, y in zip(lags, ys)],
               [(x["high"] if x["high"] is not None else y) - y for x, y in zip(lags, ys)]]  # fmt: skip
        n = max((x["n"] for x in lags), default=0)
        ax2.errorbar(xs, ys, yerr=err, fmt="o-", ms=4, capsize=3, color=color[name],
                     label=f"{name}: seeds {','.join(cfg['seeds'])}, {n} windows a lag")  # fmt: skip
    ax.set_xlabel("optimizer update")
    ax.set_ylabel("held-out greedy pass@1")
    ax.set_title(f"{data['model']} on {data['task'].split(' ')[0]}, {data.get('device', '')}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax2.set_xlabel("rollout lag (updates since the rollout policy α)")
    ax2.set_ylabel("mean |log π_k/α| per token (bound monitor)")
    ax2.set_title(f"drift per lag, updates 1–{horizon}, mean and 95 % bootstrap over (seed, window)", fontsize=9)
    ax2.set_xticks(range(max((c["v"] for c in drift["configs"].values()), default=1)))
    if drift["configs"]:
        ax2.legend(fontsize=7, loc="upper left")
    ax3.set_xlabel("optimizer update (bigbatch: mean of a step's updates, at its last)")
    ax3.set_ylabel("clip fraction (actor/pg_clipfrac)")
    ax3.set_title("clip fraction per update, mean over seeds", fontsize=9)
    low, high = ax3.get_ylim()
    ax3.set_ylim(low, high + 0.4 * (high - low))  # room for the legend above the curves
    ax3.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_window_speed(data: dict, out: Path, plt) -> None:
    """Wall time of every update by step, one line per job, with each job's mean time per update over
    its measured windows and the speedup (90 % interval) against the baseline in the legend."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    base = data["args"].get("baseline", "v1")
    for job in data["jobs"]:
        rows = data["updates"][job["name"]]
        label = f"{job['name']} ({job['kind']}, v={job['v']}): {job.get('time_per_update_s', float('nan')):.1f} s/update"
        speed, ci = job.get("speedup_vs_" + base), job.get("speedup_interval90")
        if speed is not None and job["name"] != base:
            label += f", {speed:.2f}x" + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        # one row per update: a bigbatch global step of v updates gives v rows
        ax.plot(range(1, len(rows) + 1), [r["time_s"] for r in rows], "o-", ms=3, lw=1, label=label)
    ax.set_xlabel("update")
    ax.set_ylabel("wall time of the update (s)")
    title = textwrap.fill(data["workload"], 120)  # long workloads (extra overrides, env) wrap
    ax.set_title(f"{title}\n{data['versions'].get('device')}, {data['concurrency']} jobs side by side", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--learning", default=None,
                   help="only the per-update plot of this learning.json (learning.png beside it)")
    args = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = Path(args.results)
    learning_files = [Path(args.learning)] if args.learning else sorted(res.glob("*/learning.json"))
    for path in learning_files:
        plot_learning_updates(json.loads(path.read_text()), path.with_suffix(".png"), plt)
        print(f"wrote {path.with_suffix('.png')}")
    if args.learning:
        return 0
    plots = (("sync_e2e", plot_sync), ("ref_reset", plot_ref_reset), ("throughput", plot_throughput),
             ("learning", plot_learning), ("window_speed", plot_window_speed))  # fmt: skip
    for name, fn in plots:
        data = _load(res / f"{name}.json")
        if data:
            fn(data, res / f"{name}.png", plt)
            print(f"wrote {res / f'{name}.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
