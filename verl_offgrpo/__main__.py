"""``python -m verl_offgrpo``: the entry of :mod:`verl_offgrpo.cli` (``check``, ``config-dir``, ``compose``;
``python -m verl_offgrpo --help`` says what each does and their exit codes).

The names that tests, benchmarks and scripts import from here stay importable from here."""

import sys

from verl_offgrpo.cli.compose import compose, dry_run, missing_values, validate
from verl_offgrpo.cli.install_check import check
from verl_offgrpo.cli.main import EX_USAGE, main
from verl_offgrpo.cli.paths import CONFIG_NAME, DATA_PATH_KEYS, MODEL_PATH_KEY, config_dir, local_path_notes

__all__ = ["CONFIG_NAME", "DATA_PATH_KEYS", "EX_USAGE", "MODEL_PATH_KEY", "check", "compose", "config_dir", "dry_run",
           "local_path_notes", "main", "missing_values", "validate"]

if __name__ == "__main__":
    sys.exit(main())
