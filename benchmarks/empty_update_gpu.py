#!/usr/bin/env python3
"""GPU check: a mini-batch without a loss token takes no optimizer step (verl 0.9.1 + vLLM).

What it proves, inside verl's real trainer (``python3 -m verl.trainer.main_ppo`` over the plugin's
yaml, V1 trainer, one GPU): under ``algorithm.off_grpo.zero_var_mask=True`` a mini-batch whose groups
are all all-equal keeps no loss token, and ``verl_offgrpo/patches/empty_update.py`` skips its optimizer step:
the weights do not change, and rank 0 prints ``empty_update.SKIP_MESSAGE`` once per skipped
mini-batch. (``tests/test_empty_update.py`` shows the same on the CPU through verl's ``train_batch``.)

Setup: the tiny random-init Qwen2 and "repeat the digit" task of ``benchmarks/sync_e2e.py``
(imported), lr 1e-3, 16 prompts × n=4 a step, ``ppo_mini_batch_size`` 16 (one mini-batch, so one
optimizer step, per training step), ``ppo_epochs`` 1, no KL loss, entropy coeff 0 and
``data.shuffle=False``: verl's train sampler is then a ``SequentialSampler``, and the V1 sync trainer
submits and trains one batch a step, so step s trains on train rows 16(s−1) … 16s−1. The first K×16
rows (K = ``--train-steps``, default 4) have a digit ground truth (graded reward: a random model's
groups are almost never all-equal); every later row has ``sync_e2e.NO_DIGIT``, whose reward is exactly
0.0 for any response, so on steps K+1 … N every group is all-equal.

How weight movement is seen: sync period v = 4 (``algorithm.off_grpo.sync_period``). vLLM gets the
weights only at the end of the steps s with s % v == 0, so the batch of step s was sampled by α = the
weights after step

    b(s) = v·⌊(s−1)/v⌋            (rollout lag = s − 1 − b(s) = (s−1) % v; b = 0: the initial weights)

while π_k = the weights after step s−1. The bound monitor's ``off_grpo/bound/mean_abs_log_rprime``
(mean over the batch's response tokens of |log π_k/α|, computed before the update on every token,
masked or not) is therefore the movement made by the updates of steps b(s)+1 … s−1. With no update in
between it is the bf16 floor of vLLM vs FSDP: the run's median at rollout lag 0 (~0.001 for this model,
0.0010–0.0017 in benchmarks/results/sync_e2e.json). (The loss's ``actor/off_grpo/mean_abs_log_rprime`` averages
over the loss tokens only: 0 on a fully masked step; it is kept as ``loss_mean_abs_log_rprime``.)

* ``mask`` (zero_var_mask=True): the updates of steps K+1 … N are skipped, so every lagged step
  (rollout lag ≥ 1) with b(s) ≥ K, i.e. every batch sampled after the first sync at or after step K
  (s > v·⌈K/v⌉), stays at the floor. Expected besides: ``SKIP_MESSAGE`` N−K times,
  ``actor/grad_norm`` = 0, ``off_grpo/zero_var_masked_frac`` = 1 and the loss's
  ``actor/off_grpo/skipped_optimizer_step_frac`` = 1 on steps K+1 … N (0 on steps 1 … K).
* ``control`` (zero_var_mask=False, verl's plain behaviour): every row keeps A = 0, the gradient is
  0 (grad_norm 0 on steps > K), but AdamW still steps with its momentum: no skip line, and those
  lagged steps are far above the floor.

In both runs the lagged steps with b(s) < K contain a real update and must be above the floor: the
probe sees a step. Defaults K=4, v=4, N=12: floor (lag 0) steps 1, 5, 9; lagged after a real update
2, 3, 4; lagged after the first post-K sync 6, 7, 8, 10, 11, 12 (the mask run's ≈ floor, the
control's ≫ floor; sync_e2e measured 0.08–0.4 one to three real steps away).

Writes ``OUT/empty_update.json`` (and ``WORK/empty_update.json``, which outlives ``$OUT`` for the
next command's ``--merge``)::

    {"runs": [{"name", "zero_var_mask", "device", "verl", "vllm", "returncode", "wall_s",
               "train_steps", "sync_period", "total_steps", "skip_lines",
               "steps": [{"step", "synced", "rollout_lag", "grad_norm", "zero_var_masked_frac", "skipped_frac",
                          "zero_var_group_frac", "mean_abs_log_rprime", "loss_mean_abs_log_rprime",
                          "reward", "step_time_s", "skip_lines"}, ...],
               "checks": {...}}, ...],
     "ok": bool}

A step's ``skip_lines`` are the skip lines logged after the previous step's metrics line and before
its own (informational: Ray forwards the worker's line asynchronously); the run's ``skip_lines`` (all
of them) is what is checked.

Usage on the GPU machine, one run per 10-minute command (V1's start-up alone takes 200–300 s)::

    python3 benchmarks/empty_update_gpu.py --out $OUT --work /tmp/euw --runs mask
    python3 benchmarks/empty_update_gpu.py --out $OUT --work /tmp/euw --runs control \\
        --merge /tmp/euw/empty_update.json

or both in one command on two GPUs, side by side (each its own Ray cluster)::

    python3 benchmarks/empty_update_gpu.py --out $OUT --work /tmp/euw --runs mask,control --gpus 0,1
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# the benchmarks' helpers, and the plugin where it is not installed
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import sync_e2e  # the tiny model and task
from mainppo_job import (
    EXIT_HANG,
    REPO,
    concurrency,
    job_timeout,
    on_gpus,
    pick,
    read_merge,
    read_metrics,
    run_main_ppo,
    set_overrides,
    versions,
    write_results,
)

from verl_offgrpo.patches.empty_update import SKIP_MESSAGE
from verl_offgrpo.sync.alpha_guard import STATISTIC as RPRIME_KEY

RESULTS = "empty_update.json"
#: run name → algorithm.off_grpo.zero_var_mask
RUNS = {"mask": True, "control": False}
#: prompts a step (train_batch_size = ppo_mini_batch_size: one optimizer step a training step)
PROMPTS_PER_STEP = 16

#: the rollout-lag-0 floor must be this small: the engine serves the trainer's weights right after a
#: sync (0.0010–0.0017 for this model in benchmarks/results/sync_e2e.json; a lost sync gives ~10)
FLOOR_MAX = 0.01
#: "at the floor": at most this many times the run's lag-0 median (bf16 noise between batches sampled
#: by the same weights was < 2× in benchmarks/results/sync_e2e.json; one real step away is ~100×)
AT_FLOOR_FACTOR = 3.0
#: "moved": at least this many times the floor (a real step moved it 0.08–0.37 at lag 1, i.e. 80–350×;
#: on an H100, benchmarks/results/empty_update.json, the first momentum-only step moved it 0.090 at lag 1, 84×, a
#: quarter of a real step's 0.37, and the one four steps later 0.022, 21×)
MOVED_FACTOR = 5.0
#: a run that cannot start with this much of the budget left is skipped (start-up is 200–320 s)
MIN_RUN_S = 240.0

_STEP_LINE = re.compile(r"\bstep:(\d+) - ")


# ----------------------------------------------------------------------------- schedule
def sampler_step(s: int, v: int) -> int:
    """b(s) = v·⌊(s−1)/v⌋: the step after which the weights that sampled step s's batch were synced."""
    return v * ((s - 1) // v)


def lagged_steps(steps: int, v: int) -> list[int]:
    """Steps whose batch has rollout lag ≥ 1 (α is not π_k)."""
    return [s for s in range(1, steps + 1) if s - 1 > sampler_step(s, v)]


def lagged_after_k(steps: int, train_steps: int, v: int) -> list[int]:
    """Lagged steps sampled after the first sync at or after step K (b(s) ≥ K): every update between
    α and π_k is one of the steps K+1 … N."""
    return [s for s in lagged_steps(steps, v) if sampler_step(s, v) >= train_steps]


def lagged_before_k(steps: int, train_steps: int, v: int) -> list[int]:
    """Lagged steps whose updates between α and π_k include a real one (b(s) < K)."""
    return [s for s in lagged_steps(steps, v) if sampler_step(s, v) < train_steps]


# ----------------------------------------------------------------------------- job
def data_options(train_steps: int) -> dict:
    """``sync_e2e.build_data``'s keywords: the rows after the first K steps' have a constant reward."""
    return {"constant_from": train_steps * PROMPTS_PER_STEP}


def job_overrides(
    mask: bool,
    sync_period: int,
    model_dir: Path,
    data_dir: Path,
    steps: int,
    lr: float,
    name: str,
) -> list[str]:
    """sync_e2e's V1 job with the mask on or off, rows in order and nothing but the policy loss."""
    base = sync_e2e.overrides("v1", sync_period, model_dir, data_dir, steps, lr, name)
    return set_overrides(
        base,
        {
            "algorithm.off_grpo.zero_var_mask": str(mask).lower(),
            "data.shuffle": "false",
            "data.train_batch_size": PROMPTS_PER_STEP,
            "actor_rollout_ref.actor.ppo_mini_batch_size": PROMPTS_PER_STEP,
            "actor_rollout_ref.actor.ppo_epochs": 1,
            "actor_rollout_ref.actor.use_kl_loss": "false",
            "actor_rollout_ref.actor.entropy_coeff": 0,
            "trainer.use_v1": "true",
            "trainer.project_name": "offgrpo_empty_update",
        },
    )


# ----------------------------------------------------------------------------- reading a run
def count_skip_lines(console: str) -> tuple[int, dict[int, int]]:
    """The console log's ``SKIP_MESSAGE`` lines: all of them, and per step (those after the previous
    step's metrics line and before step N's ``step:N - …`` line; later ones only count in the total)."""
    total, pending, by_step = 0, 0, {}
    for line in console.splitlines():
        if SKIP_MESSAGE in line:
            total += 1
            pending += 1
        elif m := _STEP_LINE.search(line):
            step = int(m.group(1))
            by_step[step] = by_step.get(step, 0) + pending
            pending = 0
    return total, by_step


def step_rows(metrics: dict[int, dict], skips: dict[int, int]) -> list[dict]:
    out = []
    for step, row in sync_e2e.logged_steps(metrics):
        out.append(
            {
                "step": step,
                "synced": pick(row, "off_grpo/synced"),
                "rollout_lag": pick(row, "off_grpo/rollout_lag"),
                "grad_norm": pick(row, "actor/grad_norm"),
                "zero_var_masked_frac": pick(row, "off_grpo/zero_var_masked_frac"),
                "skipped_frac": pick(row, suffix="off_grpo/skipped_optimizer_step_frac"),
                "zero_var_group_frac": pick(row, "off_grpo/bound/zero_var_group_frac"),
                "mean_abs_log_rprime": pick(row, RPRIME_KEY),
                "loss_mean_abs_log_rprime": pick(
                    row, suffix="off_grpo/mean_abs_log_rprime"
                ),
                "reward": pick(row, "critic/score/mean", "critic/rewards/mean"),
                "step_time_s": pick(row, "timing_s/step"),
                "skip_lines": skips.get(step, 0),
            }
        )
    return out


# ----------------------------------------------------------------------------- checks
def check_run(run: dict, train_steps: int, sync_period: int) -> dict:
    """The run's acceptance checks (booleans, and ``ok`` = all of them) and the numbers they used."""
    k, v, n = train_steps, sync_period, run["total_steps"]
    mask = run["zero_var_mask"]
    rows = {r["step"]: r for r in run["steps"]}
    steps = range(1, n + 1)

    def col(key: str, at) -> list:
        return [rows.get(s, {}).get(key) for s in at]

    def all_ok(key: str, at, test) -> bool:
        return all(sync_e2e.finite(x) and test(x) for x in col(key, at))

    before, after = range(1, k + 1), range(k + 1, n + 1)
    c: dict = {}
    c["completed"] = run["returncode"] in (0, EXIT_HANG) and all(
        s in rows for s in steps
    )
    synced, rollout_lag = sync_e2e.expected_schedule(n, v)
    c["sync_schedule"] = col("synced", steps) == synced
    c["rollout_lag_schedule"] = col("rollout_lag", steps) == rollout_lag
    c["rprime_finite"] = all_ok("mean_abs_log_rprime", steps, lambda x: True)
    floor_at = [s for s in steps if s - 1 == sampler_step(s, v)]
    at_lag0 = [x for x in col("mean_abs_log_rprime", floor_at) if sync_e2e.finite(x)]
    floor = statistics.median(at_lag0) if at_lag0 else None
    c["rprime_floor"] = floor
    c["floor_small"] = floor is not None and floor < FLOOR_MAX
    # the premise: a real update on steps 1..K (a group with signal), every group all-equal after
    c["groups_vary_before_k"] = all_ok("zero_var_group_frac", before, lambda x: x < 1)
    c["grad_before_k"] = all_ok("grad_norm", before, lambda x: x > 0)
    c["all_equal_after_k"] = all_ok("zero_var_group_frac", after, lambda x: x == 1)
    c["grad_norm_zero_after_k"] = all_ok("grad_norm", after, lambda x: x == 0)
    real, still = lagged_before_k(n, k, v), lagged_after_k(n, k, v)
    c["lagged_before_k_steps"], c["lagged_after_k_steps"] = real, still
    bar = MOVED_FACTOR * floor if floor is not None else float("inf")
    c["moved_by_real_updates"] = bool(real) and all_ok(
        "mean_abs_log_rprime", real, lambda x: x >= bar
    )
    if mask:
        top = AT_FLOOR_FACTOR * floor if floor is not None else -1.0
        c["masked_frac_one_after_k"] = all_ok(
            "zero_var_masked_frac", after, lambda x: x == 1
        )
        c["skip_line_per_skipped_step"] = run["skip_lines"] == n - k
        c["skipped_metric_after_k_only"] = all_ok("skipped_frac", after, lambda x: x == 1) and all_ok(
            "skipped_frac", before, lambda x: x == 0
        )
        c["lagged_after_k_at_floor"] = bool(still) and all_ok(
            "mean_abs_log_rprime", still, lambda x: x <= top
        )
    else:
        c["mask_off"] = all_ok("zero_var_masked_frac", steps, lambda x: x == 0)
        c["no_skip_line"] = run["skip_lines"] == 0
        c["no_skipped_metric"] = all_ok("skipped_frac", steps, lambda x: x == 0)
        c["lagged_after_k_moved"] = bool(still) and all_ok(
            "mean_abs_log_rprime", still, lambda x: x >= bar
        )
    c["ok"] = all(x for x in c.values() if isinstance(x, bool))
    return c


# ----------------------------------------------------------------------------- runs
def run_one(
    name: str,
    args,
    model_dir: Path,
    data_dir: Path,
    log_dir: Path,
    t0: float,
    info: dict,
    env_extra: dict[str, str] | None = None,
):
    mask = RUNS[name]
    tag = f"empty_update_{name}"
    job = [
        *job_overrides(
            mask, args.sync_period, model_dir, data_dir, args.steps, args.lr, tag
        ),
        *args.extra,
    ]
    timeout = job_timeout(
        args.run_timeout, args.budget_s, t0, time.time(), floor_s=30.0
    )
    start = time.time()
    rc, progress, _ = run_main_ppo(
        tag, job, args.out, log_dir, timeout, args.steps, args.stall_s, **(env_extra or {})
    )
    console_path = log_dir / f"{tag}.log"
    console = console_path.read_text(errors="replace") if console_path.exists() else ""
    total, by_step = count_skip_lines(console)
    metrics, source = read_metrics(log_dir, tag)
    run = {
        "name": name,
        "zero_var_mask": mask,
        "train_steps": args.train_steps,
        "sync_period": args.sync_period,
        "total_steps": args.steps,
        "extra_overrides": list(args.extra),
        "gpu": (env_extra or {}).get("CUDA_VISIBLE_DEVICES"),
        "concurrent_jobs": concurrency(args.gpu_list, len(args.run_names)),
        "device": info.get("device"),
        "verl": info.get("verl"),
        "vllm": info.get("vllm"),
        "returncode": rc,
        "wall_s": round(time.time() - start, 1),
        **progress,
        "metrics_source": source,
        "log": str(console_path),
        "skip_lines": total,
        "steps": step_rows(metrics, by_step),
    }
    run["checks"] = check_run(run, args.train_steps, args.sync_period)
    if rc != 0:
        run["log_tail"] = console[-4000:]
    c = run["checks"]
    print(
        f"[empty_update] {name}: rc={rc} wall={run['wall_s']}s skip_lines={total} "
        f"ok={c['ok']} floor={c['rprime_floor']} |log r'|="
        f"{[r['mean_abs_log_rprime'] for r in run['steps']]}",
        flush=True,
    )
    return run


def merged(earlier: dict, runs: list[dict]) -> dict:
    """``runs`` and the runs of an earlier empty_update.json with another name; ``ok`` over all."""
    result = sync_e2e.merged_runs(earlier, runs, key=lambda r: r["name"])
    result["ok"] = bool(result["runs"]) and all(
        r.get("checks", {}).get("ok", False) for r in result["runs"]
    )
    return result


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument(
        "--runs", default="mask,control", help="comma list of: mask, control"
    )
    p.add_argument("--steps", type=int, default=12, help="N, training steps a run")
    p.add_argument(
        "--train-steps",
        type=int,
        default=4,
        help="K: steps with a graded reward; every group of steps K+1..N is all-equal",
    )
    p.add_argument("--sync-period", type=int, default=4)
    p.add_argument(
        "--lr",
        type=float,
        default=1e-3,
        help="high, so that one step moves |log r'| far above the floor",
    )
    p.add_argument(
        "--budget-s", type=float, default=580.0, help="wall budget for all runs"
    )
    p.add_argument("--run-timeout", type=float, default=540.0, help="per run")
    p.add_argument(
        "--stall-s",
        type=float,
        default=120.0,
        help="no new step for this long (after the first): dump stacks, kill",
    )
    p.add_argument(
        "--work",
        default=None,
        help="scratch dir for model/data/logs (default OUT/empty_update_work)",
    )
    p.add_argument("--extra", nargs="*", default=[], help="extra hydra overrides")
    p.add_argument(
        "--gpus",
        default=None,
        help="comma list of GPU ids: run the --runs side by side, one GPU each "
        "(e.g. --runs mask,control --gpus 0,1); default: one after the other",
    )
    p.add_argument(
        "--merge",
        default=None,
        help="an earlier empty_update.json: keep its runs except those re-run now",
    )
    args = p.parse_args(argv)
    names = [x.strip() for x in args.runs.split(",") if x.strip()]
    if not names or any(x not in RUNS for x in names):
        p.error(f"--runs {args.runs}: choose from {sorted(RUNS)}")
    args.run_names = names
    args.gpu_list = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    if args.gpu_list and len(args.gpu_list) < len(names):
        p.error(f"--gpus {args.gpus}: one GPU per run ({len(names)} runs)")
    if not 1 <= args.train_steps < args.steps:
        p.error("need 1 <= --train-steps < --steps")
    if not lagged_after_k(args.steps, args.train_steps, args.sync_period):
        p.error(
            "no lagged step after the first sync at or after K: raise --steps or --sync-period"
        )
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.time()
    earlier = read_merge(args.merge) or {}  # before any GPU work
    out, model_dir, data_dir, log_dir = sync_e2e.prepare_work(
        args.out, args.work, "empty_update_work", **data_options(args.train_steps)
    )
    info = versions()
    print(
        f"[empty_update] built model/data in {time.time() - t0:.1f}s; {info}",
        flush=True,
    )

    if args.gpu_list:  # side by side, one GPU and one Ray cluster each: every run starts now
        runs = on_gpus(args.run_names, args.gpu_list,
                       lambda name, env: run_one(name, args, model_dir, data_dir, log_dir, t0, info, env))  # fmt: skip
    else:  # one after the other, each only if the budget still holds a start-up
        runs = []
        for name in args.run_names:
            if args.budget_s - (time.time() - t0) < MIN_RUN_S:
                runs.append({"name": name, "zero_var_mask": RUNS[name], "skipped": "out of time budget"})
                continue
            runs.append(run_one(name, args, model_dir, data_dir, log_dir, t0, info))
            (out / RESULTS).write_text(json.dumps(merged(earlier, runs), indent=1, default=str))

    result = merged(earlier, runs)
    result.update(total_wall_s=round(time.time() - t0, 1), versions=info)
    write_results(RESULTS, result, out, model_dir.parent)
    print(f"[empty_update] ok={result['ok']} -> {out / RESULTS}", flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
