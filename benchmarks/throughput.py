#!/usr/bin/env python3
"""Throughput of the lagged sync: the same verl GRPO job at sync_period v ∈ {1, 2, 4, 10}.

Runs verl's real ``python3 -m verl.trainer.main_ppo`` with the plugin's yaml (the helpers of
``benchmarks/mainppo_job.py``: environment, launch with stall detection, metric parsing) on a
random-init model of a real shape (``--model``: Qwen2.5-0.5B/1.5B/7B configs, or ``tiny``) with a
byte-level tokenizer padded to exactly the model's vocabulary size (so every sampled id decodes),
the synthetic "repeat the digit" task, and a **fixed response length** (``rollout.ignore_eos=True``)
so that every step does the same work. Any GPU count: ``--n-gpus`` (FSDP over all of them, colocated
vLLM with ``--tp``), ``--offload`` (FSDP param + optimizer offload).

One ``main_ppo`` job per value of v (``--v 1,10``); per job: ``--warmup`` steps dropped, then the
median and the 10–90 % spread of ``timing_s/step``, ``timing_s/gen``, ``timing_s/update_actor``, the
sync slot (``timing_s/update_weights`` = our ``timing_s/off_grpo_sync``: a real sync or a skip),
separately on sync and skipped steps, and tokens/s (``perf/total_num_tokens / timing_s/step``).

Speedups, relative to the same layout's v=1 row (``--merge`` keeps rows of earlier commands, so the
v values of one layout may come from several commands on the same device):

* measured  S_v = T_1 / T_v                         (median step times)
* ideal     S*_v = T_1 / (T_1 − (1 − 1/v)·T_sync)   (T_sync = the v=1 run's median sync time: a
  lagged run saves the sync on (1 − 1/v) of its steps and nothing else changes)
* ideal net of the skip cost: T_1 / (T_1 − (1 − 1/v)·(T_sync − T_skip)) (a skipped slot still wakes
  vLLM from its level-1 CPU copy)

Rows are compared only within one machine (``--machine``, default the hostname): the same GPU model
on another host can differ by more than the effect measured here. ``--gpus 0,1,2,3`` runs the
jobs of ``--v`` side by side on a multi-GPU machine, each on ``--n-gpus`` of the ids
(``mainppo_job.on_gpus``): ``--v 1,2,4,10 --gpus 0,1,2,3`` four one-GPU jobs in the device time of
one, ``--n-gpus 2 --tp 2 --v 1,10 --gpus 0,1,2,3`` two 2-GPU jobs. Such rows share CPUs, host memory
and PCIe, and are compared only with rows of the same concurrency; v=1 and v=10 then run at the same
time on the same host, which also cancels host-to-host differences. ``--control NAME=OVERRIDE`` adds a
v=1 job with one more hydra override, labelled ``<layout>-NAME``, e.g. the level-1 sleep control
(``benchmarks/diag/level1_every_step.py``) beside the plain v=1 job.

Writes ``OUT/throughput.json``::

    {"rows": [{"layout", "n_gpus", "model", "v", "step_time_s", "sync_time_s", "ideal_speedup",
               "measured_speedup", "device", ...}, ...]}

``--accumulate`` (with ``--merge``) pools the measured steps of a re-run with the earlier row of the
same job and machine (each row keeps its ``runs``; each step its ``run`` index): the way to reach
≥ 20 measured steps when start-up leaves too little of a 10-minute command (a 7B model), and to
interleave v=1 and v=10 runs on one lease.

Usage on the GPU machine (after staging, see ../shared/gpu/README.md)::

    python3 benchmarks/throughput.py --out benchmarks/results --model qwen2.5-1.5b --v 1,10 --merge benchmarks/results/throughput.json
    timeout 598 python3 benchmarks/throughput.py --out $OUT --work /tmp/tp --budget-s 590 --n-gpus 4 --tp 4 \
        --model qwen2.5-7b --v 1 --steps 40 --machine <lease label> --merge benchmarks/results/throughput.json --accumulate

(7B on 4 H100s: start-up ≈ 190–290 s and 9–14 s a step depending on the host, so one 10-minute
command with ``--warmup 1`` gives 17–36 measured steps; where that is too few, run a v again on the
same lease with ``--accumulate``, or pool as below. ``--budget-s`` ends the job in time for its row to
be written: an outer ``timeout`` that strikes first loses the row. Longer than one 10-minute call:
``bash benchmarks/detach.sh start DIR -- python3 benchmarks/throughput.py ... --budget-s 1000
--run-timeout 990``, one start-up for twice the steps, as the 7B TP=2 + offload pair ran.)

Without a GPU, rows can be assembled from what came back (``benchmarks/results/raw/throughput``)::

    # a run whose command was killed before it wrote its row: its metrics file, same job arguments
    python3 benchmarks/throughput.py --out /tmp/a --n-gpus 4 --tp 4 --model qwen2.5-7b --v 1 --machine <label> \
        --import-jsonl <job>.jsonl --device "NVIDIA H100 80GB HBM3" --merge benchmarks/results/throughput.json --accumulate
    # other commands' throughput.json, pooled in order
    python3 benchmarks/throughput.py --out benchmarks/results --rows-from run2.json run3.json --merge /tmp/a/throughput.json --accumulate
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import mainppo_job  # noqa: E402  (run environment, launch, parsers)
import sync_e2e  # noqa: E402  (tokenizer, synthetic task, base overrides)
from verl_offgrpo.config import EMPTY_CACHE_ON_SKIP_MODES, KEEP_WEIGHTS_MODES, OffGRPOConfig  # noqa: E402

REPO = mainppo_job.REPO

#: Hugging Face configs of the shapes (random init; nothing is downloaded)
SHAPES = {
    "tiny": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=4096, tie_word_embeddings=True, rope_theta=10000.0),
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False, rope_theta=1e6),
}  # fmt: skip


def param_count(shape: str) -> int:
    """Parameters of a Qwen2 of ``shape``: embeddings (+ an untied head), and per layer q/k/v (with
    bias), o, the gated MLP (3·H·I) and two RMSNorms, plus the final norm."""
    c = SHAPES[shape]
    h, inter, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    embed = c["vocab_size"] * h * (1 if c["tie_word_embeddings"] else 2)
    layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * inter + 2 * h
    return embed + layers * layer + h


# ----------------------------------------------------------------------------- model
def build_padded_tokenizer(model_dir: Path, vocab_size: int):
    """The byte-level BPE of ``sync_e2e`` with filler tokens ``w<i>`` up to exactly ``vocab_size`` ids.

    The fillers have no merges, so encoding never produces them, but every id the random model samples
    decodes (vLLM and verl detokenize responses). transformers 5 loads it as ``Qwen2Tokenizer`` (from
    the model's ``config.json``), which keeps the BPE vocabulary as is.
    """
    from transformers import AutoTokenizer

    sync_e2e.build_tokenizer(model_dir)
    path = model_dir / "tokenizer.json"
    spec = json.loads(path.read_text())
    vocab = spec["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in spec.get("added_tokens", [])}
    next_id, i = max(used) + 1, 0
    while next_id < vocab_size:
        name = f"w{i}"
        i += 1
        if name not in vocab:
            vocab[name] = next_id
            next_id += 1
    path.write_text(json.dumps(spec))
    hf_tok = AutoTokenizer.from_pretrained(str(model_dir))
    assert len(hf_tok) == vocab_size, (len(hf_tok), vocab_size)
    return hf_tok


def build_model(model_dir: Path, shape: str, seed: int = 0) -> dict:
    """Random-init Qwen2 of ``shape`` in bf16 (initialised on the GPU when there is one)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    model_dir.mkdir(parents=True, exist_ok=True)
    cfg = SHAPES[shape]
    hf_tok = build_padded_tokenizer(model_dir, cfg["vocab_size"])
    config = Qwen2Config(
        **cfg,
        max_position_embeddings=4096,
        bos_token_id=hf_tok.pad_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(str(model_dir), safe_serialization=True)
    GenerationConfig(
        eos_token_id=hf_tok.eos_token_id, pad_token_id=hf_tok.pad_token_id, bos_token_id=hf_tok.pad_token_id
    ).save_pretrained(str(model_dir))
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    info = {"shape": shape, "params": n_params}
    (model_dir / "offgrpo_shape.json").write_text(json.dumps(info))
    return info


# ----------------------------------------------------------------------------- runs
def job_overrides(args, v: int, model_dir: Path, data_dir: Path, name: str) -> list[str]:
    base = sync_e2e.overrides(args.trainer, v, model_dir, data_dir, args.warmup + args.steps, 1e-6, name)
    micro = max(1, args.micro_batch)
    updates: dict[str, object] = {
        "data.train_batch_size": args.batch,
        "data.max_prompt_length": 32,
        "data.max_response_length": args.response_length,
        "actor_rollout_ref.rollout.ignore_eos": True,
        "actor_rollout_ref.rollout.n": args.n,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": args.tp,
        "actor_rollout_ref.rollout.gpu_memory_utilization": args.gpu_mem,
        "actor_rollout_ref.actor.ppo_mini_batch_size": args.batch,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
        "actor_rollout_ref.actor.fsdp_config.param_offload": args.offload,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": args.offload,
        **mainppo_job.keep_weights_updates(args.keep_weights),
        "algorithm.off_grpo.empty_cache_on_skip": args.empty_cache_on_skip,
        "trainer.n_gpus_per_node": args.n_gpus,
        "trainer.project_name": "offgrpo_throughput",
    }
    return mainppo_job.set_overrides(base, updates) + list(args.extra)


def summary(values: list[float]) -> dict | None:
    """Median and 10th / 90th percentiles (linear interpolation) of the finite values."""
    values = [x for x in values if sync_e2e.finite(x)]
    if not values:
        return None
    p10, median, p90 = (float(q) for q in np.percentile(values, [10, 50, 90]))
    return {"median": median, "p10": p10, "p90": p90, "n": len(values)}


def per_step(metrics: dict[int, dict]) -> list[dict]:
    rows = []
    for step in sorted(s for s in metrics if s >= 1):
        row = metrics[step]
        if "timing_s/step" not in row:
            continue
        tokens = row.get("perf/total_num_tokens")
        rows.append(
            {
                "step": step,
                "synced": row.get("off_grpo/synced"),
                "step_s": row.get("timing_s/step"),
                "gen_s": row.get("timing_s/gen"),
                # inside gen: vLLM's generation of the batch (its longest request) and the replicas' sleep
                "gen_vllm_s": row.get("timing_s/agent_loop/generate_sequences/max"),
                "sleep_s": row.get("timing_s/off_grpo_sleep"),
                "update_actor_s": row.get("timing_s/update_actor"),
                "old_log_prob_s": row.get("timing_s/old_log_prob"),
                # CPU-only work (the reward function): a control for the host's speed between runs
                "score_s": row.get("timing_s/agent_loop/compute_score/mean"),
                "sync_slot_s": mainppo_job.pick(row, "timing_s/update_weights", "timing_s/off_grpo_sync"),
                "skip_empty_cache_s": row.get("timing_s/off_grpo_skip_empty_cache"),
                "skip_actor_wait_s": row.get("timing_s/off_grpo_skip_actor_wait"),
                "skip_wake_s": row.get("timing_s/off_grpo_skip_wake"),
                "skip_wake_weights_s": row.get("timing_s/off_grpo_skip_wake_weights"),
                "skip_wake_kv_cache_s": row.get("timing_s/off_grpo_skip_wake_kv_cache"),
                # could vLLM wake without the actor's empty_cache? (algorithm.off_grpo.empty_cache_on_skip)
                "skip_cache_emptied_frac": row.get("off_grpo/skip_cache_emptied_frac"),
                "skip_min_free_frac": row.get("off_grpo/skip_min_free_frac"),
                "skip_wake_needs_frac": row.get("off_grpo/skip_wake_needs_frac"),
                "tokens": tokens,
                "tokens_per_s": tokens / row["timing_s/step"] if tokens and row["timing_s/step"] else None,
                "response_length": row.get("response_length/mean"),
                # the served policy: lag 0 → |log r'| at the engine's floor; garbage α → far above it
                "rollout_lag": row.get("off_grpo/rollout_lag"),
                "mean_abs_log_rprime": row.get("actor/off_grpo/mean_abs_log_rprime"),
            }
        )
    return rows


def row_stats(measured: list[dict]) -> dict:
    """The summary fields of a row from its measured step rows (:func:`per_step`, warm-up excluded)."""
    synced = [r for r in measured if r["synced"] == 1.0]
    max_lag = max((r.get("rollout_lag") or 0 for r in measured), default=0)
    skipped = [r for r in measured if r["synced"] == 0.0]
    stats = {
        "measured_steps": len(measured),
        "step_time_s": (summary([r["step_s"] for r in measured]) or {}).get("median"),
        "step": summary([r["step_s"] for r in measured]),
        "gen": summary([r["gen_s"] for r in measured]),
        "update_actor": summary([r["update_actor_s"] for r in measured]),
        "sync_slot_on_sync_steps": summary([r["sync_slot_s"] for r in synced]),
        "sync_slot_on_skipped_steps": summary([r["sync_slot_s"] for r in skipped]),
        "skip_empty_cache": summary([r.get("skip_empty_cache_s") for r in skipped]),
        "skip_actor_wait": summary([r.get("skip_actor_wait_s") for r in skipped]),
        "skip_wake": summary([r.get("skip_wake_s") for r in skipped]),
        "skip_wake_weights": summary([r.get("skip_wake_weights_s") for r in skipped]),
        "skip_wake_kv_cache": summary([r.get("skip_wake_kv_cache_s") for r in skipped]),
        "skip_cache_emptied_frac": summary([r.get("skip_cache_emptied_frac") for r in skipped]),
        "skip_min_free_frac": summary([r.get("skip_min_free_frac") for r in skipped]),
        "tokens_per_s": summary([r["tokens_per_s"] for r in measured]),
        "abs_log_rprime_at_lag0": summary([r.get("mean_abs_log_rprime") for r in measured if r.get("rollout_lag") == 0]),
        "abs_log_rprime_at_max_lag": summary([r.get("mean_abs_log_rprime") for r in measured
                                              if r.get("rollout_lag") and r["rollout_lag"] == max_lag]),
    }
    stats["sync_time_s"] = (stats["sync_slot_on_sync_steps"] or {}).get("median")
    return stats


def run_job(args, v: int, model_dir: Path, data_dir: Path, log_dir: Path, info: dict, shape: dict,
            env_extra: dict[str, str] | None = None) -> dict:
    name = job_name(args, v)
    start = time.time()
    rc, progress, jsonl = mainppo_job.run_main_ppo(
        name, job_overrides(args, v, model_dir, data_dir, name), args.out, log_dir,
        mainppo_job.job_timeout(args.run_timeout, args.budget_s, args.t0, start),
        args.warmup + args.steps, args.stall_s, **(env_extra or {}),
    )  # fmt: skip
    run = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
        "returncode": rc,
        "wall_s": round(time.time() - start, 1),
        "startup_s": progress["startup_s"],
        "stalled": progress["stalled"],
        "warmup": args.warmup,
        **mainppo_job.memory_and_host(progress),
    }
    row = job_row(args, v, mainppo_job.parse_jsonl(jsonl), run, info.get("device"), shape.get("params"),
                  (env_extra or {}).get("CUDA_VISIBLE_DEVICES"))  # fmt: skip
    if rc not in (0, mainppo_job.EXIT_HANG):
        row["log_tail"] = (log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
    print(f"[throughput] {name}: rc={rc} startup={progress['startup_s']}s steps={row['measured_steps']} "
          f"step={row['step_time_s']} sync={row['sync_time_s']} "
          f"skip={(row['sync_slot_on_skipped_steps'] or {}).get('median')}", flush=True)  # fmt: skip
    return row


def gpu_groups(gpus: str | None, n_gpus: int) -> list[str] | None:
    """``--gpus`` cut into the device sets of side-by-side jobs: consecutive runs of ``n_gpus`` ids,
    each a ``CUDA_VISIBLE_DEVICES`` value. None without ``--gpus`` (one job at a time, all GPUs). One-GPU
    jobs may share a GPU (``0,0``: two jobs on GPU 0, each at ``--gpu-mem`` of it); multi-GPU groups may not."""
    if not gpus:
        return None
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if (n_gpus > 1 and len(set(ids)) != len(ids)) or len(ids) % n_gpus:
        raise ValueError(f"--gpus {gpus}: needs a multiple of --n-gpus {n_gpus} ids, distinct where --n-gpus > 1")
    return [",".join(ids[i : i + n_gpus]) for i in range(0, len(ids), n_gpus)]


def job_name(args, v: int) -> str:
    """``<layout>_<model>_v<v>``, plus ``_<mode>`` for a lagged job whose ``empty_cache_on_skip`` is not
    ``always`` (two modes of one v can run side by side)."""
    mode = "" if v == 1 or args.empty_cache_on_skip == "always" else f"_{args.empty_cache_on_skip}"
    return f"{args.layout}_{args.model}_v{v}{mode}"


def skip_modes(value: str) -> list[str]:
    """``--empty-cache-on-skip``: one mode of ``algorithm.off_grpo.empty_cache_on_skip``, or a comma
    list of distinct modes (an A/B: every lagged v runs once per mode, side by side with ``--gpus``)."""
    modes = [m.strip() for m in value.split(",") if m.strip()]
    if not modes or len(set(modes)) != len(modes) or any(m not in EMPTY_CACHE_ON_SKIP_MODES for m in modes):
        raise ValueError(f"--empty-cache-on-skip {value}: distinct modes out of {', '.join(EMPTY_CACHE_ON_SKIP_MODES)}")
    return modes


def control_job(value: str | None) -> tuple[str, str] | None:
    """``--control NAME=OVERRIDE`` as ``(NAME, OVERRIDE)``: a v=1 job with one more hydra override,
    labelled ``<layout>-NAME`` (e.g. ``level1=actor_rollout_ref.rollout.checkpoint_manager_class=…``:
    v=1 whose vLLM sleeps at level 1, run beside the plain v=1 job). None without it."""
    if not value:
        return None
    name, _, override = value.partition("=")
    if not re.fullmatch(mainppo_job.CONTROL_NAME, name) or "=" not in override:
        raise ValueError(f"--control {value}: needs NAME=KEY=VALUE (a hydra override), NAME of [a-z0-9] "
                         "(gen_split.py finds the run by it)")  # fmt: skip
    return name, override


def jobs_of(args) -> list[tuple[int, str, tuple[str, str] | None]]:
    """The jobs of one command as ``(v, empty_cache_on_skip mode, control)``: v=1 once (it never
    skips), every v > 1 once per mode of ``args.skip_modes``, and the ``--control`` job (v=1) if any."""
    jobs = [(v, mode, None) for v in (int(x) for x in args.v.split(","))
            for mode in (args.skip_modes[:1] if v == 1 else args.skip_modes)]  # fmt: skip
    return jobs + ([(1, args.skip_modes[0], args.control)] if args.control else [])


def job_args(args, job: tuple[int, str, tuple[str, str] | None]) -> argparse.Namespace:
    """``args`` as seen by one job of :func:`jobs_of`: its ``empty_cache_on_skip`` mode; a control job
    also its ``<layout>-NAME`` label and override."""
    _, mode, control = job
    updates: dict = {"empty_cache_on_skip": mode}
    if control:
        updates.update(layout=f"{args.layout}-{control[0]}", extra=[*args.extra, control[1]])
    return argparse.Namespace(**{**vars(args), **updates})


def job_row(args, v: int, metrics: dict[int, dict], run: dict, device, params, gpu=None) -> dict:
    """The row of one run of the job ``(args, v)`` from its logged metrics (``{step: {key: value}}``)."""
    steps = [{**r, "run": 0, "measured": r["step"] > run["warmup"]} for r in per_step(metrics)]
    return {
        "layout": args.layout,
        "n_gpus": args.n_gpus,
        "tp": args.tp,
        "offload": args.offload,
        "trainer": args.trainer,
        "keep_weights": args.keep_weights,
        "empty_cache_on_skip": args.empty_cache_on_skip if v > 1 else None,  # a v=1 job never skips
        "gpu_memory_utilization": args.gpu_mem,
        "model": args.model,
        **({"model_seed": args.model_seed} if getattr(args, "model_seed", None) is not None else {}),
        "params": params,
        "v": v,
        "batch": f"{args.batch} prompts x {args.n} samples x {args.response_length} tokens",
        "device": device,
        "machine": args.machine,
        "concurrent_jobs": getattr(args, "concurrent_jobs", 1),
        "gpu": gpu,
        **run,
        "runs": [run],
        **row_stats([r for r in steps if r["measured"]]),
        "steps": steps,
    }


def imported_row(args, jsonl: Path) -> dict:
    """The row of a run whose command ended before this script wrote it (an outer ``timeout`` killed
    the script while verl was still logging): the job's arguments as given now, its steps from the
    metrics file it left (``--import-jsonl``, with ``--device``). Start-up, wall time and memory are
    unknown (None); the run is marked ``imported_from``."""
    (v,) = [int(x) for x in args.v.split(",")]
    run = {"returncode": None, "wall_s": None, "startup_s": None, "stalled": None, "warmup": args.warmup,
           "memory_during_training": None, "imported_from": jsonl.name}  # fmt: skip
    return job_row(args, v, mainppo_job.parse_jsonl(jsonl), run, args.device, param_count(args.model))


def accumulate(earlier: dict, now: dict) -> dict:
    """One row from two runs of the same job on the same machine: their measured steps pooled.

    For jobs whose start-up leaves too little of a 10-minute command for the wanted number of measured
    steps (a 7B model), or for interleaving v=1 and v=10 runs on one lease. Rows written before runs
    were recorded (no ``runs``) cannot be pooled: ``now`` replaces them. A row with exactly the runs of
    ``earlier`` is that row (a device command that merged the committed file returns its rows too) and
    changes nothing; a row sharing only some of them is an error (a run would count twice).
    """
    if "runs" not in earlier:
        return now
    if now["runs"] == earlier["runs"]:  # the same row again (a device command's --merge copy of ours)
        return earlier
    if any(run in earlier["runs"] for run in now["runs"]):
        raise ValueError(f"run already pooled into the {earlier['layout']} {earlier['model']} v={earlier['v']} row: "
                         f"{now['runs']}")  # fmt: skip
    offset = len(earlier["runs"])
    steps = earlier["steps"] + [{**r, "run": r["run"] + offset} for r in now["steps"]]
    runs = earlier["runs"] + now["runs"]
    row = {**now, "runs": runs, "steps": steps, **row_stats([r for r in steps if r["measured"]])}
    clean = (0, mainppo_job.EXIT_HANG, None)  # None: an imported run (its exit status is unknown)
    row["returncode"] = next((r["returncode"] for r in runs if r["returncode"] not in clean),
                             next((r["returncode"] for r in runs if r["returncode"] is not None), None))  # fmt: skip
    known = [r["wall_s"] for r in runs if r.get("wall_s") is not None]
    row["wall_s"] = round(sum(known), 1) if len(known) == len(runs) else None
    return row


def merge_rows(earlier: list[dict], now: list[dict], pool: bool) -> list[dict]:
    """``now`` plus the rows of ``earlier`` not re-run; with ``pool`` a re-run row is pooled
    (:func:`accumulate`) with the earlier row of the same job (:func:`_job_key`)."""
    before = {_job_key(r): r for r in earlier}
    done = set()
    merged = []
    for r in now:
        key = _job_key(r)
        done.add(key)
        merged.append(accumulate(before[key], r) if pool and key in before else r)
    return [r for r in earlier if _job_key(r) not in done] + merged


def _base_key(row: dict) -> tuple:
    """Rows compared with each other: same layout, model, device, machine, job concurrency, way of
    keeping α (``no_sleep`` changes the v=1 job too) and vLLM memory fraction (rows before it was
    recorded ran at the default, 0.4)."""
    return (row["layout"], row["model"], row["device"], row.get("machine"), row.get("concurrent_jobs", 1),
            row.get("keep_weights") or "sleep_level1", row.get("gpu_memory_utilization") or 0.4)  # fmt: skip


def skip_variant(row: dict) -> str | None:
    """``algorithm.off_grpo.empty_cache_on_skip`` of a lagged row (rows before the knob: ``always``);
    None for v=1, which never skips."""
    return (row.get("empty_cache_on_skip") or "always") if row["v"] > 1 else None


def _job_key(row: dict) -> tuple:
    """Runs of one job, pooled by ``--accumulate``: the comparison key, v and the skip variant."""
    return (*_base_key(row), row["v"], skip_variant(row) or "")


def measured_steps_of(row: dict) -> list[float]:
    """The step times of ``row``'s measured steps (warm-up excluded), in run order."""
    return [s["step_s"] for s in row.get("steps") or [] if s.get("measured") and sync_e2e.finite(s.get("step_s"))]


def speedup_interval(t1_steps: list[float], tv_steps: list[float], level: float = 0.9,
                     resamples: int = 4000, seed: int = 0, statistic=np.median) -> list[float] | None:
    """Bootstrap interval of the measured speedup statistic(T_1)/statistic(T_v) (median by default).

    Both step lists are resampled with replacement (independently: two jobs), ``resamples`` times with
    a fixed seed; the interval is the (1 − level)/2 and (1 + level)/2 percentiles of the ratio of the
    resampled statistics. It says whether a measured speedup is distinguishable from a target such as
    0.95·S* given the step-to-step spread. None if either list is empty.
    """
    if not t1_steps or not tv_steps:
        return None
    return mainppo_job.bootstrap_interval(t1_steps, tv_steps, np.divide, statistic, level, resamples, seed)


def add_speedups(rows: list[dict]) -> None:
    """Speedups of each row relative to the v=1 row of the same layout, model, device and machine.

    ``ideal_speedup`` = T_1 / (T_1 − (1 − 1/v)·T_sync) (a skipped slot assumed free);
    ``ideal_speedup_net_of_skip`` = T_1 / (T_1 − (1 − 1/v)·(T_sync − T_skip)) with the row's own
    median skip-slot time T_skip (level-1 wake + empty_cache are not free); ``measured_speedup`` = T_1/T_v,
    with ``measured_speedup_ci90`` its 90 % bootstrap interval over the two rows' measured steps
    (:func:`speedup_interval`; v ≠ 1 only). T are median step times; ``measured_speedup_mean`` (and
    ``measured_speedup_mean_ci90``) is the same ratio of mean step times, i.e. of the wall-clock for as
    many steps, which a few slow steps under a shared host's load move more than they move the median.
    """
    base = {_base_key(r): r for r in rows if r["v"] == 1 and r.get("step_time_s") and r.get("sync_time_s")}
    for r in rows:
        b = base.get(_base_key(r))
        r["ideal_speedup"] = r["measured_speedup"] = r["ideal_speedup_net_of_skip"] = None
        for key in ("measured_speedup_ci90", "measured_speedup_mean", "measured_speedup_mean_ci90"):
            r.pop(key, None)
        if b is None or not r.get("step_time_s"):
            r.pop("measured_over_ideal", None)  # no v=1 row (any more): no ratio to it
            continue
        t1, t_sync, v = b["step_time_s"], b["sync_time_s"], r["v"]
        r["ideal_speedup"] = t1 / (t1 - (1 - 1 / v) * t_sync)
        t_skip = (r.get("sync_slot_on_skipped_steps") or {}).get("median") or 0.0
        r["ideal_speedup_net_of_skip"] = t1 / (t1 - (1 - 1 / v) * (t_sync - t_skip))
        r["measured_speedup"] = t1 / r["step_time_s"]
        r["measured_over_ideal"] = r["measured_speedup"] / r["ideal_speedup"]
        t1_steps, tv_steps = measured_steps_of(b), measured_steps_of(r)
        if t1_steps and tv_steps:
            r["measured_speedup_mean"] = float(np.mean(t1_steps) / np.mean(tv_steps))
        if v != 1:
            r["measured_speedup_ci90"] = speedup_interval(t1_steps, tv_steps)
            r["measured_speedup_mean_ci90"] = speedup_interval(t1_steps, tv_steps, statistic=np.mean)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--work", default=None, help="scratch dir (model, data, logs); default OUT/throughput_work")
    p.add_argument("--model", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    p.add_argument("--v", default="1,10", help="comma list of sync periods, one main_ppo job each")
    p.add_argument("--layout", default=None, help="row label; default '<n>gpu-tp<tp>[-offload]'")
    p.add_argument("--trainer", default="v0", choices=["v0", "v1"])
    p.add_argument("--n-gpus", type=int, default=1)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--offload", action="store_true", help="FSDP param + optimizer offload")
    p.add_argument("--keep-weights", default="sleep_level1", choices=KEEP_WEIGHTS_MODES)
    p.add_argument("--empty-cache-on-skip", default=OffGRPOConfig().empty_cache_on_skip,
                   help=f"algorithm.off_grpo.empty_cache_on_skip of the lagged jobs ({', '.join(EMPTY_CACHE_ON_SKIP_MODES)}; "
                        "default: the plugin's), "
                        "or a comma list of them: each lagged v then runs once per mode (side by side with --gpus); "
                        "the rows of each mode are kept apart and compared with the same v=1 row")  # fmt: skip
    p.add_argument("--batch", type=int, default=16, help="prompts per step")
    p.add_argument("--n", type=int, default=4, help="samples per prompt")
    p.add_argument("--response-length", type=int, default=256)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--gpu-mem", type=float, default=0.4)
    p.add_argument("--model-per-job", action="store_true",
                   help="give each job of the command its own random init (seed = its index) instead of one shared "
                        "model: jobs side by side then serve different policies, so a job whose vLLM loaded another "
                        "job's weights shows a large lag-0 |log π_k/α| (the served-policy guard stops it)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20, help="measured steps after the warm-up")
    p.add_argument("--run-timeout", type=float, default=None,
                   help="seconds per job (default: what --budget-s leaves, else 560)")
    p.add_argument("--stall-s", type=float, default=150.0)
    p.add_argument("--budget-s", type=float, default=None,
                   help="wall seconds this whole command may take (e.g. the outer timeout): each job's run timeout "
                        "is cut to end in time for the rows to be written")  # fmt: skip
    p.add_argument("--machine", default=socket.gethostname(),
                   help="label of the host; speedups compare rows of the same machine only")
    p.add_argument("--gpus", default=None,
                   help="comma list of GPU ids: run the jobs of --v side by side, each on --n-gpus of them "
                        "(consecutive ids: --n-gpus 2 --gpus 0,1,2,3 gives 0,1 and 2,3); rows are then compared "
                        "only with rows of the same concurrency")  # fmt: skip
    p.add_argument("--merge", default=None, help="earlier throughput.json: keep its rows not re-run now")
    p.add_argument("--accumulate", action="store_true",
                   help="with --merge: pool this run's measured steps with the earlier row of the same job "
                        "and machine instead of replacing it (>= 20 steps over several 10-minute commands)")
    p.add_argument("--extra", nargs="*", default=[], help="extra hydra overrides for every job")
    p.add_argument("--control", default=None, metavar="NAME=OVERRIDE",
                   help="also run a v=1 control job with this one more hydra override, as layout '<layout>-NAME' "
                        "(side by side with the others with --gpus), e.g. level1=actor_rollout_ref.rollout."
                        "checkpoint_manager_class=benchmarks.diag.level1_every_step.Level1EveryStep")  # fmt: skip
    p.add_argument("--import-jsonl", default=None,
                   help="no GPU: the row of a run whose command was killed before it wrote throughput.json, from "
                        "the metrics file the job left (same job arguments as the run; needs --device)")  # fmt: skip
    p.add_argument("--device", default=None, help="GPU name of an --import-jsonl run (nvidia-smi's name)")
    p.add_argument("--rows-from", nargs="*", default=[],
                   help="no GPU: rows of other commands' throughput.json files (or gzipped, .json.gz), merged "
                        "(pooled with --accumulate) into --merge in the order given")  # fmt: skip
    p.add_argument("--rows-only", nargs="*", default=[], metavar="KEY=VALUE",
                   help="with --rows-from: take only the rows whose KEY equals VALUE for every pair given, e.g. "
                        "machine=h100x4-2026-11-26f layout=2gpu-tp2 (a command's file also carries rows it merged "
                        "and rows of jobs that hung)")  # fmt: skip
    args = p.parse_args(argv)
    args.t0 = time.time()
    args.layout = args.layout or f"{args.n_gpus}gpu-tp{args.tp}{'-offload' if args.offload else ''}"
    try:
        args.gpu_groups = gpu_groups(args.gpus, args.n_gpus)
        args.skip_modes = skip_modes(args.empty_cache_on_skip)
        args.control = control_job(args.control)
        args.rows_only = rows_only(args.rows_only)
    except ValueError as err:
        p.error(str(err))
    args.empty_cache_on_skip = args.skip_modes[0]
    args.jobs = jobs_of(args)
    args.concurrent_jobs = mainppo_job.concurrency(args.gpu_groups, len(args.jobs))

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    earlier = mainppo_job.read_merge(args.merge) or {}
    if args.import_jsonl or args.rows_from:
        if args.import_jsonl and not args.device:
            p.error("--import-jsonl needs --device (the GPU the run used)")
        if args.import_jsonl and ("," in args.v or len(args.skip_modes) > 1 or args.control):
            p.error("--import-jsonl imports one job: give its single --v and --empty-cache-on-skip, no --control")
        batches = [[imported_row(args, Path(args.import_jsonl))]] if args.import_jsonl else []
        documents = [json.loads(mainppo_job.read_saved_text(Path(f), errors="strict")) for f in args.rows_from]
        batches += [[restated(r) for r in d.get("rows", []) if args.rows_only(r)] for d in documents]
        info = next((d["versions"] for d in documents if d.get("versions")), earlier.get("versions") or {})
    else:
        rows_now, info = run_jobs(args, out)
        batches = [rows_now]
    rows = earlier.get("rows", [])
    for batch in batches:
        rows = merge_rows(rows, batch, args.accumulate)
    rows.sort(key=lambda r: (*(str(k) for k in _job_key(r)[:-2]), r["v"], _job_key(r)[-1]))
    add_speedups(rows)
    result = {**{k: x for k, x in earlier.items() if k not in ("rows", "versions")}, "rows": rows, "versions": info}
    ran_jobs = not (args.import_jsonl or args.rows_from)
    mainppo_job.write_results("throughput.json", result, out, work_dir(args, out) if ran_jobs else None)
    for r in rows:
        variant = f" ({skip_variant(r)})" if skip_variant(r) not in (None, "always") else ""
        print(f"[throughput] {r['layout']} {r['model']} v={r['v']}{variant}: step {r['step_time_s']} sync {r['sync_time_s']} "
              f"ideal {r['ideal_speedup']} measured {r['measured_speedup']}", flush=True)  # fmt: skip
    return 0 if all(usable(r) for batch in batches for r in batch) else 1


def rows_only(pairs: list[str]):
    """``--rows-only KEY=VALUE ...`` → a predicate on rows: every KEY's value, as text, equals VALUE."""
    wanted = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--rows-only takes KEY=VALUE pairs, got {pair!r}")
        wanted[key] = value
    return lambda row: all(str(row.get(key)) == value for key, value in wanted.items())


def restated(row: dict) -> dict:
    """``row`` with its summary fields derived again from its measured steps by this version of
    :func:`row_stats` (rows of other commands may come from an older script)."""
    steps = row.get("steps") or []
    if not steps or any("measured" not in s for s in steps):
        return row
    return {**row, **row_stats([s for s in steps if s["measured"]])}


def usable(row: dict) -> bool:
    """A row of this command counts if it has measured steps and its job ended cleanly, hung at exit
    (:data:`mainppo_job.EXIT_HANG`), was stopped at ``--run-timeout`` (124 without a stall: the 7B runs
    end so) or was imported (None)."""
    ended_ok = row.get("returncode") in (0, mainppo_job.EXIT_HANG, 124, None) and not row.get("stalled")
    return bool(row.get("measured_steps")) and ended_ok


def work_dir(args, out: Path) -> Path:
    """Scratch dir of the jobs (``--work``, default ``OUT/throughput_work``); it also keeps a copy of the
    command's ``throughput.json``, which outlives ``$OUT`` on the GPU machine (the next command's ``--merge``)."""
    return Path(args.work).resolve() if args.work else out / "throughput_work"


def run_jobs(args, out: Path) -> tuple[list[dict], dict]:
    """Build (or reuse) the model and data in the work dir, run every job of ``args.jobs`` (:func:`jobs_of`),
    each with its own ``empty_cache_on_skip``; (rows, versions)."""
    t0 = time.time()
    work = work_dir(args, out)
    data_dir, log_dir = work / "data", work / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    seeds = model_seeds(args)
    shape = {seed: ensure_model(model_dir_of(work, args.model, seed), args.model, seed) for seed in sorted(set(seeds))}
    sync_e2e.build_data(data_dir)
    info = mainppo_job.versions()
    print(f"[throughput] model {shape[seeds[0]]} (seeds {sorted(shape)}) ready after {time.time() - t0:.1f}s; {info}",
          flush=True)  # fmt: skip

    def one_job(job, env):
        seed = seeds[args.jobs.index(job)]
        job_ns = job_args(args, job)
        job_ns.model_seed = seed if args.model_per_job else None
        return run_job(job_ns, job[0], model_dir_of(work, args.model, seed), data_dir, log_dir, info, shape[seed], env)

    return mainppo_job.on_gpus(args.jobs, args.gpu_groups, one_job), info


def model_seeds(args) -> list[int]:
    """The random-init seed of each job of ``args.jobs``: its index with ``--model-per-job``, else 0."""
    return list(range(len(args.jobs))) if args.model_per_job else [0] * len(args.jobs)


def model_dir_of(work: Path, shape: str, seed: int) -> Path:
    """``WORK/model_<shape>`` for seed 0 (what every command before ``--model-per-job`` built), else
    ``WORK/model_<shape>_seed<k>``."""
    return work / (f"model_{shape}" if seed == 0 else f"model_{shape}_seed{seed}")


def ensure_model(model_dir: Path, shape: str, seed: int) -> dict:
    """The model in ``model_dir``, built with ``seed`` unless it is there already."""
    shape_file = model_dir / "offgrpo_shape.json"
    return json.loads(shape_file.read_text()) if shape_file.exists() else build_model(model_dir, shape, seed)


if __name__ == "__main__":
    sys.exit(main())
