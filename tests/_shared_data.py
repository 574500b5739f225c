"""Where the tests find the data beside the repository (``<repo>/../shared/data``: GSM8K, MATH-500 and AIME24 as
JSON Lines, described by its README.md), which test_data_prep.py and test_rewards.py run data_prep on; the
``shared_data`` fixture (conftest.py) skips their tests, saying why, where it is missing."""

from __future__ import annotations

import os
from pathlib import Path

#: the environment variable naming a folder that holds :data:`FILES`, for a checkout without ``../shared/data``
ENV = "VERL_OFFGRPO_TEST_DATA"
#: what the tests read
FILES = ("gsm8k/train.jsonl", "gsm8k/test.jsonl", "math500/test.jsonl", "aime24/test.jsonl")


def data_dir() -> Path:
    """``$VERL_OFFGRPO_TEST_DATA`` if set, else ``shared/data`` beside the repository."""
    return Path(os.environ.get(ENV) or Path(__file__).resolve().parents[2] / "shared" / "data")


def missing(root: Path) -> str | None:
    """Why the tests cannot read the data at ``root`` (the path, or the files it lacks), or None."""
    how = f"the data folder beside the repository, which CI has; or set {ENV} to a folder that holds it"
    if not root.is_dir():
        return f"shared data not found: {root} does not exist ({how})"
    lacks = [name for name in FILES if not (root / name).is_file()]
    if lacks:
        return f"shared data incomplete: {root} lacks {', '.join(lacks)} ({how})"
    return None
