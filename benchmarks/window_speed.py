#!/usr/bin/env python3
"""Windowed rollout vs per-step rollout: time per update, side by side on one host (lab script).

Runs verl's real ``python3 -m verl.trainer.main_ppo`` (V1 trainer, the plugin's yaml) once per job,
the jobs side by side, one GPU each (``mainppo_job.on_gpus``), on a generation-heavy real workload:
SmolLM2-135M-Instruct (dequantized from the staged GGUF, ``learning.smollm2_from_gguf``) on GSM8K
(``data_prep/gsm8k.py --local-dir``), 512-token response cap, responses of natural (variable) length.
The zero-variance mask is off in every job, so every update does the same work whatever the reward.

A job is ``NAME=SPEC``; SPEC is one of

* ``step:v``   ``sync_period=v``, ``rollout_schedule=per_step`` (``step:1`` is on-policy GRPO);
* ``window:v`` ``sync_period=v``, ``rollout_schedule=window``;
* ``bigbatch:v`` verl's stock large-batch PPO sampling the same window at once: estimator ``grpo``,
  loss ``vanilla`` (clip around π_old), no rollout correction, verl's own ``sync`` trainer mode,
  ``train_batch_size = v·B`` and ``ppo_mini_batch_size = B`` (v updates per global step).

A ``:full`` suffix (``window:10:full``) raises vLLM's ``max_num_seqs`` (verl's yaml: 256) to the window's
samples per engine, v·B·n / (GPUs per job / TP), so the window is one vLLM batch instead of waves.

Per job and per update (a global step, or a mini-batch update of a ``bigbatch`` step) the script
records the wall time; it drops the first ``--warmup-windows`` windows of v updates (v = 1 for
``step``) and reports the mean time per update over the rest, counted in whole windows, with the
parts (generation, sync slot, the other stages). Speedups are against the job named ``--baseline``,
with a 90 % bootstrap interval over the per-window means. Also per rollout lag the mean |log π_k/α|
(``off_grpo/bound/mean_abs_log_rprime``), to compare ``window`` with ``per_step`` at equal lag, and
each job's memory (``mainppo_job.memory_summary``), sampled every ``--mem-sample-s`` (2 s): the GPU total
with who held it at its peak (``max_by_role``: the FSDP actor, vLLM, other processes of the job), host
memory, the TransferQueue storage units.

``--shape qwen2.5-1.5b`` (or ``qwen2.5-7b``) runs a random-init model of that shape instead
(``throughput.build_model``) on throughput.py's synthetic task with a fixed response length
(``rollout.ignore_eos``): the layouts of ``results/throughput.json``, with ``--n-gpus``/``--tp``/``--offload``
as there (``--gpus 0,1,2,3 --n-gpus 2`` runs two 2-GPU jobs side by side). ``--extra`` adds hydra overrides to
every job (e.g. ``actor_rollout_ref.rollout.enforce_eager=False``, to time vLLM with CUDA graphs);
``--job-extra NAME=OVERRIDE`` adds one to job NAME only (an A/B of a vLLM engine setting side by side).

Writes ``OUT/window_speed.json``. Usage on a 4-GPU machine (after staging with ``--with-smollm2``)::

    python3 benchmarks/window_speed.py --out $OUT --work /tmp/ws --gsm8k .gpu/gsm8k --gpus 0,1,2,3 \\
        --jobs v1=step:1,p4=step:4,w4=window:4,w10=window:10 --steps 40 --budget-s 900

The 1.5B shape with TP=2 on a 2-GPU machine, the jobs one after the other (``--run-timeout`` each)::

    python3 benchmarks/window_speed.py --out $OUT --work /tmp/ws --shape qwen2.5-1.5b --n-gpus 2 --tp 2 \
        --gpus 0,1 --jobs v1=step:1,w10=window:10 --steps 60 --budget-s 1440 --run-timeout 700

The same, two 2-GPU jobs side by side::

    python3 benchmarks/window_speed.py --out $OUT --work /tmp/ws --shape qwen2.5-1.5b --n-gpus 2 --tp 2 \
        --gpus 0,1,2,3 --jobs v1=step:1,w10=window:10 --response-length 512 --steps 60 --budget-s 1200
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):  # the lab's modules, and the repo (learning.py imports verl_offgrpo)
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import mainppo_job  # noqa: E402
import sync_e2e  # noqa: E402

REPO = mainppo_job.REPO


def parse_jobs(text: str) -> list[tuple[str, str, int, bool]]:
    """``NAME=KIND:v[:full]`` items -> (name, kind, v, full)."""
    jobs = []
    for item in text.split(","):
        name, spec = item.split("=", 1)
        kind, v, *rest = spec.split(":") + [""] * (":" not in spec)
        if kind not in ("step", "window", "bigbatch") or not v.isdigit() or int(v) < 1 or rest not in ([], ["full"]):
            raise SystemExit(f"--jobs: bad job {item!r} (NAME=step|window|bigbatch:v[:full])")
        jobs.append((name, kind, int(v), rest == ["full"]))
    return jobs


def full_window_seqs(args, v: int) -> int:
    """vLLM's ``max_num_seqs`` that holds a window of v batches at once on each engine (GPUs per job / TP)."""
    return -(-v * args.batch * args.n // max(args.n_gpus // args.tp, 1))


def build_gsm8k(src: Path, dest: Path) -> Path:
    if not (dest / "train.parquet").exists():
        subprocess.run([sys.executable, str(REPO / "data_prep" / "gsm8k.py"), "--local-dir", str(src),
                        "--output-dir", str(dest)], check=True)  # fmt: skip
    return dest


def task_overrides(args, data_dir: Path) -> dict[str, object]:
    """GSM8K with the plugin's reward and natural response lengths, or (``--shape``) throughput.py's
    synthetic task (``sync_e2e.build_data``: its own reward file) with every response ``--response-length`` long."""
    if args.shape:
        return {"data.max_prompt_length": 32, "actor_rollout_ref.rollout.ignore_eos": True,
                "actor_rollout_ref.model.enable_gradient_checkpointing": True}  # fmt: skip
    return {
        "data.train_files": data_dir / "train.parquet",
        "data.val_files": data_dir / "test.parquet",
        "data.max_prompt_length": 400,
        "data.filter_overlong_prompts": True,
        "reward.custom_reward_function.path": "pkg://verl_offgrpo.rewards",
        "reward.custom_reward_function.name": "compute_score",
    }


def job_overrides(args, name: str, kind: str, v: int, model_dir: Path, data_dir: Path, full: bool = False) -> list[str]:
    updates_per_step = v if kind == "bigbatch" else 1
    steps = -(-args.steps // updates_per_step)
    base = sync_e2e.overrides("v1", 1 if kind == "bigbatch" else v, model_dir, data_dir, steps, args.lr, name)
    updates: dict[str, object] = {
        **task_overrides(args, data_dir),
        "data.train_batch_size": args.batch * updates_per_step,
        "data.max_response_length": args.response_length,
        "data.seed": 1,
        "actor_rollout_ref.actor.ppo_mini_batch_size": args.batch,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": args.micro_batch,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": args.micro_batch,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": args.micro_batch,
        "actor_rollout_ref.rollout.n": args.n,
        "actor_rollout_ref.rollout.gpu_memory_utilization": args.gpu_mem,
        "actor_rollout_ref.rollout.agent.num_workers": 2,
        "actor_rollout_ref.rollout.seed": 0,
        "actor_rollout_ref.actor.data_loader_seed": 0,
        "algorithm.off_grpo.zero_var_mask": "false",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": args.tp,
        "actor_rollout_ref.actor.fsdp_config.param_offload": args.offload,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": args.offload,
        "trainer.n_gpus_per_node": args.n_gpus,
        "trainer.project_name": "offgrpo_window_speed",
    }
    if kind == "bigbatch":
        updates.update({
            "algorithm.adv_estimator": "grpo",
            "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla",
            "algorithm.rollout_correction.rollout_is": "null",
            "trainer.v1.trainer_mode": "sync",
        })  # fmt: skip
    else:
        updates["algorithm.off_grpo.rollout_schedule"] = "window" if kind == "window" else "per_step"
    if full:  # the whole window in one vLLM batch (verl's yaml: 256 sequences, 8192 tokens a scheduler step)
        seqs = full_window_seqs(args, v)
        updates["actor_rollout_ref.rollout.max_num_seqs"] = seqs
        updates["actor_rollout_ref.rollout.max_num_batched_tokens"] = max(8192, seqs)
    own = [override for job, override in parse_job_extras(getattr(args, "job_extra", None)) if job == name]
    return mainppo_job.set_overrides(base, updates) + list(args.extra) + own


#: the engine settings a job's speed hangs on that its overrides may leave implicit, by the key they are read from:
#: vLLM's output kind (the lab pins final outputs off, ``sync_e2e.overrides``), eager vs CUDA graphs, agent-loop workers
SETTINGS = {
    "final_outputs_only": "algorithm.off_grpo.final_outputs_only",
    "enforce_eager": "actor_rollout_ref.rollout.enforce_eager",
    "agent_workers": "actor_rollout_ref.rollout.agent.num_workers",
}


def job_settings(overrides: list[str]) -> dict[str, str | None]:
    """The value each of :data:`SETTINGS` takes in a job's hydra overrides (the last one wins, as in hydra), else None
    (verl's or the plugin's default)."""
    values = dict(override.lstrip("+").split("=", 1) for override in overrides if "=" in override)
    return {name: values.get(key) for name, key in SETTINGS.items()}


def settings_line(settings: dict[str, dict[str, str | None]]) -> str:
    """The workload line's account of :func:`job_settings`, once where every job has the same (``cumulative outputs,
    CUDA graphs, 2 agent-loop workers``), else per job (``v1: …; w10: …``)."""
    def words(s):
        flag = {name: str(value).lower() for name, value in s.items()}
        outputs = {"true": "final outputs only", "false": "cumulative outputs"}.get(flag["final_outputs_only"],
                                                                                  "outputs: plugin default")
        engine = {"true": "vLLM eager", "false": "CUDA graphs"}.get(flag["enforce_eager"], "vLLM default engine")
        return f"{outputs}, {engine}, {s['agent_workers'] or 'default'} agent-loop workers"
    described = {name: words(s) for name, s in settings.items()}
    if len(set(described.values())) == 1:
        return next(iter(described.values()))
    return "; ".join(f"{name}: {text}" for name, text in described.items())


def cumulative_outputs_note(settings: dict[str, dict[str, str | None]]) -> str | None:
    """One line where a plugin job runs with vLLM's cumulative outputs: the lab's pin (``sync_e2e.overrides``), not
    the plugin's default, which three CUDA-graph runs measured unnoticed (NOTEBOOK §33)."""
    pinned = [name for name, s in settings.items() if str(s["final_outputs_only"]).lower() == "false"]
    if not pinned:
        return None
    return (f"[window_speed] {', '.join(pinned)}: final_outputs_only=false (the lab's pin in sync_e2e.overrides; the "
            "plugin's default is on): add algorithm.off_grpo.final_outputs_only=true to --extra to measure the default")


def parse_job_extras(items: list[str] | None, flag: str = "--job-extra") -> list[tuple[str, str]]:
    """``--job-extra NAME=OVERRIDE`` (or ``--job-env NAME=VAR=VALUE``) items -> (job name, key=value)."""
    out = []
    for item in items or []:
        name, sep, override = item.partition("=")
        if not sep or not name or "=" not in override:
            raise SystemExit(f"{flag}: bad item {item!r} (NAME=key=value)")
        out.append((name, override))
    return out


def job_env(items: list[str] | None, name: str) -> dict[str, str]:
    """The ``--job-env`` variables of job ``name``."""
    pairs = [setting.split("=", 1) for job, setting in parse_job_extras(items, "--job-env") if job == name]
    return {key: value for key, value in pairs}


def per_update(metrics: dict[int, dict], kind: str, v: int) -> list[dict]:
    """One row per update: wall time and parts. A ``bigbatch`` step of v updates gives v rows of 1/v each."""
    rows = []
    for step in sorted(metrics):
        m = metrics[step]
        total = mainppo_job.pick(m, "timing_s/step")
        if total is None:
            continue
        share = v if kind == "bigbatch" else 1
        row = {
            "step": step,
            "time_s": total / share,
            "gen_s": (mainppo_job.pick(m, "timing_s/gen") or 0.0) / share,
            "sync_s": (mainppo_job.pick(m, "timing_s/update_weights") or 0.0) / share,
            "update_actor_s": (mainppo_job.pick(m, "timing_s/update_actor") or 0.0) / share,
            "old_log_prob_s": (mainppo_job.pick(m, "timing_s/old_log_prob") or 0.0) / share,
            "rollout_lag": mainppo_job.pick(m, "off_grpo/rollout_lag"),
            "mean_abs_log_rprime": mainppo_job.pick(m, "off_grpo/bound/mean_abs_log_rprime"),
            "generated": mainppo_job.pick(m, "off_grpo/window/generated"),
            "response_length": mainppo_job.pick(m, "response_length/mean"),
            "reward": mainppo_job.pick(m, "critic/score/mean"),
        }
        rows.extend([row] * share)
    return rows


def window_means(rows: list[dict], window: int, warmup_windows: int) -> list[float]:
    """Mean time per update of each whole window after the warm-up ones."""
    out = []
    for start in range(warmup_windows * window, len(rows) - window + 1, window):
        out.append(sum(r["time_s"] for r in rows[start:start + window]) / window)
    return out


def summarize(name: str, kind: str, v: int, rows: list[dict], warmup_windows: int) -> dict:
    window = v  # per_step's lag cycle is v too: compare whole cycles
    means = window_means(rows, window, warmup_windows)
    kept = rows[warmup_windows * window: warmup_windows * window + len(means) * window]
    out = {"name": name, "kind": kind, "v": v, "updates_logged": len(rows), "windows_measured": len(means),
           "window_means_s": means}
    if kept:
        n = len(kept)
        out.update({
            "time_per_update_s": sum(r["time_s"] for r in kept) / n,
            "gen_per_update_s": sum(r["gen_s"] for r in kept) / n,
            "sync_per_update_s": sum(r["sync_s"] for r in kept) / n,
            "update_actor_per_update_s": sum(r["update_actor_s"] for r in kept) / n,
            "old_log_prob_per_update_s": sum(r["old_log_prob_s"] for r in kept) / n,
            "response_length_mean": _mean([r["response_length"] for r in kept]),
        })  # fmt: skip
        out["rest_per_update_s"] = out["time_per_update_s"] - out["gen_per_update_s"] - out["sync_per_update_s"]
        out["gen_share"] = out["gen_per_update_s"] / out["time_per_update_s"]
    by_lag: dict[int, list[float]] = {}
    for r in rows:
        if r["rollout_lag"] is not None and r["mean_abs_log_rprime"] is not None:
            by_lag.setdefault(int(r["rollout_lag"]), []).append(float(r["mean_abs_log_rprime"]))
    out["mean_abs_log_rprime_by_lag"] = {str(k): {"mean": sum(x) / len(x), "n": len(x)} for k, x in sorted(by_lag.items())}
    return out


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def add_speedups(summaries: list[dict], baseline: str) -> None:
    import numpy as np

    base = next((s for s in summaries if s["name"] == baseline), None)
    if base is None or not base.get("window_means_s"):
        return
    for s in summaries:
        if not s.get("window_means_s"):
            continue
        s["speedup_vs_" + baseline] = base["time_per_update_s"] / s["time_per_update_s"]
        if len(s["window_means_s"]) >= 2 and len(base["window_means_s"]) >= 2:
            s["speedup_interval90"] = mainppo_job.bootstrap_interval(
                base["window_means_s"], s["window_means_s"], lambda a, b: a / b, np.mean)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", default="/tmp/window_speed")
    p.add_argument("--gsm8k", default=None, help="folder with GSM8K train.jsonl and test.jsonl (without --shape)")
    p.add_argument("--model-path", default=None, help="an HF checkpoint instead of the staged SmolLM2 GGUF")
    p.add_argument("--shape", default=None, help="a random-init model of throughput.py's SHAPES on its synthetic "
                                                 "task, fixed response length (e.g. qwen2.5-1.5b)")
    p.add_argument("--n-gpus", type=int, default=1, help="GPUs per job (FSDP over them)")
    p.add_argument("--tp", type=int, default=1, help="vLLM tensor parallelism")
    p.add_argument("--offload", action="store_true", help="FSDP param + optimizer offload")
    p.add_argument("--extra", nargs="*", default=[], help="extra hydra overrides for every job")
    p.add_argument("--job-extra", action="append", default=[], metavar="NAME=OVERRIDE",
                   help="a hydra override for job NAME only, after --extra (repeatable), e.g. "
                        "w10fo=algorithm.off_grpo.final_outputs_only=true")
    p.add_argument("--job-env", action="append", default=[], metavar="NAME=VAR=VALUE",
                   help="an environment variable for job NAME only (repeatable), e.g. w10fl=OFFGRPO_FLAT_LOGPROBS=1 "
                        "with VERL_USE_EXTERNAL_MODULES=benchmarks.diag.vllm_outputs exported for every job")
    p.add_argument("--jobs", default="v1=step:1,p4=step:4,w4=window:4,w10=window:10")
    p.add_argument("--baseline", default="v1")
    p.add_argument("--gpus", default=None)
    p.add_argument("--steps", type=int, default=40, help="updates per job (a job stops earlier at its time limit)")
    p.add_argument("--warmup-windows", type=int, default=1)
    p.add_argument("--batch", type=int, default=32, help="prompts per update (B)")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--response-length", type=int, default=512)
    p.add_argument("--micro-batch", type=int, default=32)
    p.add_argument("--gpu-mem", type=float, default=0.4)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--budget-s", type=float, default=900)
    p.add_argument("--run-timeout", type=float, default=None,
                   help="wall seconds a job may run (default: what --budget-s leaves): jobs that queue for one "
                        "GPU set, e.g. --gpus 0,1 --n-gpus 2 with two jobs, run one after the other")
    p.add_argument("--stall-s", type=float, default=300)
    p.add_argument("--startup-s", type=float, default=None,
                   help="stop a job with no logged update this long after its launch (a start-up that hangs)")
    p.add_argument("--mem-sample-s", type=float, default=mainppo_job.MEM_SAMPLE_S,
                   help="seconds between two GPU/host memory samples of a job (a shorter peak can be missed)")
    p.add_argument("--machine", default=socket.gethostname())
    args = p.parse_args(argv)
    t0 = time.time()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    jobs = parse_jobs(args.jobs)
    placeholder = Path("/model"), Path("/data")
    planned = {name: job_overrides(args, name, kind, v, *placeholder, full) for name, kind, v, full in jobs}
    clash = mainppo_job.plain_jobs_side_by_side(planned, bool(args.gpus) and len(args.gpus.split(",")) > args.n_gpus)
    if clash:
        p.error(clash)
    for flag, items in (("--job-extra", args.job_extra), ("--job-env", args.job_env)):
        unknown = {name for name, _ in parse_job_extras(items, flag)} - {job[0] for job in jobs}
        if unknown:
            p.error(f"{flag} names no job of --jobs: {', '.join(sorted(unknown))}")
    if not args.shape and not args.gsm8k:
        p.error("--gsm8k is needed without --shape")
    if note := cumulative_outputs_note({name: job_settings(planned[name]) for name, kind, _v, _full in jobs
                                        if kind != "bigbatch"}):
        print(note, flush=True)
    import throughput  # noqa: E402  (random-init shapes and their synthetic task; gpu_groups)

    if args.shape:
        model_dir = work / f"model_{args.shape}"
        throughput.ensure_model(model_dir, args.shape, 0)
        data_dir = work / "data"
        sync_e2e.build_data(data_dir)
    else:
        import learning  # noqa: E402  (the SmolLM2 conversion)

        model_dir = Path(args.model_path) if args.model_path else learning.smollm2_from_gguf(work / "smollm2")
        data_dir = build_gsm8k(Path(args.gsm8k), work / "gsm8k")
    log_dir = work / "logs"
    log_dir.mkdir(exist_ok=True)
    gpus = throughput.gpu_groups(args.gpus, args.n_gpus)

    def run(job, env_extra):
        name, kind, v, full = job
        env_extra = {**env_extra, **job_env(args.job_env, name)}
        timeout = mainppo_job.job_timeout(args.run_timeout, args.budget_s, t0, time.time())
        overrides = job_overrides(args, name, kind, v, model_dir, data_dir, full)
        rc, progress, jsonl = mainppo_job.run_main_ppo(
            name, overrides, out, log_dir, timeout,
            -(-args.steps // (v if kind == "bigbatch" else 1)), args.stall_s, args.mem_sample_s,
            startup_s=args.startup_s, **env_extra)
        metrics, source = mainppo_job.read_metrics(out / "logs", name)
        rows = per_update(metrics, kind, v)
        summary = summarize(name, kind, v, rows, args.warmup_windows)
        summary.update(rc=rc, metrics_source=source, gpu=env_extra.get("CUDA_VISIBLE_DEVICES"),
                       settings=job_settings(overrides),
                       startup_s=progress.get("startup_s"), memory=progress.get("memory"))
        return {"summary": summary, "updates": rows}

    results = mainppo_job.on_gpus(jobs, gpus, run)
    summaries = [r["summary"] for r in results]
    add_speedups(summaries, args.baseline)
    task = (f"random-init {args.shape}, synthetic task, {args.response_length} tokens fixed" if args.shape
            else f"SmolLM2-135M-Instruct, GSM8K, {args.response_length}-token cap")
    layout = f"{args.n_gpus} GPU(s)/job, TP={args.tp}" + (", FSDP offload" if args.offload else "")
    result = {
        "workload": f"{task}, {args.batch} prompts x {args.n} per update, {layout}, zero_var_mask off, "
                    + settings_line({s["name"]: s["settings"] for s in summaries})
                    + (f", extra {' '.join(args.extra)}" if args.extra else "")
                    + "".join(f", {job}: {override}" for job, override in parse_job_extras(args.job_extra))
                    + "".join(f", {job}: env {setting}" for job, setting in parse_job_extras(args.job_env, "--job-env"))
                    + (f", VERL_USE_EXTERNAL_MODULES={os.environ['VERL_USE_EXTERNAL_MODULES']}"
                       if os.environ.get("VERL_USE_EXTERNAL_MODULES") else ""),
        "machine": args.machine, "versions": mainppo_job.versions(),
        "concurrency": mainppo_job.concurrency(gpus, len(jobs)), "args": vars(args),
        "jobs": summaries, "updates": {r["summary"]["name"]: r["updates"] for r in results},
    }  # fmt: skip
    mainppo_job.write_results("window_speed.json", result, out, work)
    for s in summaries:
        memory = s.get("memory") or {}
        print(json.dumps({k: s.get(k) for k in ("name", "time_per_update_s", "gen_share", "windows_measured",
                                               "speedup_vs_" + args.baseline, "speedup_interval90")}
                         | {"storage_mib_max": (memory.get("storage_mib") or {}).get("max"),
                            "gpu_mib_max": (memory.get("gpu_mib") or {}).get("max"),
                            "gpu_mib_max_by_role": (memory.get("gpu_mib") or {}).get("max_by_role")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
