"""``python -m verl_offgrpo``: the entry of :mod:`verl_offgrpo.cli` (``check``, ``config-dir``, ``compose``;
``python -m verl_offgrpo --help`` says what each does and their exit codes). Import the CLI's functions from
:mod:`verl_offgrpo.cli` (``cli.paths.config_dir``, ``cli.compose.dry_run``, ...)."""

import sys

from verl_offgrpo.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
