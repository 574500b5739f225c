"""Data files verl's dataset cannot read, or reads without a prompt: one line at start-up, not a traceback in Ray.

verl 0.9.1's ``RLHFDataset._read_files_and_tokenize`` reads each path of ``data.train_files`` / ``data.val_files``
by its ending: ``.parquet`` as parquet, ``.json`` / ``.jsonl`` as JSON, anything else (a directory, a ``.csv``)
``ValueError: Unsupported file format``; then takes each row's prompt from the ``data.prompt_key`` column
(``prompt``), a chat message list, which a raw download (GSM8K's ``question`` / ``answer``) does not have. Both
fail after Ray started (with ``data.filter_overlong_prompts``, a file without prompts is filtered to nothing first).
Here a local path (globs expanded, as ``datasets`` does) that ends otherwise, and a ``.parquet`` or ``.jsonl`` file
whose columns (its schema; the first row of a ``.jsonl``) lack the prompt key, are refused; ``data.val_files`` only
in a job that validates (verl reads their rows there only). A dataset class of the user's own
(``data.custom_cls.path``), a path that is not local or not there, and a file that cannot be read here are left to
verl.

A training set with fewer rows than one batch (after ``data.train_max_samples``) is refused too: the V1 trainer
computes ``steps_per_epoch = rows // data.train_batch_size``, and the v0 trainer's dataloader, of
``data.gen_batch_size`` (else ``train_batch_size``) prompts a batch, drops an incomplete one (``drop_last``), so such
a job has no step in an epoch and fails (a division by zero) after Ray started. Counted where every train file is a
local ``.parquet`` (its metadata) or a ``.jsonl`` of one object a line (its non-empty lines); the count is an upper
bound (verl may filter over-long prompts), so a job it passes may still be short, never the other way round.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterator, Optional

from .readers import expanded, integer_at, path_exists, path_list, uses_v1, validates
from .values import OffGRPOConfigError
from .values import config_value as _get

#: the endings verl 0.9.1's ``RLHFDataset`` reads
READABLE_ENDINGS = (".parquet", ".json", ".jsonl")
#: where data_prep's scripts write what verl reads
PREPARE = "write it with the repository's data_prep/ scripts (README 'Use it with verl'), which give each row a prompt"


def check_data_files_verl_reads(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` for a local data file verl's dataset cannot read or finds no prompt in."""
    if _get(config, "data.custom_cls.path"):
        return
    prompt_key = _get(config, "data.prompt_key", "prompt")
    for key in ["data.train_files"] + (["data.val_files"] if validates(config) else []):
        for path in path_list(_get(config, key)):
            if not isinstance(path, str):
                continue
            if not path.endswith(READABLE_ENDINGS):
                if path_exists(path):
                    folder = os.path.isdir(path)
                    raise OffGRPOConfigError(
                        f"{key}: {path} is {'a directory' if folder else 'a file of another format'}; verl's dataset "
                        f"reads files ending in {', '.join(READABLE_ENDINGS)} only, and refuses it after Ray started: "
                        + (f"name the files in it (e.g. {os.path.join(path, 'train.parquet')}, or "
                           f"{os.path.join(path, '*.parquet')})." if folder else f"convert it, or {PREPARE}.")
                    )
                continue
            for file in expanded(path):
                columns = _columns(file)
                if columns is not None and prompt_key not in columns:
                    raise OffGRPOConfigError(
                        f"{key}: {file} has no {prompt_key!r} column (data.prompt_key), where verl's dataset takes "
                        f"each row's prompt (it fails on that after Ray started); its columns: {', '.join(columns)}. "
                        f"Raw downloads lack it: {PREPARE}."
                    )


def check_train_rows_fill_a_batch(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` if the local training files hold fewer rows than one batch (module docstring)."""
    key = "data.train_batch_size"
    if not uses_v1(config) and integer_at(config, "data.gen_batch_size"):
        key = "data.gen_batch_size"  # the v0 dataloader's batch
    batch = integer_at(config, key)
    if _get(config, "data.custom_cls.path") or not isinstance(batch, int) or batch < 1:
        return
    rows = 0
    for path in path_list(_get(config, "data.train_files")):
        files = expanded(path) if isinstance(path, str) else []
        counts = [_rows(file, batch - rows) for file in files]
        if not files or None in counts:
            return  # not all local and countable: left to verl
        rows += sum(counts)
        if rows >= batch:
            break  # enough (the cap below may still cut them)
    cap = integer_at(config, "data.train_max_samples", -1)
    capped = isinstance(cap, int) and 0 < cap < rows
    rows = cap if capped else rows
    if rows < batch:
        raise OffGRPOConfigError(
            f"{key}={batch} is more than the {rows} row{'' if rows == 1 else 's'} of data.train_files"
            + (f" (data.train_max_samples={cap})" if capped else "")
            + f": an epoch has no step (verl's dataloader drops an incomplete batch), and verl fails on that after "
            f"Ray started; lower {key} or train on more prompts."
        )


def _rows(file: str, enough: int) -> Optional[int]:
    """The rows of a local ``.parquet`` (its metadata) or ``.jsonl`` file of one object a line (its non-empty lines,
    counted up to ``enough``); None where the file is not here, is of another kind, or cannot be read."""

    def objects(lines: Iterator[str]) -> Optional[int]:
        count = 0
        for line in lines:
            if count == 0 and not isinstance(json.loads(line), dict):
                return None  # not one object a line (e.g. one array): datasets reads it otherwise
            count += 1
            if count >= enough:
                break
        return count

    return _read(file, lambda pq: int(pq.read_metadata(file).num_rows), objects)


def _columns(file: str) -> Optional[list[str]]:
    """The column names of a local ``.parquet`` (its schema) or ``.jsonl`` file (its first row's keys); None where
    the file is not here, is ``.json`` (an array or lines: left to ``datasets``), or cannot be read."""

    def first_keys(lines: Iterator[str]) -> Optional[list[str]]:
        row = json.loads(next(lines, "null"))
        return list(row) if isinstance(row, dict) else None

    return _read(file, lambda pq: list(pq.read_schema(file).names), first_keys)


def _read(file: str, of_parquet: Callable[[Any], Any], of_jsonl: Callable[[Iterator[str]], Any]) -> Any:
    """``of_parquet(pyarrow.parquet)`` for a local ``.parquet`` file, ``of_jsonl`` of the non-empty lines of a local
    ``.jsonl`` file; None where the file is not here, is of another kind, or cannot be read (left to verl)."""
    if not os.path.isfile(file):
        return None
    try:
        if file.endswith(".parquet"):
            import pyarrow.parquet as pq

            return of_parquet(pq)
        if file.endswith(".jsonl"):
            with open(file, encoding="utf-8") as fh:
                return of_jsonl(line for line in fh if line.strip())
    except Exception:  # noqa: BLE001 - unreadable here: verl reads it and says so, or not
        return None
    return None


__all__ = ["READABLE_ENDINGS", "check_data_files_verl_reads", "check_train_rows_fill_a_batch"]
