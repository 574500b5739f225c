"""benchmarks/empty_update_gpu.py on the CPU: its task data, its job's config, its acceptance checks."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import empty_update_gpu as eu
import sync_e2e

from verl_offgrpo.patches.empty_update import SKIP_MESSAGE

K, V, N = 4, 4, 12  # the script's defaults


# ----------------------------------------------------------------------------- data
def _reward_fn(data_dir: Path):
    spec = importlib.util.spec_from_file_location("eu_reward", data_dir / "reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score


def test_rows_after_the_first_k_steps_give_a_constant_zero_reward(tmp_path):
    import pandas as pd

    sync_e2e.build_data(tmp_path, **eu.data_options(K))
    train = pd.read_parquet(tmp_path / "train.parquet")
    assert [x["index"] for x in train["extra_info"]] == list(range(len(train)))
    truths = [x["ground_truth"] for x in train["reward_model"]]
    cut = K * eu.PROMPTS_PER_STEP
    assert cut == 64 and len(train) >= N * eu.PROMPTS_PER_STEP
    assert all(t in "0123456789" and len(t) == 1 for t in truths[:cut])
    assert set(truths[cut:]) == {sync_e2e.NO_DIGIT}
    score = _reward_fn(tmp_path)
    responses = ["", "   ", "7777", "none", "n", "-", "0123456789 none -", "x" * 40]
    for truth in truths[cut:]:
        assert {score(sync_e2e.DATA_SOURCE, r, truth) for r in responses} == {0.0}
    # a digit row's reward is graded: the fraction of non-space characters equal to the digit
    d = truths[0]
    assert score(sync_e2e.DATA_SOURCE, f"{d}{d}{d}x", d) == 0.75
    assert score(sync_e2e.DATA_SOURCE, f"{d} {d}", d) == 1.0
    assert score(sync_e2e.DATA_SOURCE, "ab", d) == 0.0
    # the prompts, and every row before the cut, are sync_e2e's own (its default is unchanged)
    sync_e2e.build_data(tmp_path / "plain")
    plain = pd.read_parquet(tmp_path / "plain" / "train.parquet")
    assert list(plain["prompt"].map(lambda p: p[0]["content"])) == list(
        train["prompt"].map(lambda p: p[0]["content"])
    )
    plain_truths = [x["ground_truth"] for x in plain["reward_model"]]
    assert plain_truths[:cut] == truths[:cut] and sync_e2e.NO_DIGIT not in plain_truths


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize("name", sorted(eu.RUNS))
def test_the_jobs_compose_with_the_shipped_yaml_and_pass_the_startup_checks(
    tmp_path, reward_file, name
):
    import verl  # noqa: F401  (loads the plugin, which wraps validate_config)
    from hydra import compose, initialize_config_dir
    from torch.utils.data import SequentialSampler
    from verl.trainer.ppo.utils import (
        create_rl_sampler,
        need_critic,
        need_reference_policy,
    )
    from verl.utils.config import validate_config

    from verl_offgrpo.cli.paths import config_dir

    overrides = eu.job_overrides(
        eu.RUNS[name], V, tmp_path / "model", tmp_path / "data", N, 1e-3, name
    )
    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        cfg = compose(config_name="off_grpo_trainer", overrides=overrides)
    actor = cfg.actor_rollout_ref.actor
    assert cfg.algorithm.off_grpo.zero_var_mask is eu.RUNS[name]
    assert (
        cfg.algorithm.off_grpo.sync_period == V
        and cfg.algorithm.adv_estimator == "off_grpo"
    )
    assert (
        cfg.data.shuffle is False and cfg.data.train_batch_size == eu.PROMPTS_PER_STEP
    )
    assert actor.ppo_mini_batch_size == eu.PROMPTS_PER_STEP and actor.ppo_epochs == 1
    assert actor.use_kl_loss is False and actor.entropy_coeff == 0
    assert (
        actor.policy_loss.loss_mode == "off_grpo"
        and cfg.actor_rollout_ref.rollout.n == 4
    )
    assert cfg.trainer.use_v1 is True and cfg.trainer.v1.trainer_mode == "off_grpo_sync"
    assert cfg.trainer.total_training_steps == N and cfg.trainer.experiment_name == name
    validate_config(
        config=cfg,
        use_reference_policy=need_reference_policy(cfg),
        use_critic=need_critic(cfg),
    )
    # verl's train sampler for this config reads the rows in order (V1 and v0 both build it so)
    sampler = create_rl_sampler(cfg.data, list(range(48)))
    assert isinstance(sampler, SequentialSampler) and list(sampler) == list(range(48))


# ----------------------------------------------------------------------------- schedule
def test_which_lagged_steps_follow_the_first_sync_after_k():
    assert [eu.sampler_step(s, V) for s in range(1, 13)] == [0] * 4 + [4] * 4 + [8] * 4
    assert eu.lagged_after_k(N, K, V) == [6, 7, 8, 10, 11, 12]
    assert eu.lagged_before_k(N, K, V) == [2, 3, 4]
    # K not on a sync: the first sync at or after it is at 8; steps 6-8 still see step 5's real update
    assert eu.lagged_after_k(N, 5, V) == [10, 11, 12]
    assert eu.lagged_before_k(N, 5, V) == [2, 3, 4, 6, 7, 8]
    assert eu.lagged_after_k(8, 5, V) == []


def test_arguments_without_a_lagged_step_after_k_are_refused():
    with pytest.raises(SystemExit):
        eu.parse_args(["--steps", "8", "--train-steps", "5"])
    with pytest.raises(SystemExit):
        eu.parse_args(["--runs", "mask,other"])
    assert eu.parse_args([]).run_names == ["mask", "control"]


# ----------------------------------------------------------------------------- checks
FLOOR, MOVED = 0.001, 0.1


def _console(skip_steps) -> str:
    lines = ["(TaskRunner pid=7) Training Progress: 0%"]
    for s in range(1, N + 1):
        lines.append("(WorkerDict pid=9) some worker line")
        lines += [f"(WorkerDict pid=9) {SKIP_MESSAGE}"] * skip_steps.count(s)
        lines.append(
            f"(TaskRunner pid=7) step:{s} - actor/grad_norm:0.0 - training/global_step:{s}"
        )
    return "\n".join(lines) + "\n"


def _run(mask=True, skip_steps=None, edit=None, rc=0) -> dict:
    """A run as the GPU would log it: graded steps 1..K, all-equal after; with the mask the weights
    stop at step K, without it AdamW's momentum moves them."""
    if skip_steps is None:
        skip_steps = list(range(K + 1, N + 1)) if mask else []
    total, by_step = eu.count_skip_lines(_console(skip_steps))
    rows = []
    for s in range(1, N + 1):
        lag = (s - 1) % V
        moved = lag > 0 and (eu.sampler_step(s, V) < K or not mask)
        rows.append(
            {
                "step": s,
                "synced": float(s % V == 0),
                "rollout_lag": float(lag),
                "grad_norm": 0.8 if s <= K else 0.0,
                "zero_var_group_frac": 0.125 if s <= K else 1.0,
                "zero_var_masked_frac": (0.125 if s <= K else 1.0) if mask else 0.0,
                "skipped_frac": 1.0 if mask and s > K else 0.0,
                "mean_abs_log_rprime": MOVED
                if moved
                else FLOOR * (1.2 if s == 1 else 1.0),
                "skip_lines": by_step.get(s, 0),
            }
        )
    for (step, key), value in (edit or {}).items():
        rows[step - 1][key] = value
    return {"name": "mask" if mask else "control", "zero_var_mask": mask, "total_steps": N,
            "returncode": rc, "skip_lines": total, "steps": rows}  # fmt: skip


def _failed(run) -> set[str]:
    checks = eu.check_run(run, K, V)
    return {k for k, x in checks.items() if x is False}


def test_skip_lines_are_counted_in_total_and_before_each_step_line():
    total, by_step = eu.count_skip_lines(_console([5, 6, 6, 12]))
    assert total == 4 and by_step[5] == 1 and by_step[6] == 2 and by_step[12] == 1
    assert by_step[1] == 0 and sum(by_step.values()) == 4
    # one logged after the last step line only counts in the total
    total, by_step = eu.count_skip_lines(_console([]) + SKIP_MESSAGE + "\n")
    assert total == 1 and sum(by_step.values()) == 0
    assert eu.count_skip_lines("no optimizer step here\n") == (0, {})


def test_a_passing_mask_run_and_a_passing_control_run():
    mask = eu.check_run(_run(mask=True), K, V)
    assert mask["ok"] is True and mask["rprime_floor"] == pytest.approx(FLOOR)
    assert mask["skip_line_per_skipped_step"] and mask["lagged_after_k_at_floor"]
    control = eu.check_run(_run(mask=False), K, V)
    assert (
        control["ok"] is True
        and control["no_skip_line"]
        and control["lagged_after_k_moved"]
    )
    assert control["lagged_after_k_steps"] == [6, 7, 8, 10, 11, 12]


@pytest.mark.parametrize(
    "mask, kwargs, failing",
    [
        # the mask run
        (True, {"skip_steps": [5, 6, 7, 8, 9, 10, 12]}, "skip_line_per_skipped_step"),  # step 11 not skipped
        (True, {"skip_steps": [4, 5, 6, 7, 8, 9, 10, 11, 12]}, "skip_line_per_skipped_step"),  # a real step skipped
        (True, {"edit": {(7, "grad_norm"): 0.3}}, "grad_norm_zero_after_k"),  # a masked step took a gradient
        (True, {"edit": {(7, "mean_abs_log_rprime"): 0.02}}, "lagged_after_k_at_floor"),  # weights moved after K
        (True, {"edit": {(10, "mean_abs_log_rprime"): 0.004}}, "lagged_after_k_at_floor"),
        (True, {"edit": {(6, "zero_var_masked_frac"): 0.75}}, "masked_frac_one_after_k"),
        (True, {"edit": {(8, "skipped_frac"): 0.0}}, "skipped_metric_after_k_only"),  # the metric missed a skip
        (True, {"edit": {(3, "skipped_frac"): 1.0}}, "skipped_metric_after_k_only"),  # or reported one too many
        (True, {"edit": {(8, "skipped_frac"): None}}, "skipped_metric_after_k_only"),  # or was not logged
        (False, {"edit": {(9, "skipped_frac"): 1.0}}, "no_skipped_metric"),
        (True, {"edit": {(6, "mean_abs_log_rprime"): None}}, "lagged_after_k_at_floor"),
        # the control run
        (False, {"edit": {(10, "mean_abs_log_rprime"): 0.002}}, "lagged_after_k_moved"),  # stayed at the floor
        (False, {"skip_steps": [9]}, "no_skip_line"),  # the plugin skipped with the mask off
        (False, {"edit": {(9, "zero_var_masked_frac"): 1.0}}, "mask_off"),
        # both: the premise and the run itself
        (True, {"edit": {(3, "mean_abs_log_rprime"): 0.003}}, "moved_by_real_updates"),  # probe blind
        (False, {"edit": {(2, "grad_norm"): 0.0}}, "grad_before_k"),
        (True, {"edit": {(2, "zero_var_group_frac"): 1.0}}, "groups_vary_before_k"),
        (False, {"edit": {(11, "zero_var_group_frac"): 0.9375}}, "all_equal_after_k"),
        (True, {"edit": {(5, "mean_abs_log_rprime"): 0.5, (9, "mean_abs_log_rprime"): 0.5}}, "floor_small"),
        (False, {"edit": {(4, "synced"): 0.0}}, "sync_schedule"),
        (True, {"edit": {(6, "rollout_lag"): 0.0}}, "rollout_lag_schedule"),
        (True, {"rc": 124}, "completed"),
    ],
)  # fmt: skip
def test_the_checks_fail_what_a_broken_skip_or_a_broken_probe_looks_like(
    mask, kwargs, failing
):
    failed = _failed(_run(mask=mask, **kwargs))
    assert failing in failed and "ok" in failed


def test_a_run_missing_its_last_step_is_not_complete():
    run = _run()
    run["steps"] = run["steps"][:-1]
    assert {"completed", "ok"} <= _failed(run)


def test_merge_keeps_the_other_run_and_replaces_a_re_run():
    earlier = {"runs": [{"name": "mask", "checks": {"ok": True}},
                        {"name": "control", "checks": {"ok": False}, "old": 1}],
               "ok": False, "note": "first lease"}  # fmt: skip
    now = [{"name": "control", "checks": {"ok": True}}]
    result = eu.merged(earlier, now)
    assert [r["name"] for r in result["runs"]] == ["mask", "control"]
    assert (
        "old" not in result["runs"][1]
        and result["ok"] is True
        and result["note"] == "first lease"
    )
    skipped = [{"name": "control", "skipped": "out of time budget"}]
    assert eu.merged(earlier, skipped)["ok"] is False
    assert eu.merged({}, [])["ok"] is False


def test_a_missing_merge_file_stops_the_command_before_any_gpu_work(
    tmp_path, monkeypatch
):
    def no_gpu_work(*_a, **_k):
        pytest.fail("started GPU work")

    monkeypatch.setattr(sync_e2e, "prepare_work", no_gpu_work)
    with pytest.raises(SystemExit, match="no such file"):
        eu.main(
            ["--out", str(tmp_path / "out"), "--merge", str(tmp_path / "lost.json")]
        )


def _fake_job(mask: bool):
    """``run_main_ppo`` writing what verl would: the metrics file under verl's keys, the console log."""
    names = {
        "synced": "off_grpo/synced",
        "rollout_lag": "off_grpo/rollout_lag",
        "grad_norm": "actor/grad_norm",
        "zero_var_group_frac": "off_grpo/bound/zero_var_group_frac",
        "zero_var_masked_frac": "off_grpo/zero_var_masked_frac",
        "skipped_frac": "actor/off_grpo/skipped_optimizer_step_frac",
        "mean_abs_log_rprime": "off_grpo/bound/mean_abs_log_rprime",
    }

    def run_main_ppo(tag, job, out, log_dir, timeout, steps, stall_s):
        assert f"algorithm.off_grpo.zero_var_mask={str(mask).lower()}" in job
        records = []
        for row in _run(mask=mask)["steps"]:
            data = {names[k]: x for k, x in row.items() if k in names}
            data["actor/off_grpo/mean_abs_log_rprime"] = (
                0.0 if mask and row["step"] > K else 0.1
            )
            records.append(json.dumps({"step": row["step"], "data": data}))
        (log_dir / f"{tag}.jsonl").write_text("\n".join(records) + "\n")
        skips = list(range(K + 1, N + 1)) if mask else []
        (log_dir / f"{tag}.log").write_text(_console(skips))
        return 0, {"startup_s": 1.0}, log_dir / f"{tag}.jsonl"

    return run_main_ppo


def test_two_commands_accumulate_one_results_file(tmp_path, monkeypatch):
    """The GPU usage: ``--runs mask``, then ``--runs control --merge WORK/empty_update.json``."""

    def no_model(out_arg, work_arg, default_name, **data_options):
        assert data_options == {"constant_from": K * eu.PROMPTS_PER_STEP}
        work = Path(work_arg)
        (work / "logs").mkdir(parents=True, exist_ok=True)
        return Path(out_arg), work / "model", work / "data", work / "logs"

    monkeypatch.setattr(sync_e2e, "prepare_work", no_model)
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    common = ["--out", str(out), "--work", str(work)]
    monkeypatch.setattr(eu, "run_main_ppo", _fake_job(mask=True))
    assert eu.main([*common, "--runs", "mask"]) == 0
    monkeypatch.setattr(eu, "run_main_ppo", _fake_job(mask=False))
    merge = ["--merge", str(work / eu.RESULTS)]
    assert eu.main([*common, "--runs", "control", *merge]) == 0
    result = json.loads((out / eu.RESULTS).read_text())
    assert result["ok"] is True and [r["name"] for r in result["runs"]] == [
        "mask",
        "control",
    ]
    mask, control = result["runs"]
    assert mask["skip_lines"] == N - K and control["skip_lines"] == 0
    assert [r["skip_lines"] for r in mask["steps"]] == [0] * K + [1] * (N - K)
    assert (
        mask["steps"][6]["loss_mean_abs_log_rprime"] == 0.0
    )  # the loss's own: no token left
    assert mask["steps"][6]["mean_abs_log_rprime"] == FLOOR
    assert control["steps"][6]["mean_abs_log_rprime"] == MOVED


def test_both_runs_side_by_side_on_two_gpus_in_one_command(tmp_path, monkeypatch):
    """``--runs mask,control --gpus 0,1``: each run on its own GPU (``CUDA_VISIBLE_DEVICES``), both
    started at once (no budget skip), one results file with both runs and ``ok`` over both."""

    def no_model(out_arg, work_arg, default_name, **data_options):
        work = Path(work_arg)
        (work / "logs").mkdir(parents=True, exist_ok=True)
        return Path(out_arg), work / "model", work / "data", work / "logs"

    fakes = {True: _fake_job(mask=True), False: _fake_job(mask=False)}
    seen = {}

    def run_main_ppo(tag, job, out, log_dir, timeout, steps, stall_s, **env_extra):
        mask = "algorithm.off_grpo.zero_var_mask=true" in job
        seen[tag] = env_extra.get("CUDA_VISIBLE_DEVICES")
        return fakes[mask](tag, job, out, log_dir, timeout, steps, stall_s)

    monkeypatch.setattr(sync_e2e, "prepare_work", no_model)
    monkeypatch.setattr(eu, "run_main_ppo", run_main_ppo)
    monkeypatch.setattr(eu, "on_gpus", lambda jobs, gpus, run: [run(j, {"CUDA_VISIBLE_DEVICES": g}) for j, g in zip(jobs, gpus)])
    out = tmp_path / "out"
    out.mkdir()
    # budget below MIN_RUN_S: one after the other the second run would be skipped, side by side both start
    args = ["--out", str(out), "--work", str(tmp_path / "w"), "--runs", "mask,control", "--gpus", "2,3", "--budget-s", "200"]
    assert eu.main(args) == 0
    assert seen == {"empty_update_mask": "2", "empty_update_control": "3"}
    result = json.loads((out / eu.RESULTS).read_text())
    assert result["ok"] is True and [(r["name"], r["gpu"], r["concurrent_jobs"]) for r in result["runs"]] == [
        ("mask", "2", 2), ("control", "3", 2)]  # fmt: skip
    with pytest.raises(SystemExit):
        eu.parse_args(["--runs", "mask,control", "--gpus", "0"])  # one GPU per run
