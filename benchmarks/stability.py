"""Issue 34's stability check of long runs at the lag: no NaN/inf, no crash, and the drift and clip
fraction over every update, from a learning lease's files (no GPU).

Reads the folder a lease's last call brought back (``out/learning.json`` or ``learning.json``, and
``lw_logs.tar.gz`` with ``logs/<tag>.jsonl``: verl's metrics per step) for the runs of ``--label`` whose
config carries ``--variant`` (e.g. ``+b16``), and writes under ``--results``:

* ``stability.json``: per run its config, seed, device, machine, return code, updates requested and
  logged, whether it completed, the count of non-finite metric values over every logged step (verl's
  whole metrics dict, not only the curves), the largest drift and clip fraction, and its curves per
  update (held-out pass@1, train reward, ``bound_tv_token``, ``mean_abs_log_rprime``, ``clipfrac``,
  ``rollout_lag``);
* ``stability.png``: those curves, one colour per run;
* the runs' logs and the console tail gzipped under ``--raw``.

Usage::

    python3 benchmarks/stability.py --from /work/.device/N --label h200x1-2026-11-29b --variant +b16
"""

from __future__ import annotations

import argparse
import json
import math
import tarfile
import tempfile
from pathlib import Path

from ingest_learning import gzip_file

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "stability_v10"
RAW = BENCH / "results" / "raw" / "stability_v10"
CURVES = ("val_pass1", "train_reward", "bound_tv_token", "mean_abs_log_rprime", "clipfrac", "rollout_lag",
          "zero_var_group_frac", "skipped_update_frac")


def non_finite(metrics: dict) -> list[str]:
    """The keys of ``metrics`` whose value is a number that is NaN or ±inf (strings, lists, None aside)."""
    return [k for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isfinite(v)]  # fmt: skip


def scan_jsonl(text: str) -> dict:
    """Per-step metrics lines of verl's file logger (``{"step": s, "data": {...}}``, as ``learning.py`` keeps
    them): steps seen, the last step, and every non-finite value as ``step:key``. A line that does not parse
    counts as a problem too."""
    steps, bad, unparsed = set(), [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)  # json reads NaN / Infinity as floats
        except json.JSONDecodeError:
            unparsed += 1
            continue
        step = row.get("step")
        steps.add(step)
        bad += [f"{step}:{k}" for k in non_finite(row.get("data", {}))]
    numbered = [s for s in steps if isinstance(s, int)]
    return {"steps": len(numbered), "last_step": max(numbered, default=None), "non_finite": bad,
            "unparsed_lines": unparsed}  # fmt: skip


def curves(rows: list[dict]) -> dict[str, list]:
    """[[update, value], ...] per curve, where the update logged it."""
    return {key: [[r["step"], r[key]] for r in rows if r.get(key) is not None] for key in CURVES}


def summarise(learning: dict, logs: dict[str, str], label: str, variant: str) -> dict:
    """The ``stability.json`` content for the runs of ``label`` whose config ends with ``variant``."""
    runs = []
    for run in learning["runs"]:
        if run.get("machine") != label or not run["config"].endswith(variant):
            continue
        rows = learning["configs"][run["config"]]["seeds"][str(run["seed"])]
        scan = scan_jsonl(logs.get(run["tag"], ""))
        curve = curves(rows)
        runs.append({
            "config": run["config"], "seed": run["seed"], "tag": run["tag"], "device": run.get("device"),
            "machine": label, "concurrent_jobs": run.get("concurrent_jobs"), "returncode": run.get("returncode"),
            "complete": run.get("complete"), "steps_requested": run.get("steps_requested"),
            "steps_logged": run.get("steps_logged"), "log_steps": scan["steps"], "log_last_step": scan["last_step"],
            "non_finite_values": len(scan["non_finite"]), "non_finite_first": scan["non_finite"][:10],
            "unparsed_log_lines": scan["unparsed_lines"],
            "max_bound_tv_token": max((v for _, v in curve["bound_tv_token"]), default=None),
            "max_mean_abs_log_rprime": max((v for _, v in curve["mean_abs_log_rprime"]), default=None),
            "max_clipfrac": max((v for _, v in curve["clipfrac"]), default=None),
            # updates whose every group was masked (all rewards equal): no optimizer step, the policy did not move
            "updates_without_step": sum(1 for _, v in curve["skipped_update_frac"] if v == 1.0),
            "updates_without_step_per_100": [
                sum(1 for s, v in curve["skipped_update_frac"] if v == 1.0 and lo < s <= lo + 100)
                for lo in range(0, int(run.get("steps_requested") or 0), 100)],
            "last_val_pass1": curve["val_pass1"][-1] if curve["val_pass1"] else None,
            "wall_s": run.get("wall_s"), "startup_s": run.get("startup_s"),
            "extra_overrides": run.get("extra_overrides"), "curves": curve,
        })  # fmt: skip
    return {"task": learning.get("task"), "model": learning.get("model"), "settings": learning.get("settings"),
            "variant": variant, "runs": runs}  # fmt: skip


def plot(summary: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("val_pass1", "held-out greedy pass@1"), ("zero_var_group_frac", "zero-variance groups (masked)"),
              ("bound_tv_token", "TV(π_k, α) per token (bound monitor)"),
              ("mean_abs_log_rprime", "mean |log π_k/α| per token (loss)"), ("clipfrac", "clip fraction (actor/pg_clipfrac)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(22, 4.2))
    for run in summary["runs"]:
        label = (f"{run['config']} s{run['seed']}: {run['steps_logged']} updates ({run['updates_without_step']} without a "
                 f"step: all groups masked), {run['non_finite_values']} non-finite values")
        for ax, (key, _) in zip(axes, panels):
            points = run["curves"][key]
            if points:
                ax.plot(*zip(*points), "o-" if key == "val_pass1" else "-", ms=3, lw=1, label=label)
    for ax, (_, ylabel) in zip(axes, panels):
        ax.set_xlabel("optimizer update")
        ax.set_ylabel(ylabel)
    devices = sorted({str(r["device"]) for r in summary["runs"]})
    axes[0].set_title(f"{summary['model']}, {', '.join(devices)}", fontsize=9)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def lease_logs(device: Path, tags: list[str], raw: Path, label: str) -> dict[str, str]:
    """The ``logs/<tag>.jsonl`` text of each tag from the lease's tarball; each tag's whole ``.jsonl`` and ``.log``
    and the console tail go under ``raw`` gzipped, as :func:`ingest_learning.gzip_file` writes them."""
    raw.mkdir(parents=True, exist_ok=True)
    texts = {}
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(device / "lw_logs.tar.gz") as tar:
            tar.extractall(tmp, filter="data")
        for tag in tags:
            for suffix in (".jsonl", ".log"):
                source = Path(tmp) / "logs" / f"{tag}{suffix}"
                if source.exists():
                    gzip_file(source, raw / f"{tag}{suffix}.gz")
            jsonl = Path(tmp) / "logs" / f"{tag}.jsonl"
            if jsonl.exists():
                texts[tag] = jsonl.read_text(encoding="utf-8")
    if (device / "console_tail.log").exists():
        gzip_file(device / "console_tail.log", raw / f"{label}.console.log.gz")
    return texts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="device", required=True, type=Path)
    ap.add_argument("--label", required=True)
    ap.add_argument("--variant", required=True, help="the suffix of the runs' config names, e.g. +b16")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--raw", type=Path, default=RAW)
    args = ap.parse_args(argv)
    learning_path = next(p for p in (args.device / "out" / "learning.json", args.device / "learning.json") if p.exists())
    learning = json.loads(learning_path.read_text())
    tags = [r["tag"] for r in learning["runs"] if r.get("machine") == args.label and r["config"].endswith(args.variant)]
    summary = summarise(learning, lease_logs(args.device, tags, args.raw, args.label), args.label, args.variant)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "stability.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(summary, args.results / "stability.png")
    for run in summary["runs"]:
        print(f"{run['tag']}: rc {run['returncode']}, {run['steps_logged']}/{run['steps_requested']} updates "
              f"({run['updates_without_step_per_100']} without a step per 100), "
              f"{run['non_finite_values']} non-finite values, max TV {run['max_bound_tv_token']}, "
              f"max clipfrac {run['max_clipfrac']}, last pass@1 {run['last_val_pass1']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
