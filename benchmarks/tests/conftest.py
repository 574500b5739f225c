"""Lab tests (``python -m pytest -q benchmarks/tests``): the benchmark scripts, the committed GPU
results in ``benchmarks/results/`` and the notebook ``benchmarks/NOTEBOOK.md``. Outside the default
test run (``testpaths = ["tests"]``). The scripts are imported by their module names, as they import
each other, so ``benchmarks/`` goes on ``sys.path``."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
