"""``bash recipes/X.sh --check`` with hydra flags: ``--cfg job`` prints the checked config (README, "Recipes");
any other flag is ``main_ppo``'s and is refused in one line before Python starts, where it used to be dropped."""

import subprocess
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.mark.parametrize("flags", [["--info"], ["--cfg", "hydra"], ["-c", "all"]])
def test_check_refuses_main_ppos_own_flags(flags):
    out = subprocess.run(["bash", str(RECIPES / "gsm8k_onpolicy.sh"), "--check", *flags],
                         capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHON": "false"})
    assert out.returncode == 64
    assert out.stderr.strip() == (f"recipes: --check takes hydra overrides only (and --cfg job, to print the checked "
                                  f"config); {' '.join(flags)} is main_ppo's: leave --check out")
