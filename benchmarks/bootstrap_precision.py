#!/usr/bin/env python3
"""How far the committed bootstrap intervals are from their converged values (resampling noise only).

``throughput.py`` and ``gen_split.py`` draw 4 000 bootstrap resamples with a fixed seed
(``mainppo_job.bootstrap_interval``): reproducible, but each interval end carries Monte-Carlo noise.
This script recomputes every committed interval with ``--resamples`` draws (default 400 000)
and prints, per interval kind, the largest change of an end and every interval whose reading changes:
a speedup interval that held 1 and no longer does (or the reverse), a difference interval and 0::

    python3 benchmarks/bootstrap_precision.py            # reads benchmarks/results/throughput.json, benchmarks/results/raw/throughput
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import gen_split
import mainppo_job
import throughput


def converged_interval(first, second, combine, statistic, resamples: int, seed: int = 1) -> list[float]:
    """``mainppo_job.bootstrap_interval`` (90 %) with ``resamples`` draws and another seed."""
    return mainppo_job.bootstrap_interval(first, second, combine, statistic, resamples=resamples, seed=seed)


def _holds(interval, value: float) -> bool:
    return interval[0] <= value <= interval[1]


def speedup_intervals(rows: list[dict], resamples: int):
    """(label, committed, converged) for each lagged row's two speedup intervals."""
    base = {throughput._base_key(r): r for r in rows if r["v"] == 1 and r.get("step_time_s") and r.get("sync_time_s")}
    for r in rows:
        b = base.get(throughput._base_key(r))
        if r["v"] == 1 or b is None or not r.get("measured_speedup_ci90"):
            continue
        t1, tv = throughput.measured_steps_of(b), throughput.measured_steps_of(r)
        for key, statistic in (("measured_speedup_ci90", np.median), ("measured_speedup_mean_ci90", np.mean)):
            label = f"{r['layout']} {r['model']} v={r['v']} {r.get('machine')} {statistic.__name__}"
            yield label, r[key], converged_interval(t1, tv, np.divide, statistic, resamples)


def difference_intervals(raw: Path, resamples: int, warmup: int = 1):
    """(label, committed, converged) for each gen_split pair's per-part mean-difference interval."""
    for identity, base_files, other_files in gen_split.pairs_in(raw):
        base, other = gen_split.pooled_steps(base_files, warmup), gen_split.pooled_steps(other_files, warmup)
        committed = gen_split.compare(base, other)
        for part in (*gen_split.PARTS, *gen_split.STEP_PARTS):
            if committed[part] is None:
                continue
            label = f"{identity['lease']} {identity['layout']} {identity['model']} v={identity['v']} {part}"
            converged = converged_interval(other[part], base[part], np.subtract, np.mean, resamples)
            yield label, committed[part]["mean_difference_ci90"], converged


def report(kind: str, intervals, digits: int, reference: float) -> dict:
    """Print and return the largest end change and the intervals whose reading of ``reference`` changes."""
    largest, flips, n = 0.0, [], 0
    for label, committed, converged in intervals:
        n += 1
        largest = max(largest, *(abs(c - v) for c, v in zip(committed, converged)))
        if _holds(committed, reference) != _holds(converged, reference):
            flips.append({"interval": label, "committed": committed, "converged": converged})
    print(f"[bootstrap_precision] {kind}: {n} intervals, largest change of an end {largest:.{digits + 1}f}; "
          f"{len(flips)} change whether they hold {reference:g}")
    for flip in flips:
        print(f"    {flip['interval']}: {np.round(flip['committed'], digits)} -> {np.round(flip['converged'], digits)}")
    return {"intervals": n, "largest_end_change": largest, "reading_changes": flips}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=str(HERE / "results"))
    p.add_argument("--resamples", type=int, default=400_000)
    p.add_argument("--out", default=None, help="write the report here as JSON")
    args = p.parse_args(argv)
    results = Path(args.results)
    rows = json.loads((results / "throughput.json").read_text())["rows"]
    out = {"resamples": args.resamples,
           "speedup": report("speedup T1/Tv (throughput.json)", speedup_intervals(rows, args.resamples), 3, 1.0),
           "difference": report("lagged - v=1 mean difference, s (gen_split.json)",
                                difference_intervals(results / "raw" / "throughput", args.resamples), 2, 0.0)}  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
