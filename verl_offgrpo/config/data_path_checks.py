"""Data paths verl reads as written: a ``~`` in ``data.train_files`` / ``data.val_files`` is not the home directory.

verl 0.9.1 creates both datasets at start-up (``create_rl_dataset``, after Ray has started) and passes each path
through ``verl.utils.fs.copy_to_local`` to ``datasets.load_dataset``; neither expands ``~``, so
``data.train_files=~/data/gsm8k/train.parquet`` (hydra keeps the ``~``: the shell expands it only at the start of
a word) looks for ``./~/data/gsm8k/train.parquet`` and fails with ``FileNotFoundError``. Here, in a selecting job's
driver checks, such a path whose file is there under the home directory is refused in one line that names the
path to write, unless the dataset class is the user's own (``data.custom_cls.path``), which may read paths its way;
a path missing either way is left to verl, as every missing data file is (``compose`` notes it).
"""

from __future__ import annotations

import glob
import os
from typing import Any, Iterator

from .values import OffGRPOConfigError
from .values import config_value as _get

#: the keys verl creates a dataset from at start-up (train and validation, whether or not the job validates)
DATA_KEYS = ("data.train_files", "data.val_files")


def unexpanded_home_paths(value: Any) -> Iterator[str]:
    """The paths of a data key's value (a path or a list) that start with ``~`` and exist only with ``~`` expanded
    (a path missing either way is left to verl, as every missing data file is)."""
    paths = [value] if isinstance(value, str) else list(value) if hasattr(value, "__iter__") and value else []
    for path in paths:
        if isinstance(path, str) and path.startswith("~") and _exists(os.path.expanduser(path)) and not _exists(path):
            yield path


def _exists(path: str) -> bool:
    """Whether ``path`` is there (a glob: whether it matches, as ``datasets`` expands one)."""
    return bool(glob.glob(path)) if glob.has_magic(path) else os.path.exists(path)


def check_data_paths_verl_reads(config: Any) -> None:
    """Raise :class:`OffGRPOConfigError` for a data path whose file is there only with ``~`` expanded
    (:func:`unexpanded_home_paths`)."""
    if _get(config, "data.custom_cls.path"):
        return
    for key in DATA_KEYS:
        for path in unexpanded_home_paths(_get(config, key)):
            raise OffGRPOConfigError(
                f"{key}={path}: verl does not expand ~ in data paths (it would look for ./{path} and fail after Ray "
                f"started): write {os.path.expanduser(path)}"
                + (f" (or $HOME{path[1:]} in a shell script)." if path.startswith("~/") else ".")
            )


__all__ = ["DATA_KEYS", "check_data_paths_verl_reads", "unexpanded_home_paths"]
