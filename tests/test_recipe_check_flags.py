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


@pytest.mark.slow
def test_the_small_scale_run_in_the_recipes_page_passes_its_checks(tmp_path):
    """docs/recipes.md "Small-scale version": its data_prep command and its recipe run, as printed (with --check, and
    the results page's batch appended), with HOME a temporary folder."""
    import os
    import re
    import sys

    page = (RECIPES.parent / "docs" / "recipes.md").read_text()
    block = page.split("## Small-scale version", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    prep, run = [line.replace("~", str(tmp_path)) for line in block.replace("\\\n", " ").strip().splitlines()]
    batch = re.search(r"\(append `([^`]+)`\)", page.replace("\n", " ")).group(1)
    env = {**os.environ, "HOME": str(tmp_path), "PYTHON": sys.executable,
           "PYTHONPATH": str(RECIPES.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    made = subprocess.run(prep.replace("python ", f"{sys.executable} ", 1), shell=True, cwd=RECIPES.parent, env=env,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0 and (tmp_path / "data" / "arith_largest4" / "train.parquet").exists(), made.stderr
    checked = subprocess.run(run.replace(".sh ", ".sh --check ", 1) + " " + batch, shell=True, cwd=RECIPES.parent,
                             env=env, capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "composed and validated" in checked.stderr
