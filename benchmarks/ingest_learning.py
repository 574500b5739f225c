"""Commit a learning lease's results on the CPU: what ``learning.py``'s docstring ("Accumulating across
sessions") lists, in one command.

From the folder a lease's last call brought back (``learning.json``, ``lw_logs.tar.gz`` with ``logs/<tag>.jsonl``
and ``logs/<tag>.log``, ``console_tail.log``), for the runs whose ``machine`` is ``--label``:

1. a file already in the raw folder under one of their tags (a run the new one replaces: its cut or failed
   earlier run) moves to ``raw/.../replaced/<its machine>_<file>``; the lease's own files, ingested again,
   are rewritten;
2. each tag's whole ``.jsonl`` and ``.log`` go in gzipped, the console tail as ``<label>.console.log.gz``;
3. ``learning.json`` is copied over the committed one and re-derived from the raw folder (``learning.py
   --rebuild``), then summarised (``learning_stats.py --target``) and plotted (``plot_results.py --learning``),
   unless ``--files-only``.

Usage (no GPU)::

    python3 benchmarks/ingest_learning.py --from /work/.device/N --label h200x1-2026-11-29
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "learning_largest4"
RAW = BENCH / "results" / "raw" / "learning_largest4"


def lease_tags(learning: dict, label: str) -> list[str]:
    """The tags of the runs of ``learning`` (a ``learning.json``) that ran on lease ``label``."""
    return [run["tag"] for run in learning["runs"] if run.get("machine") == label]


def earlier_machine(committed: dict, tag: str, label: str) -> str:
    """Which lease ran the committed run of ``tag`` that lease ``label`` replaces (``unknown`` if none says)."""
    machines = [r.get("machine") for r in committed.get("runs", []) if r.get("tag") == tag and r.get("machine") != label]
    return machines[-1] if machines else "unknown"


def ingested_before(committed: dict, tag: str, label: str) -> bool:
    """Whether the committed run of ``tag`` is lease ``label``'s own (ingesting a lease again rewrites its files)."""
    return any(r.get("tag") == tag and r.get("machine") == label for r in committed.get("runs", []))


def gzip_file(source: Path, target: Path) -> None:
    """``source`` gzipped to ``target``, with no name or time in the header (the same bytes every time)."""
    with source.open("rb") as src, target.open("wb") as out, \
            gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=out, mtime=0) as dst:
        shutil.copyfileobj(src, dst)


def logs_archive(device: Path) -> Path:
    """The jobs' logs: ``lw_logs.tar.gz`` (packed by the collecting call) or ``logs.tar.gz`` (packed by
    ``learning.py`` itself, ``mainppo_job.pack_logs``)."""
    for name in ("lw_logs.tar.gz", "logs.tar.gz"):
        if (device / name).exists():
            return device / name
    raise SystemExit(f"{device} holds neither lw_logs.tar.gz nor logs.tar.gz")


def ingest_files(device: Path, label: str, raw: Path, committed: dict) -> list[str]:
    """Steps 1–2 of the module docstring; returns the lease's tags."""
    learning = json.loads((device / "learning.json").read_text())
    tags = lease_tags(learning, label)
    if not tags:
        raise SystemExit(f"no run of {device / 'learning.json'} has machine={label!r}")
    with tempfile.TemporaryDirectory() as tmp:
        archive = logs_archive(device)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        logs = Path(tmp) / "logs"
        for tag in tags:
            for suffix in (".jsonl", ".log"):
                target = raw / f"{tag}{suffix}.gz"
                if target.exists() and not ingested_before(committed, tag, label):
                    replaced = raw / "replaced"
                    replaced.mkdir(exist_ok=True)
                    target.rename(replaced / f"{earlier_machine(committed, tag, label)}_{target.name}")
                source = logs / f"{tag}{suffix}"
                if not source.exists():
                    raise SystemExit(f"{source.name} is not in {archive}")
                gzip_file(source, target)
    if (device / "console_tail.log").exists():
        gzip_file(device / "console_tail.log", raw / f"{label}.console.log.gz")
    return tags


def derive(device: Path, results: Path, raw: Path, target: float) -> None:
    """Step 3: the lease's learning.json, rebuilt from ``raw``, summarised and plotted."""
    shutil.copy(device / "learning.json", results / "learning.json")
    py = sys.executable
    learning = str(results / "learning.json")
    for command in (
        [py, str(BENCH / "learning.py"), "--rebuild", str(raw), "--merge", learning, "--out", str(results)],
        [py, str(BENCH / "learning_stats.py"), "--learning", learning, "--target", str(target),
         "--out", str(results / "learning_stats.json")],
        [py, str(BENCH / "plot_results.py"), "--learning", learning],
    ):
        subprocess.run(command, check=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="device", required=True, help="the folder the lease's last call brought back")
    p.add_argument("--label", required=True, help="the lease's --machine label")
    p.add_argument("--raw", default=str(RAW))
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--target", type=float, default=0.6, help="learning_stats.py's --target (fixed before looking)")
    p.add_argument("--files-only", action="store_true", help="steps 1–2 only")
    args = p.parse_args(argv)
    device, raw, results = Path(args.device), Path(args.raw), Path(args.results)
    committed_file = results / "learning.json"
    committed = json.loads(committed_file.read_text()) if committed_file.exists() else {}
    tags = ingest_files(device, args.label, raw, committed)
    print(f"[ingest] {args.label}: {', '.join(tags)} -> {raw}")
    if not args.files_only:
        derive(device, results, raw, args.target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
