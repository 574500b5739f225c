"""Unit tests (``python -m pytest -q``). Helpers the test modules share live beside them (``_overrides.py``)
and are imported by their module names, so ``tests/`` goes on ``sys.path`` (not a package: an installed
``tests`` package in site-packages would shadow it)."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
