"""Shared code of the data_prep scripts: CLI, record sources, verl rows, atomic parquet writes.

Every script that reads a dataset has the same CLI (``--local-dir``, ``--output-dir``; ``arithmetic.py`` generates
its rows and takes ``--output-dir`` only) and the same flow: read the raw
records of every split (from the hub with ``datasets``, or from local JSON Lines files), turn each
into a verl row, and only when all rows of all splits are built, write one parquet file per split.
Any bad record stops the script with a :class:`DataPrepError` naming the file and line (or hub
split and row) before anything is written; each file is written to a temporary name and renamed,
so no output is ever half-written.

verl's row format (as in verl's own ``examples/data_preprocess``)::

    data_source   str                          picks the reward function
    prompt        [{"role": "user", "content": str}]
    ability       str                          "math"
    reward_model  {"style": "rule", "ground_truth": str}
    extra_info    {"split": str, "index": int, ...}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Sequence

#: Instruction appended to math prompts whose answer is scored by math-verify.
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


class DataPrepError(Exception):
    """Bad input; the message names where (``path:line`` or hub split and row)."""


@dataclass(frozen=True)
class Record:
    """One raw input record and where it came from (for error messages)."""

    where: str
    data: dict[str, Any]

    def field(self, name: str, kinds: type | tuple[type, ...] = str) -> Any:
        """The value of ``name``; must be present, of type ``kinds``, and not an empty string."""
        if name not in self.data:
            raise DataPrepError(f"{self.where}: missing field {name!r} (fields: {sorted(self.data)})")
        value = self.data[name]
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise DataPrepError(f"{self.where}: field {name!r} has type {type(value).__name__}, expected {kinds}")
        if isinstance(value, str) and not value.strip():
            raise DataPrepError(f"{self.where}: field {name!r} is empty")
        return value

    def fail(self, message: str) -> DataPrepError:
        return DataPrepError(f"{self.where}: {message}")


def read_jsonl(path: str) -> list[Record]:
    """The JSON objects of a JSON Lines file (blank lines skipped); errors name the line."""
    if not os.path.isfile(path):
        raise DataPrepError(f"{path}: no such file")
    records = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise DataPrepError(f"{where}: not UTF-8 text (a binary file?); expected JSON Lines") from None
            if "\x00" in line:
                raise DataPrepError(f"{where}: NUL byte (a binary file?); expected JSON Lines text")
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataPrepError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise DataPrepError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            records.append(Record(where, obj))
    if not records:
        raise DataPrepError(f"{path}: empty file (no records)")
    return records


def load_hub(dataset_id: str, split: str, config: str | None = None) -> list[Record]:
    """The records of one split of a hub dataset (``datasets`` is imported only here)."""
    try:
        import datasets  # lazy: the offline path (--local-dir) does not need it
    except ImportError:
        raise DataPrepError(f"{dataset_id}: reading from the hub needs `pip install datasets` (or use --local-dir)") from None

    try:
        ds = datasets.load_dataset(dataset_id, config, split=split)
    except OSError as e:  # ConnectionError (offline), a hub timeout, a missing cache
        raise DataPrepError(
            f"{dataset_id} [{split}]: cannot be read from the hub ({type(e).__name__}: {' '.join(str(e).split())[:300]}); "
            "without a network pass the raw files with --local-dir"
        ) from None
    records = [Record(f"{dataset_id} [{split}] row {i}", dict(row)) for i, row in enumerate(ds)]
    if not records:
        raise DataPrepError(f"{dataset_id} [{split}]: no records")
    return records


def make_row(
    data_source: str, content: str, ground_truth: str, split: str, index: int, **extra: Any
) -> dict[str, Any]:
    """One verl row: a single user message, rule-based reward, extra_info with split/index/extra."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": content}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, **extra},
    }


def boxed_math_row(
    data_source: str, problem: str, ground_truth: str, split: str, index: int, **extra: Any
) -> dict[str, Any]:
    """A math row scored by math-verify: the problem plus :data:`BOXED_INSTRUCTION`, ``question`` kept."""
    content = problem + " " + BOXED_INSTRUCTION
    return make_row(data_source, content, ground_truth, split, index, question=problem, **extra)


def check_output_dir(out_dir: str, names: Sequence[str]) -> None:
    """Fail before any work if ``out_dir`` cannot take ``<name>.parquet`` files: it, or one of its
    parents, is a file, or one of the output paths is a directory."""
    path = os.path.abspath(out_dir)
    probe = path
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if os.path.exists(probe) and not os.path.isdir(probe):
        which = "is a file" if probe == path else f"is inside {probe}, which is a file"
        raise DataPrepError(f"--output-dir {out_dir} {which}, not a directory: choose a directory path")
    for name in names:
        target = os.path.join(path, f"{name}.parquet")
        if os.path.isdir(target):
            raise DataPrepError(f"{target} is a directory: the output file cannot replace it")


def write_tables(out_dir: str, tables: dict[str, Sequence[dict[str, Any]]]) -> int:
    """Create ``out_dir`` and write ``<name>.parquet`` for each table atomically; print them. Exit status."""
    try:
        check_output_dir(out_dir, list(tables))
        os.makedirs(out_dir, exist_ok=True)
    except DataPrepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: cannot create --output-dir {out_dir}: {e.strerror or e}", file=sys.stderr)
        return 1
    paths = {os.path.join(out_dir, f"{name}.parquet"): rows for name, rows in tables.items()}
    write_parquet_atomic(paths)
    for path, rows in paths.items():
        print(f"wrote {len(rows)} rows to {path}")
    return 0


def write_parquet_atomic(tables: dict[str, Sequence[dict[str, Any]]]) -> None:
    """Write each ``{path: rows}`` to a temporary file beside ``path``, then rename them all.

    If any write fails, every temporary file is removed and no ``path`` is touched.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    umask = os.umask(0)
    os.umask(umask)
    temps: dict[str, str] = {}
    try:
        for path, rows in tables.items():
            directory = os.path.dirname(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
            os.close(fd)
            temps[path] = tmp
            pq.write_table(pa.Table.from_pylist(list(rows)), tmp)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual permissions
    except BaseException:
        for tmp in temps.values():
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise
    for path, tmp in temps.items():
        os.replace(tmp, path)


@dataclass(frozen=True)
class Split:
    """One output split: its name, the local file it is read from, and how to get it from the hub."""

    name: str  # "train" / "test": output <name>.parquet and extra_info.split
    local_file: str  # file name under --local-dir
    hub_split: str  # split name on the hub


def parse_args(argv: Sequence[str] | None, description: str, hub_id: str, splits: Sequence[Split], default_out: str):
    files = ", ".join(f"<DIR>/{s.local_file} ({s.name})" for s in splits)
    parser = argparse.ArgumentParser(
        description=description,
        epilog=f"Without --local-dir the data comes from the Hugging Face hub ({hub_id}); needs `pip install datasets`.",
    )
    parser.add_argument(
        "--local-dir",
        metavar="DIR",
        help=f"read local JSON Lines files instead of the hub: {files}",
    )
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        default=default_out,
        help="where the parquet files go: " + ", ".join(f"{s.name}.parquet" for s in splits) + f" (default: {default_out})",
    )
    return parser.parse_args(argv)


def run(
    argv: Sequence[str] | None,
    *,
    description: str,
    hub_id: str,
    hub_config: str | None,
    splits: Sequence[Split],
    default_out: str,
    build_row: Callable[[Record, str, int], dict[str, Any] | None],
) -> int:
    """The whole script: parse args, read every split, build rows, then write them. Exit status. A ``build_row``
    that returns None skips that record (a hub dataset's few rows without an answer), said in one line a split."""
    args = parse_args(argv, description, hub_id, splits, default_out)
    out_dir = os.path.expanduser(args.output_dir)
    try:
        check_output_dir(out_dir, [split.name for split in splits])  # before any download
        tables = {}
        for split in splits:
            if args.local_dir is not None:
                records = read_jsonl(os.path.join(args.local_dir, split.local_file))
            else:
                records = load_hub(hub_id, split.hub_split, hub_config)
            built = [build_row(rec, split.name, i) for i, rec in enumerate(records)]
            skipped = [i for i, row in enumerate(built) if row is None]
            if skipped:
                listed = ", ".join(str(i) for i in skipped[:10]) + (", ..." if len(skipped) > 10 else "")
                print(f"note: [{split.name}]: skipped {len(skipped)} of {len(records)} records without an answer "
                      f"(rows {listed})", file=sys.stderr)
            tables[split.name] = [row for row in built if row is not None]
            if built and not tables[split.name]:
                raise DataPrepError(f"[{split.name}]: every one of its {len(built)} records was skipped (no answer)")
    except DataPrepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return write_tables(out_dir, tables)
