"""Where a lagged run's step time goes: vLLM's generation vs the rest of verl's ``gen`` timer, and
the step's other parts.

verl 0.9.1's v0 trainer times ``timing_s/gen`` around the agent loop's ``generate_sequences`` *and*
the replicas' sleep after it (``checkpoint_manager.sleep_replicas()``). At v = 1 vLLM sleeps at level
2 (weights discarded); at v > 1 with ``keep_weights=sleep_level1`` at level 1 (α copied to host
memory). The agent loop times each request; all requests of a batch are in flight at once, so the
longest one, ``timing_s/agent_loop/generate_sequences/max``, is vLLM's generation of the batch::

    gen_vllm = timing_s/agent_loop/generate_sequences/max
    gen_rest = timing_s/gen − gen_vllm          (the sleep + the agent-loop manager's own work)

For each pair of jobs of one lease, layout and model (v = 1 against each v > 1 and each control,
from the metrics files ``<lease>_<layout>[-<control>]_<model>_v<v>[_<variant>][.run<k>].jsonl[.gz]``
that throughput.py's jobs leave and benchmarks/results/raw/throughput keeps; the runs of a job run more than
once are pooled), over the measured steps (after ``--warmup``): median and mean of ``gen``,
``gen_vllm`` and ``gen_rest`` for each job, and the difference of means (v − v1) with its 90 %
bootstrap interval (both jobs' steps resampled independently, fixed seed); the same for the step's
other timed parts (:data:`STEP_PARTS`: ``timing_s/step``, ``update_actor``, ``old_log_prob`` and
the sync slot ``timing_s/update_weights``), None where a job did not log one.

    python3 benchmarks/gen_split.py --raw benchmarks/results/raw/throughput --out benchmarks/results/gen_split.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import mainppo_job

PARTS = ("gen", "gen_vllm", "gen_rest")
#: the step's other parts: name → verl's timers (the first one logged)
STEP_PARTS = {
    "step": ("timing_s/step",),
    "update_actor": ("timing_s/update_actor",),
    "old_log_prob": ("timing_s/old_log_prob",),
    "sync_slot": ("timing_s/update_weights", "timing_s/off_grpo_sync"),
}
METRICS_FILE = re.compile(
    rf"^(?P<lease>[^_]+)_{mainppo_job.LAYOUT_AND_CONTROL}_(?P<model>[^_]+)"
    r"_v(?P<v>\d+)(?:_(?P<variant>[^.]+))?(?:\.run(?P<run>\d+))?"
    r"\.jsonl(?:\.gz)?$"
)


#: pairs whose files predate the ``<lease>_<layout>_<model>_v<v>`` names: the 7B TP=4 lease h100x4-2026-11-26b
#: (36 measured steps at v=1, 35 at v=10; only these console logs hold the agent loop's timers)
NAMED_PAIRS = (
    ("h100x4b", "4gpu-tp4", "qwen2.5-7b", "10", "h100x4b_qwen2.5-7b_v1_run5.job.log.gz", "h100x4b_qwen2.5-7b_v10_run4.job.log.gz"),
)


def split_steps(metrics: dict[int, dict], warmup: int) -> dict[str, list[float]]:
    """``gen``, ``gen_vllm`` and ``gen_rest`` of each step after ``warmup`` that logged both timers,
    the :data:`STEP_PARTS` those steps logged, and ``rollout_lag`` (``off_grpo/rollout_lag``: 0 = the
    batch was generated right after a real sync)."""
    parts: dict[str, list] = {name: [] for name in (*PARTS, *STEP_PARTS, "rollout_lag")}
    for step in sorted(metrics):
        row = metrics[step]
        gen, vllm = row.get("timing_s/gen"), row.get("timing_s/agent_loop/generate_sequences/max")
        if step <= warmup or gen is None or vllm is None:
            continue
        parts["gen"].append(gen)
        parts["gen_vllm"].append(vllm)
        parts["gen_rest"].append(gen - vllm)
        parts["rollout_lag"].append(row.get("off_grpo/rollout_lag"))
        for name, timers in STEP_PARTS.items():
            value = mainppo_job.pick(row, *timers)
            if value is not None:
                parts[name].append(value)
    return parts


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "mean": statistics.mean(values), "n": len(values)}


def compare(base: dict[str, list[float]], other: dict[str, list[float]]) -> dict:
    """Per part: each run's median and mean, and the difference of means with its 90 % interval; and
    the lagged run's ``gen_vllm`` of the steps generated right after a real sync vs after a skip (the
    same sleep level on both: whether it is the skip's wake that slows vLLM)."""
    after_sync = [t for t, lag in zip(other["gen_vllm"], other["rollout_lag"]) if lag == 0]
    after_skip = [t for t, lag in zip(other["gen_vllm"], other["rollout_lag"]) if lag]
    out = {"gen_vllm_after_sync": after_sync, "gen_vllm_after_skip": summary(after_skip) if after_skip else None}
    for name in (*PARTS, *STEP_PARTS):
        if not base[name] or not other[name]:
            out[name] = None  # a timer one of the jobs did not log
            continue
        out[name] = {
            "v1": summary(base[name]),
            "lagged": summary(other[name]),
            "mean_difference": statistics.mean(other[name]) - statistics.mean(base[name]),
            # the bootstrap interval of mean(lagged) − mean(v=1)
            "mean_difference_ci90": mainppo_job.bootstrap_interval(other[name], base[name], np.subtract, np.mean),
        }
    return out


def pairs_in(raw: Path) -> list[tuple[dict, list[Path], list[Path]]]:
    """(identity, v=1 files, other files) for every job in ``raw`` that has a plain v = 1 job of its
    lease, layout and model: each v > 1 job, and each job of a control layout (``<layout>-<control>``,
    e.g. ``2gpu-tp2-offload-level1``: v = 1 sleeping at level 1, benchmarks/diag/level1_every_step.py);
    in file-name order, then :data:`NAMED_PAIRS` found in ``raw``. A job run more than once on a lease
    (``throughput.py --accumulate``) has one file per run, ``….run<k>.jsonl[.gz]``: its runs' steps
    are pooled."""
    jobs: dict[tuple, list[Path]] = {}
    for path in sorted(raw.iterdir()):
        match = METRICS_FILE.match(path.name)
        if match:
            r = match.groupdict()
            jobs.setdefault(tuple((k, r[k]) for k in ("lease", "layout", "control", "model", "v", "variant")), []).append(path)
    identified = [(dict(key), files) for key, files in jobs.items()]
    ones = {(r["lease"], r["layout"], r["model"]): files for r, files in identified
            if r["v"] == "1" and not r["control"]}  # fmt: skip
    found = []
    for r, files in identified:
        base = ones.get((r["lease"], r["layout"], r["model"]))
        if (r["v"] != "1" or r["control"]) and base is not None:
            found.append(({**r, "v": int(r["v"])}, base, files))
    for lease, layout, model, v, base, other in NAMED_PAIRS:
        if (raw / base).exists() and (raw / other).exists():
            found.append(({"lease": lease, "layout": layout, "control": None, "model": model, "v": int(v), "variant": None}, [raw / base], [raw / other]))
    return found


def pooled_steps(files: list[Path], warmup: int) -> dict[str, list[float]]:
    """:func:`split_steps` of each run's metrics file, concatenated in run order."""
    parts: dict[str, list] = {}
    for path in files:
        for name, values in split_steps(mainppo_job.read_metrics_file(path), warmup).items():
            parts.setdefault(name, []).extend(values)
    return parts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw", default=str(HERE / "results" / "raw" / "throughput"),
                   help="folder of the runs' metrics files")  # fmt: skip
    p.add_argument("--warmup", type=int, default=1, help="leading steps left out (throughput.py's --warmup)")
    p.add_argument("--out", default=None, help="write the table here as JSON")
    args = p.parse_args(argv)
    rows = []
    for identity, base, other in pairs_in(Path(args.raw)):
        split = compare(pooled_steps(base, args.warmup), pooled_steps(other, args.warmup))
        rows.append({**identity, "files": [f.name for f in (*base, *other)], **split})
        diff = "  ".join(f"{n} {split[n]['mean_difference']:+.2f} s" for n in PARTS)
        name = identity["layout"] + (f"-{identity['control']}" if identity["control"] else "")
        print(f"[gen_split] {identity['lease']} {name} {identity['model']} v={identity['v']} − v=1: {diff}")
    if args.out:
        Path(args.out).write_text(json.dumps({"warmup": args.warmup, "pairs": rows}, indent=1) + "\n")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
