"""Lab checks that lived beside product tests: committed learning runs against the notebook, the
swap-visibility diagnostic, and the level-1 control manager of ``benchmarks/diag``.

The level-1 control runs on the product tests' fakes of verl's rollout servers
(``tests/test_sync_hooks.py``), loaded from their file: ``tests`` is never imported as a package
(verl's wheel installs one of that name).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import ray

BENCH = Path(__file__).resolve().parents[1]
REPO = BENCH.parent
RESULTS = BENCH / "results"
NOTEBOOK = BENCH / "NOTEBOOK.md"


def _product_test_module(name: str):
    spec = importlib.util.spec_from_file_location(f"offgrpo_product_{name}", REPO / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its ray_local fixture pickles its fakes by value under this name
    spec.loader.exec_module(module)
    return module


sync_hooks = _product_test_module("test_sync_hooks")


@pytest.fixture(scope="module")
def _ray_stops_with_the_module():
    """Stops the local Ray instance after the fakes' actors are released (set up first, torn down last):
    the lab modules after this one validate jobs, which the plugin refuses while a Ray without the job's
    marks runs in the process."""
    yield
    ray.shutdown()


ray_local_shared = sync_hooks.ray_local


@pytest.fixture(scope="module")
def ray_local(_ray_stops_with_the_module, ray_local_shared):
    """The product tests' local Ray instance with their fakes, for this module only."""
compose_cfg, make_cluster, run_v0_loop = sync_hooks.compose_cfg, sync_hooks.make_cluster, sync_hooks.run_v0_loop
FakeV0Trainer, V0_OVERRIDES, vllm_sleep = sync_hooks.FakeV0Trainer, sync_hooks.V0_OVERRIDES, sync_hooks.vllm_sleep


def test_the_results_page_lists_the_committed_steps_that_took_a_momentum_only_step():
    """benchmarks/NOTEBOOK.md §4 and the README name the learning steps where every group was all-equal
    (one mini-batch a step: the whole mini-batch had no loss token under the mask). In the runs that
    predate the wrap they took a momentum-only step: +mask seed 0 from step 34 on, seed 2 at step 40 (and
    on-policy seed 2 there, A = 0 without the mask), reuse seed 2 at step 13, each once the reward was
    >= 0.94. The reuse runs of h100x4-2026-11-27h ran with the wrap; their all-equal steps are listed
    apart (the skip itself is checked on their logs in test_benchmarks.py)."""
    learning = json.loads((RESULTS / "learning.json").read_text())
    with_wrap = {(r["config"], str(r["seed"])) for r in learning["runs"] if r.get("machine") == "h100x4-2026-11-27h"}
    assert with_wrap == {("reuse_i10", s) for s in ("0", "1", "3", "4")}
    configs = learning["configs"]
    all_equal = {(name, seed): [row["step"] for row in rows if row.get("zero_var_group_frac") == 1.0]
                 for name, config in configs.items() for seed, rows in config["seeds"].items()}  # fmt: skip
    assert {key: steps for key, steps in all_equal.items() if steps and key not in with_wrap} == {
        ("on_policy_mask", "0"): [34, 36, 39, 41, 44, 47, 48, 52, 55],
        ("on_policy_mask", "2"): [40],
        ("on_policy", "2"): [40],
        ("reuse_i10", "2"): [13],  # ten passes a step, the mask on: ten momentum-only steps
    }
    assert {key: all_equal[key] for key in with_wrap} == {
        ("reuse_i10", "0"): [15, 17, 19, 21, 22], ("reuse_i10", "1"): [18, 23],
        ("reuse_i10", "3"): [21], ("reuse_i10", "4"): [20]}  # fmt: skip
    for (name, seed), steps in all_equal.items():
        reward_at = {row["step"]: row["train_reward"] for row in configs[name]["seeds"][seed]}
        assert all(reward_at[step] >= 0.94 for step in steps), (name, seed)
    page = " ".join((NOTEBOOK).read_text().split())
    assert "+mask seed 0 at steps 34, 36, 39, 41, 44, 47, 48, 52 and 55, +mask seed 2 and on-policy seed 2 at step 40" in page
    assert "seed 2 at step 13 (and seed 1's run since replaced, at step 11)" in page
    assert "(seed 0 at steps 15, 17, 19, 21 and 22, seed 1 at 18 and 23, seed 3 at 21, seed 4 at 20)" in page


def test_a_job_serving_another_jobs_random_init_would_show_far_above_the_lag0_floor():
    """``throughput.py --model-per-job`` is the GPU evidence for the fix only if a swap would show: a
    trainer scoring samples of another seed's random init (``benchmarks/diag/swap_visibility.py``, the
    tiny shape here; the 1.5B shape's figure is in benchmarks/results/raw/swap_visibility/) is far from the ≈ 0.02
    lag-0 floor of a correctly served job, and the same seed built twice gives the same weights."""
    spec = importlib.util.spec_from_file_location("swap_visibility", BENCH / "diag" / "swap_visibility.py")
    swap_visibility = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(swap_visibility)
    swapped = swap_visibility.gaps("tiny", 0, 1, batch=2, n_tokens=8)
    assert swapped["gap"] > 0.2 and swapped["tokens"] == 16
    assert swap_visibility.gaps("tiny", 1, 1, batch=2, n_tokens=8)["gap"] == 0.0
    committed = json.loads((RESULTS / "raw" / "swap_visibility" / "qwen2.5-1.5b_seeds0-1.json").read_text())
    assert committed["shape"] == "qwen2.5-1.5b" and committed["gap"] > 10 * 0.021


def test_level1_control_is_v1_with_a_real_sync_every_step_and_level_1_sleep(ray_local, monkeypatch):
    """benchmarks/diag/level1_every_step.py, loaded by its documented class path the way verl loads
    ``checkpoint_manager_class``: every slot a real sync, as at v = 1, but vLLM sleeps at level 1."""
    monkeypatch.syspath_prepend(str(REPO))  # the jobs' PYTHONPATH has the repo root
    fqn = "benchmarks.diag.level1_every_step.Level1EveryStep"
    cfg = compose_cfg(*V0_OVERRIDES, f"actor_rollout_ref.rollout.checkpoint_manager_class={fqn}")
    servers, _, replicas, wg = make_cluster(n_servers=1, level1_sleep_s=0.1)
    manager = FakeV0Trainer(cfg, wg).init_workers(replicas)
    assert type(manager).__name__ == "Level1EveryStep"
    generated = run_v0_loop(None, manager, servers, range(1, 4))
    assert [c[0] for c in wg.sync_calls] == [0, 1, 2, 3] and generated == {s: [f"pi_{s - 1}"] for s in (1, 2, 3)}
    assert ray.get(servers[0].__ray_call__.remote(vllm_sleep.read_server_state))["sleep_level"] == 1
    assert all(manager.step_metrics(s)["timing_s/off_grpo_sleep"] >= 0.1 for s in (1, 2, 3))
    with pytest.raises(ValueError, match="needs actor_rollout_ref.rollout.checkpoint_manager_class=verl_offgrpo.sync.lagged_manager"):  # v > 1: ours only
        FakeV0Trainer(compose_cfg(*V0_OVERRIDES, "algorithm.off_grpo.sync_period=2",
                                  f"actor_rollout_ref.rollout.checkpoint_manager_class={fqn}"), wg).init_workers(replicas)


def test_run_12s_vllm_memory_is_quoted_in_the_units_nvidia_smi_gave():
    """window_speed run 12 (NOTEBOOK §29): nvidia-smi's MiB in the NOTE, the results page in GiB (117 236 / 1 024
    ≈ 114, 62 428 / 1 024 ≈ 61), docs/window.md in the NOTE's MiB; never "117 GB" (that would be 123)."""
    note = (RESULTS / "raw/window_speed/h200x2-2026-11-30i-run12/NOTE.md").read_text()
    summary = json.loads((RESULTS / "raw/window_speed/h200x2-2026-11-30i-run12/window_speed.json").read_text())
    vllm = {job["name"]: job["memory"]["gpu_mib"]["max_by_role"]["vllm"] for job in summary["jobs"]}
    assert vllm == {"w10": 117236.0, "w10w": 62428.0}
    assert "vLLM process held 117 236 MiB against 62 428" in note
    page = " ".join((REPO / "results" / "README.md").read_text().split())
    assert f"vLLM: {round(vllm['w10'] / 1024)} vs {round(vllm['w10w'] / 1024)} GiB" in page
    docs = " ".join((REPO / "docs" / "window.md").read_text().split())
    assert "117 236 MiB against 62 428 MiB" in docs and "117 GB" not in page + docs


@pytest.mark.parametrize("folder, jobs, window, row_head", [
    ("h200x2-2026-11-30j-run13", "v1=step:1,w10=window:10", "w10", "| SmolLM2/GSM8K, 512 cap, waves, CUDA graphs, cumul. |"),
    ("h200x2-2026-11-30k-run14", "v1=step:1,w10f=window:10:full", "w10f", "| the same, one batch |"),
    ("h200x2-2026-11-30l-run15", "v1=step:1,w10=window:10", "w10", "| the same, waves, 1 024 cap |"),
])
def test_the_cuda_graph_rows_are_what_their_summaries_say(folder, jobs, window, row_head):
    """window_speed runs 13-15 (NOTEBOOK §30, §31, §33): CUDA graphs on (the runs' one extra override), waves and one
    batch (``:full``), ``final_outputs_only`` off (the lab's pin, which no override of theirs lifted: "cumul." on the
    page, "off" in each NOTE), and the results page's rows (baseline's generation share, speedup and interval,
    measured/ideal = ideal time / measured time, the ideal v1's rest + the window's generation and sync per update)
    from their window_speed.json."""
    import sync_e2e

    summary = json.loads((RESULTS / "raw/window_speed" / folder / "window_speed.json").read_text())
    assert summary["args"]["extra"] == ["actor_rollout_ref.rollout.enforce_eager=False"]
    assert not summary["args"].get("job_extra") and summary["args"]["jobs"] == jobs
    assert "algorithm.off_grpo.final_outputs_only=false" in sync_e2e.overrides("v1", 1, Path("m"), Path("d"), 1, 1e-6, "x")
    assert "`final_outputs_only` **off** (the lab's pin in `sync_e2e.overrides`" in (
        RESULTS / "raw/window_speed" / folder / "NOTE.md").read_text()
    assert graph_row(summary, window, row_head) in (REPO / "results" / "README.md").read_text()


def graph_row(summary: dict, window: str, row_head: str) -> str:
    """A CUDA-graph run's results-page row from its window_speed.json (100 updates a job, 9 windows measured)."""
    runs = {job["name"]: job for job in summary["jobs"]}
    v1, w10 = runs["v1"], runs[window]
    assert v1["updates_logged"] == w10["updates_logged"] == 100 and w10["windows_measured"] == 9
    low, high = w10["speedup_interval90"]
    ideal = v1["rest_per_update_s"] + w10["gen_per_update_s"] + w10["sync_per_update_s"]
    return (f"{row_head} H200 ×2, 1 GPU a job | {round(100 * v1['gen_share'])} % | "
            f"{w10['speedup_vs_v1']:.2f}× ({low:.2f}–{high:.2f}) | {ideal / w10['time_per_update_s']:.2f} |")


def test_the_cuda_graph_row_with_final_outputs_only_is_what_its_summary_says():
    """window_speed run 16 (NOTEBOOK §35): run 15's pair with ``final_outputs_only=true`` in ``--extra`` (lifting the
    lab's pin), recorded as on in both jobs' settings, "on" in its NOTE, and its results-page row from its summary."""
    folder = RESULTS / "raw/window_speed/h200x2-2026-11-30m-run16"
    summary = json.loads((folder / "window_speed.json").read_text())
    assert summary["args"]["extra"] == ["actor_rollout_ref.rollout.enforce_eager=False",
                                        "algorithm.off_grpo.final_outputs_only=true"]
    assert not summary["args"].get("job_extra") and summary["args"]["jobs"] == "v1=step:1,w10=window:10"
    assert summary["args"]["response_length"] == 1024
    assert {job["name"]: job["settings"]["final_outputs_only"] for job in summary["jobs"]} == {"v1": "true", "w10": "true"}
    assert "`final_outputs_only` **on** in both jobs" in (folder / "NOTE.md").read_text()
    assert graph_row(summary, "w10", "| the same, final outputs only |") in (REPO / "results" / "README.md").read_text()
