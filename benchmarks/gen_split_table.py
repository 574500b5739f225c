#!/usr/bin/env python3
"""The results page's two ``gen_split.json`` tables, row by row, from the JSON.

``benchmarks/NOTEBOOK.md`` §3 carries two hand-ordered tables of ``gen_split.json`` (lagged or control − v=1,
means over the measured steps, 90 % bootstrap intervals):

* **generation** ("Where v=10's extra generation time goes"): ``gen``, vLLM's generation
  (``gen_vllm``, v=1 → v mean and difference) and the rest of ``gen`` (``gen_rest``, the replicas'
  sleep), and vLLM's generation in the lagged run right after a real sync / the median after a skip;
* **parts** ("The whole step"): ``step``, the sync slot, ``gen``, ``update_actor``, ``old_log_prob``.

The page orders rows by argument and bolds cells; :func:`page_mismatches` compares each row of the page
with the row this script formats from the JSON (bold and a lease's "(side by side)" note ignored), so a
test catches a table left stale by a new pair or a rebuilt JSON. Printing gives every pair's rows in the
JSON's order, to paste:

    python3 benchmarks/gen_split_table.py --split benchmarks/results/gen_split.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

#: the first header cells of each table on the page (they tell the tables apart)
GENERATION_HEADER = "| lease | layout | model | v | steps (v=1 / v) | gen |"
PARTS_HEADER = "| lease | layout | model | v | step | sync slot |"
#: how many after-sync steps are listed one by one before the column gives their count and median
LISTED_AFTER_SYNC = 3


def signed(x: float) -> str:
    """``+0.37`` / ``−0.20`` (the page's Unicode minus)."""
    return f"{x:+.2f}".replace("-", "−")


def difference(part: dict) -> str:
    """A part's mean difference with its 90 % interval: ``+0.24 (−0.34 to +0.81)``."""
    low, high = part["mean_difference_ci90"]
    return f"{signed(part['mean_difference'])} ({signed(low)} to {signed(high)})"


def identity(pair: dict) -> tuple[str, str, str, str]:
    """(lease, layout, model, v) as the page's first four cells write them."""
    layout = f"{pair['layout']}-{pair['control']}" if pair.get("control") else pair["layout"]
    v = "control" if pair.get("control") else str(pair["v"])
    return pair["lease"], layout, pair["model"].removeprefix("qwen2.5-"), v


def after_sync_cell(pair: dict) -> str:
    """vLLM's generation right after a real sync / the median after a skip, in the lagged run."""
    after = pair.get("gen_vllm_after_sync") or []
    if not after:
        synced = "–"
    elif len(after) <= LISTED_AFTER_SYNC:
        synced = ", ".join(f"{x:.2f}" for x in after)
    else:
        synced = f"{len(after)} steps, median {statistics.median(after):.2f}"
    skipped = pair.get("gen_vllm_after_skip")
    return f"{synced} / {skipped['median']:.2f}" if skipped else f"{synced} / –"


def generation_row(pair: dict) -> str:
    gen, vllm, rest = pair["gen"], pair["gen_vllm"], pair["gen_rest"]
    cells = [
        *identity(pair),
        f"{gen['v1']['n']} / {gen['lagged']['n']}",
        signed(gen["mean_difference"]),
        f"{vllm['v1']['mean']:.2f} → {vllm['lagged']['mean']:.2f}",
        difference(vllm),
        f"{rest['v1']['mean']:.2f} → {rest['lagged']['mean']:.2f}",
        difference(rest),
        after_sync_cell(pair),
    ]
    return "| " + " | ".join(cells) + " |"


def parts_row(pair: dict) -> str:
    cells = [*identity(pair), *(difference(pair[part]) for part in ("step", "sync_slot", "gen", "update_actor", "old_log_prob"))]
    return "| " + " | ".join(cells) + " |"


def page_table_rows(page: str, header: str) -> list[str]:
    """The body rows of the page's table whose header starts with ``header``."""
    lines = page.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def _normalised(row: str) -> str:
    return row.replace("**", "").replace(" (side by side)", "")


def _page_identity(row: str) -> tuple[str, ...]:
    return tuple(cell.strip() for cell in _normalised(row).strip("|").split("|")[:4])


def page_mismatches(page: str, split: dict) -> dict[str, list]:
    """Per table: the page rows that differ from the JSON's (``(page row, expected row)``), and the
    pairs of the JSON the table leaves out (``missing``)."""
    found = {}
    for name, header, formatter in (("generation", GENERATION_HEADER, generation_row), ("parts", PARTS_HEADER, parts_row)):
        expected = {identity(pair): formatter(pair) for pair in split["pairs"]}
        rows = page_table_rows(page, header)
        differ = [(row, expected.get(_page_identity(row))) for row in rows
                  if _normalised(row) != expected.get(_page_identity(row))]  # fmt: skip
        on_page = {_page_identity(row) for row in rows}
        found[name] = differ
        found[f"{name}_missing"] = sorted(key for key in expected if key not in on_page)
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default=str(Path(__file__).resolve().parent / "results" / "gen_split.json"))
    args = p.parse_args(argv)
    split = json.loads(Path(args.split).read_text())
    for title, formatter in (("generation", generation_row), ("parts", parts_row)):
        print(f"# {title}")
        for pair in split["pairs"]:
            print(formatter(pair))
    return 0


if __name__ == "__main__":
    sys.exit(main())
