"""benchmarks/results/empty_update.json: the GPU run of benchmarks/empty_update_gpu.py (benchmarks/NOTEBOOK.md, "Empty mini-batches
take no optimizer step on a GPU"; lease h100x4-2026-11-27f, raw logs benchmarks/results/raw/empty_update/h100x4n_*). Checked:
each run's stored verdict is the script's own ``check_run`` over its stored steps, the numbers the page states, and
that the stored steps are what the script reads from the saved raw metrics file and console log. Every helper is
also run on edited copies of the data, each of which it must reject."""

from __future__ import annotations

import copy
import gzip
import json
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import empty_update_gpu as eu
import mainppo_job

RESULTS = REPO / "benchmarks" / "results" / "empty_update.json"
RAW = REPO / "benchmarks" / "results" / "raw" / "empty_update"
PREFIX = "h100x4n"  # the raw files' name for lease h100x4-2026-11-27f
K, V, N = 4, 4, 12  # graded steps, sync period, steps: the script's defaults
LAG0 = [1, 5, 9]  # batches sampled right after a sync (the first step, then after steps 4 and 8)
REAL = [2, 3, 4]  # lagged batches whose updates since α include a real one
STILL = [6, 7, 8, 10, 11, 12]  # lagged batches after the sync at step 4: only all-equal steps since α
AFTER = list(range(K + 1, N + 1))


def _committed() -> dict:
    return json.loads(RESULTS.read_text())


def _run(result: dict, name: str) -> dict:
    (run,) = [r for r in result["runs"] if r["name"] == name]
    return run


def _col(run: dict, key: str, steps=range(1, N + 1)) -> list:
    rows = {r["step"]: r for r in run["steps"]}
    return [rows[s][key] for s in steps]


def _floor(run: dict) -> float:
    """The run's lag-0 floor of |log r'|: the median over steps 1, 5 and 9 (each right after a sync)."""
    return statistics.median(_col(run, "mean_abs_log_rprime", LAG0))


def _ratios(run: dict, steps) -> list[float]:
    """|log r'| of ``steps`` over the run's lag-0 floor, rounded to 0.001."""
    return [round(x / _floor(run), 3) for x in _col(run, "mean_abs_log_rprime", steps)]


# ----------------------------------------------------------------------------- what is checked
def _verdicts_hold(result: dict) -> None:
    """Both runs, mask then control; each run's stored checks are exactly what ``check_run`` derives from its
    stored steps now, and every check (so ``ok``) passes, as does the file's ``ok``."""
    assert [r["name"] for r in result["runs"]] == ["mask", "control"] and result["ok"] is True
    for run in result["runs"]:
        checks = eu.check_run(run, run["train_steps"], run["sync_period"])
        assert checks == run["checks"] and checks["ok"] is True, run["name"]


def _setup_holds(result: dict) -> None:
    """The page's table: one H100 each (GPUs 0 and 1 of one host, side by side), verl 0.9.1, vLLM 0.24.0, K=4, v=4,
    N=12, no extra override; 12 logged steps, every group varied on steps 1-4 (grad_norm > 0) and none after
    (grad_norm exactly 0, reward 0)."""
    versions = result["versions"]
    assert (versions["device"], versions["verl"], versions["vllm"]) == ("NVIDIA H100 80GB HBM3", "0.9.1", "0.24.0")
    for run, gpu in zip(result["runs"], ("0", "1")):
        assert (run["device"], run["verl"], run["vllm"]) == ("NVIDIA H100 80GB HBM3", "0.9.1", "0.24.0")
        assert (run["train_steps"], run["sync_period"], run["total_steps"], run["extra_overrides"]) == (K, V, N, [])
        assert (run["returncode"], run["gpu"], run["concurrent_jobs"], run["stalled"]) == (0, gpu, 2, False)
        assert [r["step"] for r in run["steps"]] == list(range(1, N + 1))
        assert _col(run, "zero_var_group_frac") == [0.0] * K + [1.0] * (N - K)
        assert all(x > 0.4 for x in _col(run, "grad_norm", range(1, K + 1)))
        assert _col(run, "grad_norm", AFTER) == [0.0] * (N - K) and _col(run, "reward", AFTER) == [0.0] * (N - K)


def _mask_numbers_hold(result: dict) -> None:
    """mask: 8 skip lines, one before each of steps 5-12's metrics line; skipped_optimizer_step_frac exactly 1 on
    steps 5-12 and 0 on 1-4 (as zero_var_masked_frac); the loss's own |log r'| 0 on 5-12 (no loss token); floor
    0.00111; steps 6-8 and 10-12 at 0.961-1.020× the floor (page: within 1.1×), steps 2-4 ≥ 304× it."""
    run = _run(result, "mask")
    assert run["skip_lines"] == N - K and _col(run, "skip_lines") == [0] * K + [1] * (N - K)
    assert _col(run, "skipped_frac") == [0.0] * K + [1.0] * (N - K)
    assert _col(run, "zero_var_masked_frac") == [0.0] * K + [1.0] * (N - K)
    assert _col(run, "loss_mean_abs_log_rprime", AFTER) == [0.0] * (N - K)
    assert round(_floor(run), 5) == 0.00111
    still = _ratios(run, STILL)
    assert max(still) <= 1.1 and (min(still), max(still)) == (0.961, 1.020)
    assert min(_ratios(run, REAL)) == 304.458


def _control_numbers_hold(result: dict) -> None:
    """control: no skip line, skipped_optimizer_step_frac and zero_var_masked_frac 0 on every step; floor 0.00107;
    AdamW's momentum steps move steps 6-8 to 84 / 138 / 171× the floor and 10-12 to 20.7 / 37.6 / 50.6× (all ≥ the
    check's 5×, the smallest at step 10), steps 2-4 ≥ 349× it."""
    run = _run(result, "control")
    assert run["skip_lines"] == 0 and _col(run, "skip_lines") == [0] * N
    assert _col(run, "skipped_frac") == [0.0] * N and _col(run, "zero_var_masked_frac") == [0.0] * N
    assert round(_floor(run), 5) == 0.00107
    still = _ratios(run, STILL)
    assert min(still) >= eu.MOVED_FACTOR and [round(x, 1) for x in still] == [83.5, 137.7, 171.2, 20.7, 37.6, 50.6]
    assert min(_ratios(run, REAL)) == 348.668


def _raw_matches(result: dict, work: Path) -> None:
    """Each run's stored steps, skip-line count and metrics source are what the script's own readers
    (``mainppo_job.read_metrics``, ``count_skip_lines``, ``step_rows``) give on the gzipped raw metrics file and
    console log, unpacked under the names the script wrote them with."""
    work.mkdir(parents=True, exist_ok=True)
    for run in result["runs"]:
        tag = f"empty_update_{run['name']}"
        for ext in ("jsonl", "log"):
            (work / f"{tag}.{ext}").write_bytes(gzip.decompress((RAW / f"{PREFIX}_{tag}.{ext}.gz").read_bytes()))
        metrics, source = mainppo_job.read_metrics(work, tag)
        total, by_step = eu.count_skip_lines((work / f"{tag}.log").read_text(errors="replace"))
        assert (source, total) == (run["metrics_source"], run["skip_lines"]), run["name"]
        assert eu.step_rows(metrics, by_step) == run["steps"], run["name"]


# ----------------------------------------------------------------------------- the committed file
def test_the_committed_verdicts_are_check_runs_on_the_stored_steps_and_pass():
    _verdicts_hold(_committed())


def test_the_committed_run_has_the_setup_the_page_states():
    _setup_holds(_committed())


def test_with_the_mask_every_all_masked_step_skipped_and_the_weights_stayed_at_the_floor():
    _mask_numbers_hold(_committed())


def test_without_the_mask_no_step_skipped_and_adams_momentum_moved_the_weights():
    _control_numbers_hold(_committed())


def test_the_committed_steps_are_what_the_script_reads_from_the_raw_logs(tmp_path):
    _raw_matches(_committed(), tmp_path)


def test_the_raw_files_are_small():
    """Four gzipped files (mask / control × metrics file / console log), under 200 KB together."""
    names = sorted(p.name for p in RAW.iterdir())
    assert names == [f"{PREFIX}_empty_update_{n}.{e}.gz" for n in ("control", "mask") for e in ("jsonl", "log")]
    assert sum(p.stat().st_size for p in RAW.iterdir()) < 200_000


# ----------------------------------------------------------------------------- each check can fail
def _edit(result: dict, name: str | None, step: int | None, key: str, value) -> dict:
    """A copy of ``result`` with one value changed: of the file (name None), a run, or a run's step."""
    out = copy.deepcopy(result)
    target = out if name is None else _run(out, name)
    if step is not None:
        target = {r["step"]: r for r in target["steps"]}[step]
    if key == "versions.device":
        target["versions"]["device"] = value
    elif callable(value):
        target[key] = value(target[key])
    else:
        target[key] = value
    return out


@pytest.mark.parametrize(
    "check, name, step, key, value",
    [
        (_verdicts_hold, "mask", 8, "skipped_frac", 0.0),  # check_run now fails, the stored verdict says ok
        (_verdicts_hold, "control", 10, "mean_abs_log_rprime", 0.004),  # below 5× the floor
        (_verdicts_hold, "mask", None, "skip_lines", 7),
        (_verdicts_hold, None, None, "ok", False),
        (_setup_holds, None, None, "versions.device", "NVIDIA H200"),
        (_setup_holds, "control", None, "vllm", "0.23.0"),
        (_setup_holds, "mask", 3, "zero_var_group_frac", 1.0),
        (_setup_holds, "control", 7, "grad_norm", 1e-6),
        (_setup_holds, "mask", 2, "grad_norm", 0.3),
        (_setup_holds, "control", None, "returncode", 124),
        (_setup_holds, "mask", 12, "step", 13),
        (_mask_numbers_hold, "mask", 9, "skipped_frac", 0.0),
        (_mask_numbers_hold, "mask", 3, "skipped_frac", 1.0),
        (_mask_numbers_hold, "mask", None, "skip_lines", 9),
        (_mask_numbers_hold, "mask", 6, "skip_lines", 2),
        (_mask_numbers_hold, "mask", 11, "mean_abs_log_rprime", lambda x: 1.15 * x),  # check_run's 3× lets it pass
        (_mask_numbers_hold, "mask", 7, "mean_abs_log_rprime", lambda x: 0.9 * x),
        (_mask_numbers_hold, "mask", 2, "mean_abs_log_rprime", 0.1),
        (_mask_numbers_hold, "mask", 10, "loss_mean_abs_log_rprime", 0.001),
        (_mask_numbers_hold, "mask", 7, "zero_var_masked_frac", 0.5),
        (_mask_numbers_hold, "mask", 5, "mean_abs_log_rprime", 0.0013),  # the floor: median of steps 1, 5, 9
        (_control_numbers_hold, "control", 5, "skipped_frac", 1.0),
        (_control_numbers_hold, "control", None, "skip_lines", 1),
        (_control_numbers_hold, "control", 10, "mean_abs_log_rprime", 0.004),
        (_control_numbers_hold, "control", 12, "mean_abs_log_rprime", lambda x: 1.01 * x),
        (_control_numbers_hold, "control", 4, "mean_abs_log_rprime", 0.2),
        (_control_numbers_hold, "control", 9, "mean_abs_log_rprime", 0.0012),
        (_control_numbers_hold, "control", 8, "zero_var_masked_frac", 1.0),
        (_raw_matches, "mask", 12, "skipped_frac", 0.0),
        (_raw_matches, "control", 6, "mean_abs_log_rprime", lambda x: x * (1 + 1e-12)),
        (_raw_matches, "mask", None, "skip_lines", 7),
        (_raw_matches, "control", None, "metrics_source", "empty_update_control.log"),
    ],
)  # fmt: skip
def test_each_check_rejects_an_edited_copy_of_the_committed_data(tmp_path, check, name, step, key, value):
    edited = _edit(_committed(), name, step, key, value)
    with pytest.raises(AssertionError):
        check(edited, tmp_path) if check is _raw_matches else check(edited)


def test_the_results_page_states_the_committed_numbers():
    """The results page's (results/README.md) empty-update section: 8 skipped steps, the mask run's lagged batches at 0.96-1.02× the 0.0011 floor,
    the control's at 21-171×, as the committed file gives them rounded."""
    result = _committed()
    mask, control = _run(result, "mask"), _run(result, "control")
    held, moved = _ratios(mask, STILL), _ratios(control, STILL)
    assert {round(_floor(run), 4) for run in (mask, control)} == {0.0011} and mask["skip_lines"] == 8
    stated = (f"at the bf16 floor ({min(held):.2f}–{max(held):.2f}× its 0.0011)",
              f"{min(moved):.0f}–{max(moved):.0f}× the floor")  # fmt: skip
    readme = " ".join((REPO / "results" / "README.md").read_text().split())
    assert all(text in readme for text in stated), stated
    assert "each of the 8 skipped its optimizer step (8 console lines, `skipped_optimizer_step_frac` = 1" in readme
