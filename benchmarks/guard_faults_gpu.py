#!/usr/bin/env python3
"""GPU check of the exact served-weights check (``algorithm.off_grpo.verify_served_weights``, issue 32).

Short lagged jobs of verl's real ``main_ppo`` (``benchmarks/mainppo_job.py``, the plugin's yaml, the v0
trainer with the lagged checkpoint manager by default) on SmolLM2-135M-Instruct from the staged GGUF
(``learning.smollm2_from_gguf``) and the ``add1`` arithmetic task of ``benchmarks/learning.py``, with
faults injected from outside the plugin's code path by ``benchmarks/diag/guard_faults.py`` (vLLM's own
``Worker`` patched in its worker processes):

    honest            no fault: the check must never fire (--honest-steps steps)
    level2            every vLLM sleep at level 2 (weights discarded) while the plugin's override still
                      reports level 1 (issue 32): expected caught at step 2, the first lagged rollout
    perturb           one ulp in one element of layer 3's first matrix, at the first weights wake after
                      the 2nd sync: expected caught at step v + 2 (5 at v = 3)
    noise             as perturb, Gaussian noise (1e-3 RMS) on that whole tensor
    stale_sync        the 2nd real sync leaves vLLM on the 1st sync's weights (every rank): expected caught at
                      the slot of step v, before step v + 1's rollout (sync/sync_reached.py)
    stale_sync_rank   as stale_sync on the last TP rank only (run it at --tp 2): expected caught there too
    stale_sync_tensor as stale_sync for one tensor only (layer 3's first), every rank: caught there too, per tensor
    stale_sync_rank_norm as stale_sync_rank for one tensor only (layer 3's first layer norm, held whole on every
                      rank): caught there too, the ranks' copies compared (run it at --tp 2)
    level2_unchecked  level2 with verify_served_weights=false: what the r' monitor alone sees

Each fault job should stop with ``ServedPolicyError`` at its first affected step; the script reads the
step and message from the job's console log. The check's cost per step comes from the honest job's
metrics: ``timing_s/off_grpo_verify_weights`` (a record after a real sync, a check after a skipped one)
against ``timing_s/step``. The r' monitor's per-lag mean |log π_k/α| (``off_grpo/bound/mean_abs_log_rprime``)
is kept for every run too.

The jobs run side by side on one GPU by default (``--gpus 0,0,0``: each its own Ray cluster, started
``--stagger-s`` apart), with vLLM's KV cache fixed at ``--kv-cache-gib`` (vLLM then skips its memory
profiling, which another process freeing memory would upset) and ``gpu_memory_utilization`` 0.1 (the
start-up check only). Writes ``OUT/guard_faults.json``::

    {"device", "versions", "settings", "ok",
     "runs": [{"name", "fault", "verify", "expected_step", "caught", "caught_step", "message",
               "caught_as_expected", "rprime_error", "returncode", "steps_logged", "complete", "fault_lines",
               "rprime_by_lag", "verify_cost", "passed", "wall_s", "startup_s"}, ...]}

and the jobs' logs under ``OUT/logs`` (packed into ``OUT/logs.tar.gz`` when many). Usage on one H100,
after staging the packs with ``--with-smollm2`` (``../shared/gpu/README.md``)::

    timeout 480 python3 benchmarks/guard_faults_gpu.py --out $OUT --budget-s 465

TP=2 on a two-GPU machine (both jobs on both GPUs, side by side; the 1.5B shape, since SmolLM2-135M's
9 attention heads do not split over 2 ranks; with ``--shape`` the task is sync_e2e's ``digit``, whose graded reward
moves a random-init model: on ``add1`` it scores 0, the mask skips every update, and a stale sync then leaves
nothing behind, so a stale-sync run whose faulted sync saw the trainer unchanged is marked ``untestable``)::

    timeout 590 python3 benchmarks/guard_faults_gpu.py --out $OUT --budget-s 570 --shape qwen2.5-1.5b --tp 2 \
        --runs honest,level2,perturb --gpus '0,1;0,1;0,1'

The 1.5B shape (random init, ``--shape qwen2.5-1.5b``; one job needs ~30 GB, so one GPU per job, e.g.
on a four-GPU machine ``--gpus 0,1,2``, or one after another with ``--gpus ''``).

The issue's 100-step honest run, alone (one ~10-minute command)::

    timeout 598 python3 benchmarks/guard_faults_gpu.py --out $OUT --runs honest --honest-steps 100 --gpus 0 --budget-s 585
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
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import learning  # noqa: E402  (SmolLM2 from the GGUF, the arithmetic task)
import mainppo_job  # noqa: E402  (the job: launch, environment, parsers)
import sync_e2e  # noqa: E402  (the job's base overrides)

RESULTS = "guard_faults.json"
FAULT_MODULE = "benchmarks.diag.guard_faults"
#: sync_e2e's "repeat the digit d" task: a graded reward, so a random-init model's groups have variance and it moves
DIGIT_TASK = "digit"
#: the lagged manager's per-sync metric: whether the trainer's weights changed since the previous sync
TRAINER_CHANGED = "off_grpo/trainer_changed"
#: run name -> (fault injected by benchmarks/diag/guard_faults.py, verify_served_weights)
RUNS = {
    "honest": (None, True),
    "level2": ("level2", True),
    "perturb": ("perturb", True),
    "noise": ("noise", True),
    "level2_unchecked": ("level2", False),
    "stale_sync": ("stale_sync", True),
    "stale_sync_rank": ("stale_sync_rank", True),
    "stale_sync_tensor": ("stale_sync_tensor", True),
    "stale_sync_rank_norm": ("stale_sync_rank_norm", True),
    "corrupt_sync_tensor": ("corrupt_sync_tensor", True),
}
#: what each check of a real sync compared (the lagged manager's metrics)
SYNC_COUNTS = ("off_grpo/sync_tensors_checked", "off_grpo/sync_copies_compared", "off_grpo/sync_tensors_exact")
#: the plugin's error for a failed served-weights check (served_weights.mismatch_message)
CAUGHT = re.compile(
    r"(verl-offgrpo: step (\d+): (?:vLLM does not serve α|the served-weights check could not confirm|"
    r"the weight sync did not reach vLLM|the weight sync reached vLLM only in part|"
    r"the weight sync reached vLLM's TP ranks unequally|after the weight sync vLLM's)[^\n]*)"
)
#: the r' guard's own errors (alpha_guard)
RPRIME_ERROR = re.compile(r"(verl-offgrpo: step (\d+): the batch was sampled[^\n]*)")
FAULT_LINE = re.compile(r"\[guard-fault\][^\n]*")


def expected_step(fault: str | None, period: int, after_sync: int) -> int | None:
    """The first step whose rollout would use wrong weights (no validation, no forced syncs): ``level2``:
    the first skipped slot's wake, after step 1, serves step 2; ``perturb``/``noise``: the first weights
    wake after the K-th sync (at step v·(K−1)) is the skipped slot after step v·(K−1)+1, serving step
    v·(K−1)+2."""
    if fault is None:
        return None
    if fault == "level2":
        return 2
    if fault.startswith(("stale_sync", "corrupt_sync")):  # caught in the slot of the K-th sync, step v·(K−1)
        return period * (after_sync - 1)
    return period * (after_sync - 1) + 2


def parse_console(text: str) -> dict:
    """What a job's console log says about the check: the first served-weights error (its step and
    message), the first r' guard error, and the fault module's lines."""
    caught = CAUGHT.search(text)
    rprime = RPRIME_ERROR.search(text)
    lines = list(dict.fromkeys(m.group(0).strip() for m in FAULT_LINE.finditer(text)))
    return {
        "caught": caught is not None,
        "caught_step": int(caught.group(2)) if caught else None,
        "message": caught.group(1).strip()[:3000] if caught else None,
        "rprime_error": rprime.group(1).strip()[:1000] if rprime else None,
        "fault_lines": lines[:20],
    }


def _stats(xs: list[float]) -> dict | None:
    if not xs:
        return None
    return {"median": statistics.median(xs), "max": max(xs), "n": len(xs)}


def verify_cost(metrics: dict[int, dict]) -> dict:
    """Per-step cost of the check from a job's metrics: the record (synced slots) and check (skipped
    slots) wall times, the step time, and the check's share of the median step."""
    check, record, steps, sync = [], [], [], []
    for step in sorted(s for s in metrics if s >= 1):
        row = metrics[step]
        if row.get("timing_s/off_grpo_verify_sync") is not None:  # the check that a real sync reached vLLM
            sync.append(row["timing_s/off_grpo_verify_sync"])
        t = row.get("timing_s/off_grpo_verify_weights")
        if t is not None:
            (check if row.get("off_grpo/weights_verified") == 1.0 else record).append(t)
        if row.get("timing_s/step") is not None:
            steps.append(row["timing_s/step"])
    out = {"check_s": _stats(check), "record_s": _stats(record), "sync_check_s": _stats(sync), "step_s": _stats(steps)}
    per_slot = check + record
    if per_slot and steps:
        out["share_of_median_step"] = statistics.median(per_slot) / statistics.median(steps)
    return out


def rprime_by_lag(metrics: dict[int, dict]) -> dict[str, dict]:
    """mean |log π_k/α| per token (the r' monitor's statistic) by the batch's rollout lag."""
    by: dict[str, list[float]] = {}
    for step in sorted(s for s in metrics if s >= 1):
        row = metrics[step]
        lag, value = row.get("off_grpo/rollout_lag"), row.get("off_grpo/bound/mean_abs_log_rprime")
        if lag is not None and value is not None:
            by.setdefault(str(int(lag)), []).append(value)
    return {lag: _stats(xs) for lag, xs in sorted(by.items())}


def job_overrides(args, name: str, steps: int, verify: bool, model_dir: Path, data_dir: Path) -> list[str]:
    """The sync benchmark's job (``sync_e2e.overrides``: model, vLLM and trainer settings known to work on
    the GPU machine) with the task (``--task``: an arithmetic task of ``learning.py``, or sync_e2e's ``digit``
    task and its reward), a fixed KV cache and the check's knob."""
    base = sync_e2e.overrides(args.trainer, args.sync_period, model_dir, data_dir, steps, args.lr, name)
    task = {} if args.task == DIGIT_TASK else {
        "data.val_files": data_dir / "test.parquet",
        "reward.custom_reward_function.path": "pkg://verl_offgrpo.rewards",
        "reward.custom_reward_function.name": "compute_score",
    }
    updates: dict[str, object] = {
        **task,
        "data.train_batch_size": args.batch,
        "data.max_response_length": args.response_length,
        "actor_rollout_ref.actor.ppo_mini_batch_size": args.batch,
        "actor_rollout_ref.rollout.n": args.n,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": args.tp,
        "actor_rollout_ref.rollout.gpu_memory_utilization": args.gpu_memory_utilization,
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes": int(args.kv_cache_gib * 2**30),
        "trainer.n_gpus_per_node": args.tp,
        "trainer.project_name": "offgrpo_guard_faults",
        "algorithm.off_grpo.verify_served_weights": str(verify).lower(),
    }
    # a plain key=value --extra replaces the same key of the base (algorithm.off_grpo.rollout_schedule=window on
    # --trainer v1); +key=value and ~key go to hydra as they are
    plain = [extra for extra in args.extra if "=" in extra and not extra.startswith(("+", "~"))]
    return (mainppo_job.set_overrides(mainppo_job.set_overrides(base, updates), dict(e.split("=", 1) for e in plain))
            + [extra for extra in args.extra if extra not in plain])


def run_one(args, name: str, model_dir: Path, data_dir: Path, log_dir: Path, env_extra: dict) -> dict:
    fault, verify = RUNS[name]
    steps = args.honest_steps if fault is None else args.fault_steps
    env = dict(env_extra)
    if fault:
        env.update(VERL_USE_EXTERNAL_MODULES=FAULT_MODULE, OFFGRPO_GUARD_FAULT=fault,
                   OFFGRPO_GUARD_FAULT_AFTER_SYNC=str(args.after_sync), OFFGRPO_GUARD_FAULT_LAYER=str(args.layer))  # fmt: skip
    start = time.time()
    timeout = mainppo_job.job_timeout(None, args.budget_s, args.t0, start)
    rc, progress, jsonl = mainppo_job.run_main_ppo(
        name, job_overrides(args, name, steps, verify, model_dir, data_dir), args.out, log_dir, timeout, steps,
        args.stall_s, **env,
    )  # fmt: skip
    console = (log_dir / f"{name}.log").read_text(errors="replace") if (log_dir / f"{name}.log").exists() else ""
    metrics = mainppo_job.parse_jsonl(jsonl) or mainppo_job.parse_console(console)
    parsed = parse_console(console)
    expected = expected_step(fault, args.sync_period, args.after_sync) if verify else None
    moved = metrics.get(expected, {}).get(TRAINER_CHANGED) if expected is not None else None
    run = {
        "name": name,
        "fault": fault,
        "trainer_changed_at_fault": moved,
        "verify": verify,
        "steps_requested": steps,
        "expected_step": expected,
        **parsed,
        "caught_as_expected": (parsed["caught_step"] == expected) if expected is not None else None,
        "returncode": rc,
        "steps_logged": sum(1 for s in metrics if s >= 1),
        "complete": sum(1 for s in metrics if s >= 1) >= steps,
        "rprime_by_lag": rprime_by_lag(metrics),
        "verify_cost": verify_cost(metrics),
        "rollout_schedule": "window" if "algorithm.off_grpo.rollout_schedule=window" in args.extra else "per_step",
        # how much each sync check compared: [min, max] over the logged syncs
        "sync_counts": {key.split("/")[-1]: [min(values), max(values)] for key in SYNC_COUNTS
                        if (values := [row[key] for row in metrics.values() if row.get(key) is not None])},
        "wall_s": round(time.time() - start, 1),
        "startup_s": progress.get("startup_s"),
        "gpu": env_extra.get("CUDA_VISIBLE_DEVICES"),
        **mainppo_job.memory_and_host(progress),
    }
    print(f"[guard_faults] {name}: rc={rc} steps={run['steps_logged']} caught={run['caught_step']} "
          f"expected={expected} message={(run['message'] or '')[:200]}", flush=True)  # fmt: skip
    return run


def split_gpus(spec: str | None) -> list[str] | None:
    """``--gpus``: one CUDA_VISIBLE_DEVICES value per concurrent job, separated by ',' (one GPU each, ids may
    repeat to share a GPU) or by ';' when a job needs several (``0,1;2,3`` for TP=2); empty: one after another."""
    if not spec or not spec.strip():
        return None
    return [g.strip() for g in spec.split(";" if ";" in spec else ",") if g.strip()]


def verdict(run: dict) -> bool:
    """A run passed: honest — no served-weights error and at least one lagged wake checked (a window, which
    wakes vLLM only to sync: one real sync checked; ``complete`` says whether it ran all its steps before the
    time limit); a checked fault — caught at its expected step; ``level2_unchecked`` — informational (always
    passes)."""
    if run["fault"] is None:
        kind = "sync_check_s" if run.get("rollout_schedule") == "window" else "check_s"
        checks = ((run.get("verify_cost") or {}).get(kind) or {}).get("n", 0)
        return not run["caught"] and run["rprime_error"] is None and checks > 0
    if not run["verify"]:
        return True
    return bool(run["caught_as_expected"])


#: the fault module's count of the put-back tensors the faulty sync had changed (``… put back (…); moved N``)
MOVED = re.compile(r"put back \([^)]*\); moved (\d+)")


def untestable(run: dict) -> bool:
    """A stale-sync fault whose sync found the trainer's weights unchanged (``off_grpo/trainer_changed`` 0: every
    update skipped, e.g. every group zero-variance under the mask), or changed none of the tensors the fault put back
    (every fault line says ``moved 0``: a norm of ones under an update below bf16's resolution): putting the old
    weights back then leaves vLLM serving α exactly, so there was nothing to catch. Such a run fails, and says why."""
    moved = [int(m.group(1)) for line in run.get("fault_lines") or () for m in [MOVED.search(line)] if m]
    return (str(run["fault"]).startswith("stale_sync") and not run.get("caught")
            and (run.get("trainer_changed_at_fault") == 0 or (bool(moved) and not any(moved))))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", default="/tmp/guard_faults")
    p.add_argument("--runs", default="honest,level2,perturb", help=f"comma list of {sorted(RUNS)}")
    p.add_argument("--model-path", default=None, help="an HF checkpoint instead of the staged SmolLM2 GGUF")
    p.add_argument("--shape", default=None,
                   help="a random-init model of throughput.py's SHAPES instead (e.g. qwen2.5-1.5b; built once under --work)")
    p.add_argument("--task", default=None,
                   help=f"add1 (learning.py's, the default for SmolLM2) or {DIGIT_TASK} (sync_e2e's graded reward, the "
                        "default with --shape: a random-init model scores 0 on add1, so the zero-variance mask skips "
                        "every update and a stale sync has nothing to leave behind)")
    p.add_argument("--trainer", default="v0", choices=["v0", "v1"])
    p.add_argument("--sync-period", type=int, default=3)
    p.add_argument("--honest-steps", type=int, default=30)
    p.add_argument("--fault-steps", type=int, default=8, help="steps a fault job may run (it should stop earlier)")
    p.add_argument("--after-sync", type=int, default=2, help="perturb/noise: inject after this many real syncs")
    p.add_argument("--layer", type=int, default=3, help="perturb/noise: the decoder layer whose first matrix changes")
    p.add_argument("--tp", type=int, default=1, help="rollout tensor parallelism (needs that many GPUs per job)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--response-length", type=int, default=48)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.1)
    p.add_argument("--kv-cache-gib", type=float, default=2.0)
    p.add_argument("--gpus", default="0,0,0",
                   help="one CUDA_VISIBLE_DEVICES value per concurrent job, ',' separated (repeat an id to share a GPU) "
                        "or ';' separated for multi-GPU jobs ('0,1;0,1' for --tp 2); '' = one job after another")  # fmt: skip
    p.add_argument("--stagger-s", type=float, default=40.0, help="seconds between the starts of side-by-side jobs")
    p.add_argument("--budget-s", type=float, default=None, help="wall seconds for the whole command")
    p.add_argument("--stall-s", type=float, default=150.0)
    p.add_argument("--extra", nargs="*", default=[], help="extra hydra overrides for every job")
    args = p.parse_args(argv)
    args.t0 = time.time()
    if args.task is None:
        args.task = DIGIT_TASK if args.shape else "add1"
    names = [n.strip() for n in args.runs.split(",") if n.strip()]
    if unknown := sorted(set(names) - set(RUNS)):
        p.error(f"unknown run(s) {unknown}; known: {sorted(RUNS)}")
    if args.tp > 1 and not (args.shape or args.model_path):
        p.error("SmolLM2-135M has 9 attention heads, which do not split over tensor-parallel ranks: "
                "use --shape qwen2.5-1.5b (or --model-path) with --tp > 1")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.out = out
    work = Path(args.work).resolve()
    log_dir = work / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    info = mainppo_job.versions()
    if args.shape:
        import throughput  # noqa: E402  (random-init models of real shapes)

        model_dir = work / f"shape_{args.shape}"
        if not (model_dir / "config.json").exists():
            throughput.build_model(model_dir, args.shape)
    else:
        model_dir = Path(args.model_path) if args.model_path else learning.smollm2_from_gguf(work / "smollm2")
    if args.task == DIGIT_TASK:
        data_dir = sync_e2e.build_data(work / "digit")
    else:
        data_dir = learning.build_task(work / f"arith_{args.task}", args.task, n_test=50, twins_in_train=True)  # as its runs had it
    gpus = split_gpus(args.gpus)
    # the longest job (honest) first: side by side, it starts first
    names.sort(key=lambda n: RUNS[n][0] is not None)
    runs = mainppo_job.on_gpus(
        names, gpus, lambda name, env: run_one(args, name, model_dir, data_dir, log_dir, env), stagger_s=args.stagger_s
    )
    for run in runs:
        run["passed"] = verdict(run)
        if untestable(run):
            run["untestable"] = "the trainer's weights did not change at the faulted sync: nothing to catch"
            print(f"[guard_faults] {run['name']}: UNTESTABLE: {run['untestable']} (use --task {DIGIT_TASK})", flush=True)
    settings = {k: getattr(args, k) for k in ("trainer", "sync_period", "honest_steps", "fault_steps", "after_sync",
                                              "layer", "tp", "batch", "n", "response_length", "lr",
                                              "gpu_memory_utilization", "kv_cache_gib", "gpus", "task")}  # fmt: skip
    result = {
        "device": info.get("device"),
        "versions": info,
        "model": f"random-init {args.shape}" if args.shape else (str(args.model_path) if args.model_path else learning.MODEL_NAME),
        "settings": settings,
        "concurrent_jobs": mainppo_job.concurrency(gpus, len(names)),
        "ok": all(r["passed"] for r in runs),
        "runs": runs,
    }
    mainppo_job.write_results(RESULTS, result, out, work)
    print(f"[guard_faults] ok={result['ok']} -> {out / RESULTS}", flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
