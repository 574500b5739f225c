#!/usr/bin/env python3
"""What each way of keeping α in vLLM costs: ``keep_weights=sleep_level1`` vs ``no_sleep`` (issue 3).

Compares two runs of the same learning job (``benchmarks/learning.py``, same config, seed, prompts
and machine) that differ only in ``algorithm.off_grpo.keep_weights``; the ``no_sleep`` run is stored
in ``learning.json`` as ``<config>+no_sleep``. Over the steps both runs logged (the first step, which
warms up, excluded) it reports per mode:

* time: median ``timing_s/step``, ``timing_s/gen``, ``timing_s/update_actor`` and the sync slot
  (``timing_s/off_grpo_sync``) split into skipped steps (level-1 wake of α vs nothing) and sync steps;
* memory while training (sampled every ~2 s by ``mainppo_job.launch`` from the first logged step on):
  GPU memory used (nvidia-smi) and host memory used (/proc/meminfo), median and max.

    python3 benchmarks/keep_weights.py --learning benchmarks/results/learning.json --config off_policy_v10 \\
        --out benchmarks/results/keep_weights.json

GPU commands that produce the two runs (one per 10-minute command, same machine)::

    python3 benchmarks/learning.py --out $OUT --config off_policy_v10 --steps 40 --merge benchmarks/results/learning.json
    python3 benchmarks/learning.py --out $OUT --config off_policy_v10 --steps 20 --keep-weights no_sleep \\
        --merge benchmarks/results/learning.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

MODES = ("sleep_level1", "no_sleep")
TIME_COLUMNS = ("step_time_s", "gen_s", "update_actor_s")


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def mode_summary(rows: list[dict], steps: set[int], memory: dict | None) -> dict:
    """Medians of ``rows`` (curve rows of one run) over ``steps``, sync slot split by ``synced``."""
    picked = [r for r in rows if r["step"] in steps]
    out = {col: _median([r.get(col) for r in picked]) for col in TIME_COLUMNS}
    out["sync_slot_skipped_s"] = _median([r.get("sync_slot_s") for r in picked if r.get("synced") == 0])
    out["sync_slot_synced_s"] = _median([r.get("sync_slot_s") for r in picked if r.get("synced") == 1])
    out["steps"] = len(picked)
    memory = memory or {}
    for kind in ("gpu_mib", "host_mib"):
        for stat in ("median", "max"):
            value = (memory.get(kind) or {}).get(stat)
            out[f"{kind}_{stat}"] = None if value is None else round(value)
    return out


def compare(learning: dict, config: str, seed: str = "0", skip_first: int = 1) -> dict:
    """``{config, seed, device, steps: [first, last], modes: {mode: mode_summary}, no_sleep_minus_sleep}``."""
    names = {"sleep_level1": config, "no_sleep": f"{config}+no_sleep"}
    curves = {m: learning["configs"][n]["seeds"][seed] for m, n in names.items()}
    trained = {m: {r["step"] for r in rows if r.get("train_reward") is not None} for m, rows in curves.items()}
    steps = {s for s in trained["sleep_level1"] & trained["no_sleep"] if s > skip_first}
    runs = {(r["config"], str(r["seed"])): r for r in learning.get("runs", [])}
    compared = {(n, seed) for n in names.values()}
    modes = {
        m: mode_summary(curves[m], steps, (runs.get((names[m], seed)) or {}).get("memory_during_training"))
        for m in MODES
    }
    diff = {
        key: round(modes["no_sleep"][key] - modes["sleep_level1"][key], 4)
        for key in modes["no_sleep"]
        if key != "steps" and modes["no_sleep"][key] is not None and modes["sleep_level1"][key] is not None
    }
    return {
        "config": config,
        "seed": seed,
        "device": " + ".join(sorted({(runs.get(k) or {}).get("device") for k in compared} - {None}))
                  or learning.get("device"),  # the compared runs' device, not the file's (several leases)
        "model": learning.get("model"),
        "steps": [min(steps), max(steps)] if steps else [],
        "modes": modes,
        "no_sleep_minus_sleep": diff,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--learning", default="benchmarks/results/learning.json")
    p.add_argument("--config", default="off_policy_v10")
    p.add_argument("--seed", default="0")
    p.add_argument("--out", default="benchmarks/results/keep_weights.json")
    args = p.parse_args(argv)
    result = compare(json.loads(Path(args.learning).read_text()), args.config, args.seed)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{args.config} seed {args.seed}, steps {result['steps']} on {result['device']}")
    for key in result["modes"]["sleep_level1"]:
        vals = [result["modes"][m][key] for m in MODES]
        print(f"  {key:24s} sleep_level1={vals[0]!s:>10}  no_sleep={vals[1]!s:>10}")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
