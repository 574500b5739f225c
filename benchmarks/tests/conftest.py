"""Lab tests (``python -m pytest -q benchmarks/tests``): the benchmark scripts, the committed GPU
results in ``benchmarks/results/`` and the notebook ``benchmarks/NOTEBOOK.md``. Outside the default
test run (``testpaths = ["tests"]``). The scripts are imported by their module names, as they import
each other, so ``benchmarks/`` goes on ``sys.path``."""

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1]
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))



@pytest.fixture
def reward_file(tmp_path: Path) -> Path:
    """``tmp_path/data/reward.py``, the reward file the synthetic-task drivers write into their data folder before a
    job starts (``sync_e2e.build_data``), which the plugin's driver checks look for: a composed job's config names
    it."""
    import sync_e2e

    (tmp_path / "data").mkdir(parents=True, exist_ok=True)
    (tmp_path / "data" / "reward.py").write_text(sync_e2e.REWARD_SRC)
    return tmp_path / "data" / "reward.py"
