#!/usr/bin/env python3
"""The issue's target, row by row: every lagged row of ``benchmarks/results/throughput.json`` against 0.95·S*.

For each row with v > 1 and a speedup (i.e. a v=1 row of its lease, layout, model and concurrency):
measured T₁/T_v by the median steps (90 % bootstrap interval) and by the mean steps (the
wall-clock for as many steps), the ideal S* = T₁ / (T₁ − (1 − 1/v)·T_sync) from the v=1 row's own
sync slot, and measured / S* against the target 0.95. Prints a markdown table; the results page
(``benchmarks/NOTEBOOK.md`` §3) carries its output between two markers, and a test checks they agree.

    python3 benchmarks/throughput_table.py --results benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import throughput  # noqa: E402  (the rows a speedup compares: throughput._base_key)

TARGET = 0.95
BEGIN = "<!-- throughput_table.py: begin -->"
END = "<!-- throughput_table.py: end -->"
HEADER = (
    "| model | layout | lease | jobs at once | v | skip | measured steps (v=1 / v) | ideal S* "
    "| measured T₁/T_v, medians (90 % interval) | ÷ S* | by the means | ÷ S* | ≥ 0.95·S* (medians / means) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _v1_rows(rows: list[dict]) -> dict:
    """The v=1 rows by the key throughput.py compares rows under (``throughput._base_key``)."""
    return {throughput._base_key(r): r for r in rows if r["v"] == 1}


def _interval(ci) -> str:
    return f" ({ci[0]:.3f}–{ci[1]:.3f})" if ci else ""


def table(results: dict) -> str:
    """The markdown table (header, then one line per lagged row with a speedup, in the file's order)."""
    v1_of = _v1_rows(results["rows"])
    lines = [HEADER]
    for row in results["rows"]:
        if row["v"] == 1 or not row.get("measured_speedup"):
            continue
        base = v1_of[throughput._base_key(row)]
        ideal, median, mean = row["ideal_speedup"], row["measured_speedup"], row.get("measured_speedup_mean")
        by_median = median / ideal >= TARGET
        by_mean = None if mean is None else mean / ideal >= TARGET
        mean_cells = ("–", "–") if mean is None else (f"{mean:.3f}{_interval(row.get('measured_speedup_mean_ci90'))}",
                                                      f"{mean / ideal:.3f}")  # fmt: skip
        verdict = " / ".join("–" if ok is None else ("yes" if ok else "no") for ok in (by_median, by_mean))
        lines.append(
            f"| {row['model']} | {row['layout']} | {row['machine']} | {row.get('concurrent_jobs') or 1} | {row['v']} "
            f"| {row.get('empty_cache_on_skip') or 'always'} | {base['measured_steps']} / {row['measured_steps']} "
            f"| {ideal:.3f} | {median:.3f}{_interval(row.get('measured_speedup_ci90'))} | {median / ideal:.3f} "
            f"| {mean_cells[0]} | {mean_cells[1]} | {verdict} |"
        )
    return "\n".join(lines)


def page_table(page: str) -> str:
    """The table the results page carries between :data:`BEGIN` and :data:`END`."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[start:end].strip()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"))
    args = p.parse_args(argv)
    print(table(json.loads((Path(args.results) / "throughput.json").read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
