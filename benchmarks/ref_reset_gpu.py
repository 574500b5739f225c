#!/usr/bin/env python3
"""GPU end-to-end check of the reference reset π_ref ← π_θ every R steps (verl 0.9.1 + vLLM, one GPU).

Runs verl's real ``python3 -m verl.trainer.main_ppo`` with the plugin's yaml on the tiny random-init
Qwen2 model and synthetic task of ``benchmarks/sync_e2e.py`` (imported, not copied), with
``actor.use_kl_loss=True`` (low_var_kl, β=0.1), ``algorithm.off_grpo.ref_reset_period=R`` (default 3),
on-policy sync (v=1), one optimizer step per training step (ppo_mini_batch_size = train_batch_size,
ppo_epochs=1), a high learning rate so π moves visibly, and ``VERL_OFFGRPO_REF_RESET_VERIFY=1`` (each
rank re-reads the written shards).

What it shows: the logged ``actor/kl_loss`` of step s is KL(π_θ‖π_ref) with π_θ = π_{s−1} (the update
of step s happens after all its micro-batches are scored). Right after a reset at the end of step s−1
the reference *is* π_{s−1}, so kl_loss(s) ≈ 0 for s = 1 (π_ref = π_0) and s = kR + 1; it grows again
until the next reset. Without resets it would grow monotonically.

Writes ``OUT/ref_reset.json``::

    {"device", "ref_reset_period": R, "steps": [{"step", "reset", "kl"}, ...],   # first run (V1)
     "runs": [{"trainer", "returncode", "wall_s", "wired", "steps": [...], "checks": {...}}, ...], "ok"}

``reset`` = the logged ``off_grpo/ref_reset`` (π_ref ← π_θ at the end of that step); when the trainer
hook is not wired that metric is missing, ``reset`` falls back to the schedule (s % R == 0), ``wired``
is false and the run fails its checks. ``kl`` = ``actor/kl_loss``.

Prerequisite: ``maybe_reset_reference`` wired into ``OffGRPOSyncTrainer.on_step_end`` (V1) and, for
``--runs v0``, into ``LaggedCheckpointManager.update_weights`` (see verl_offgrpo/ref_reset/trainer.py).

Usage on the GPU machine::

    python3 benchmarks/ref_reset_gpu.py --out benchmarks/results --steps 8 --period 3 [--runs v1,v0]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import mainppo_job  # noqa: E402  (run environment, launch, parsers)
import sync_e2e  # noqa: E402  (the tiny model/data builder of the sync benchmark)

REPO = mainppo_job.REPO
KL_KEYS = ("actor/kl_loss", "actor/kl_loss/mean")
NEAR_ZERO = 1e-3


def ref_overrides(trainer: str, period: int, args, model_dir: Path, data_dir: Path, name: str) -> list[str]:
    base = sync_e2e.overrides(trainer, 1, model_dir, data_dir, args.steps, args.lr, name)
    base = [o for o in base if not o.startswith("actor_rollout_ref.actor.use_kl_loss=")]
    return base + [
        f"algorithm.off_grpo.ref_reset_period={period}",
        "actor_rollout_ref.actor.use_kl_loss=True",
        f"actor_rollout_ref.actor.kl_loss_coef={args.kl_coef}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "trainer.project_name=offgrpo_ref_reset",
    ]


def run(trainer: str, period: int, args, model_dir: Path, data_dir: Path, log_dir: Path, info: dict) -> dict:
    name = f"ref_reset_{trainer}_R{period}"
    console = log_dir / f"{name}.log"
    start = time.time()
    rc, progress, _ = mainppo_job.run_main_ppo(
        name, ref_overrides(trainer, period, args, model_dir, data_dir, name), args.out, log_dir,
        args.run_timeout, args.steps, args.stall_s, VERL_OFFGRPO_REF_RESET_VERIFY="1",
    )  # fmt: skip
    metrics, _ = mainppo_job.read_metrics(log_dir, name)
    rows, wired = [], False
    for step in sorted(s for s in metrics if s >= 1):
        row = metrics[step]
        if "timing_s/step" not in row and not any(k in row for k in KL_KEYS):
            continue
        logged = row.get("off_grpo/ref_reset")
        wired = wired or logged is not None
        rows.append(
            {
                "step": step,
                "reset": bool(logged) if logged is not None else (step % period == 0),
                "kl": mainppo_job.pick(row, *KL_KEYS),
                "ref_policy_step": row.get("off_grpo/ref_policy_step"),
                "reset_time_s": row.get("timing_s/off_grpo_ref_reset"),
                "reset_gb": row.get("off_grpo/ref_reset_gb"),
                "reset_max_abs_diff": row.get("off_grpo/ref_reset_max_abs_diff"),
                "step_time_s": row.get("timing_s/step"),
                "reward": mainppo_job.pick(row, "critic/score/mean", "critic/rewards/mean"),
            }
        )
    out = {
        "trainer": trainer,
        "ref_reset_period": period,
        "device": info.get("device"),
        "returncode": rc,
        "wall_s": round(time.time() - start, 1),
        **progress,
        "wired": wired,
        "log": str(console),
        "steps": rows,
    }
    out["checks"] = check(out, args.steps)
    if rc != 0:
        out["log_tail"] = console.read_text(errors="replace")[-4000:]
    print(f"[ref_reset_gpu] {name}: rc={rc} wired={wired} ok={out['checks']['ok']} "
          f"kl={[r['kl'] for r in rows]} reset={[int(r['reset']) for r in rows]}", flush=True)  # fmt: skip
    return out


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def check(run: dict, steps: int) -> dict:
    rows, R = run["steps"], run["ref_reset_period"]
    c: dict = {"completed": run["returncode"] in (0, mainppo_job.EXIT_HANG) and len(rows) >= steps, "wired": run["wired"]}
    c["reset_schedule"] = [r["reset"] for r in rows[:steps]] == [s % R == 0 for s in range(1, steps + 1)]
    kl = {r["step"]: r["kl"] for r in rows}
    c["kl_finite"] = bool(kl) and all(_finite(v) for v in kl.values())
    fresh = [s for s in kl if s == 1 or (s - 1) % R == 0]  # π_ref = π_{s-1} = current π_θ
    stale = [s for s in kl if s not in fresh]
    c["kl_after_reset"] = {s: kl[s] for s in fresh}
    c["kl_between_resets"] = {s: kl[s] for s in stale}
    if c["kl_finite"] and fresh and stale:
        c["kl_zero_after_reset"] = all(abs(kl[s]) < NEAR_ZERO for s in fresh)
        c["kl_positive_between_resets"] = min(kl[s] for s in stale) > NEAR_ZERO
    diffs = [r["reset_max_abs_diff"] for r in rows if r["reset_max_abs_diff"] is not None]
    if diffs:
        c["copy_exact"] = max(diffs) == 0.0
    c["ok"] = all(v for v in c.values() if isinstance(v, bool))
    return c


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--period", type=int, default=3)
    p.add_argument("--runs", default="v1", help="comma list of trainers: v1, v0")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--kl-coef", type=float, default=0.1)
    p.add_argument("--run-timeout", type=float, default=540.0)
    p.add_argument("--stall-s", type=float, default=120.0)
    p.add_argument("--work", default=None)
    args = p.parse_args(argv)

    t0 = time.time()
    out, model_dir, data_dir, log_dir = sync_e2e.prepare_work(args.out, args.work, "ref_reset_work")
    info = mainppo_job.versions()
    print(f"[ref_reset_gpu] built model/data in {time.time() - t0:.1f}s; {info}", flush=True)

    runs = [run(t.strip(), args.period, args, model_dir, data_dir, log_dir, info) for t in args.runs.split(",")]
    first = runs[0]
    result = {
        "device": info.get("device"),
        "ref_reset_period": args.period,
        "steps": [{"step": r["step"], "reset": r["reset"], "kl": r["kl"]} for r in first["steps"]],
        "runs": runs,
        "ok": all(r["checks"]["ok"] for r in runs),
        "versions": info,
        "total_wall_s": round(time.time() - t0, 1),
    }
    (out / "ref_reset.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"[ref_reset_gpu] ok={result['ok']} -> {out / 'ref_reset.json'}", flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
