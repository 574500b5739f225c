"""The GPU scripts' own logic, on the CPU: speedup formulas, override editing, stall detection."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import sync_e2e  # noqa: E402
import throughput  # noqa: E402


def _row(v, step, sync, layout="1gpu-tp1"):
    return {"layout": layout, "model": "m", "device": "d", "v": v, "step_time_s": step, "sync_time_s": sync}


def test_speedups_follow_the_formula_relative_to_the_layouts_v1_row():
    rows = [_row(1, 10.0, 2.0), _row(10, 8.5, 2.1), _row(2, 9.0, 2.0), _row(1, 4.0, None, layout="other")]
    rows[1]["sync_slot_on_skipped_steps"] = {"median": 0.5}
    throughput.add_speedups(rows)
    v10, v2, other = rows[1], rows[2], rows[3]
    # S* = T1 / (T1 - (1 - 1/v) * T_sync) with T1 = 10, T_sync = 2
    assert v10["ideal_speedup"] == pytest.approx(10 / (10 - 0.9 * 2))
    assert v10["measured_speedup"] == pytest.approx(10 / 8.5)
    # net of the skip slot's own cost: T1 / (T1 - (1 - 1/v) * (T_sync - T_skip)), T_skip = 0.5
    assert v10["ideal_speedup_net_of_skip"] == pytest.approx(10 / (10 - 0.9 * 1.5))
    assert v2["ideal_speedup"] == pytest.approx(10 / 9.0)
    assert v2["measured_over_ideal"] == pytest.approx(1.0)
    assert rows[0]["ideal_speedup"] == pytest.approx(1.0)
    assert other["ideal_speedup"] is None  # its v=1 row has no sync time
    elsewhere = {**_row(10, 5.0, 1.0), "machine": "host-b"}
    throughput.add_speedups(rows + [elsewhere])
    assert elsewhere["measured_speedup"] is None  # never compared across machines


def test_summary_median_and_spread():
    s = throughput.summary([5.0, 1.0, 3.0, float("nan"), None, 2.0, 4.0])
    assert s == {"median": 3.0, "p10": pytest.approx(1.4), "p90": pytest.approx(4.6), "n": 5}


def test_set_overrides_replaces_plain_and_plus_keys_and_appends_new_ones():
    base = ["a.b=1", "+c.d=x", "e=2"]
    assert throughput.set_overrides(base, {"a.b": 3, "c.d": "y", "f": True}) == ["e=2", "a.b=3", "c.d=y", "f=True"]


def test_per_step_reads_verl_timing_keys():
    metrics = {
        0: {"val/x": 1.0},
        1: {"timing_s/step": 2.0, "timing_s/gen": 1.0, "timing_s/update_weights": 0.5, "off_grpo/synced": 1.0,
            "perf/total_num_tokens": 1000},
    }  # fmt: skip
    (row,) = throughput.per_step(metrics)
    assert row["step"] == 1 and row["sync_slot_s"] == 0.5 and row["tokens_per_s"] == 500.0 and row["synced"] == 1.0


FAKE_JOB = textwrap.dedent(
    """
    import json, os, sys, time
    path = os.environ["VERL_FILE_LOGGER_PATH"]
    for step in (1, 2):
        with open(path, "a") as fh:
            fh.write(json.dumps({"step": step, "data": {"timing_s/step": 0.1}}) + "\\n")
    if sys.argv[1] == "hang":
        time.sleep(600)
    """
)


@pytest.mark.parametrize("mode, steps, expect_rc", [("exit", 2, 0), ("hang", 5, 124), ("hang", 2, sync_e2e.EXIT_HANG)])
def test_launch_detects_stalls_and_dumps_stacks(tmp_path, mode, steps, expect_rc):
    script = tmp_path / "job.py"
    script.write_text(FAKE_JOB)
    jsonl, stacks = tmp_path / "m.jsonl", tmp_path / "stacks"
    env = sync_e2e.run_env(jsonl, stack_dir=stacks)
    rc, progress = sync_e2e.launch(
        [sys.executable, str(script), mode], env, "job", tmp_path, jsonl, timeout=60, steps=steps, stall_s=4,
        exit_grace_s=4,
    )  # fmt: skip
    assert rc == expect_rc
    assert set(progress["step_arrival_s"]) == {"1", "2"}
    assert progress["stalled"] is (expect_rc == 124)
    if expect_rc == 124:  # the stalled job's stack was dumped before it was killed
        (dump,) = stacks.glob("*.txt")
        assert "time.sleep(600)" in dump.read_text()
        sync_e2e.save_logs(tmp_path / "out", "job", tmp_path, stacks)
        assert "time.sleep(600)" in (tmp_path / "out" / "logs" / "job.stacks.txt").read_text()
    else:
        assert not stacks.exists() or not list(stacks.glob("*.txt"))


def test_padded_tokenizer_decodes_every_id(tmp_path):
    tok = throughput.build_padded_tokenizer(tmp_path, 1000)
    assert len(tok) == 1000
    assert tok.decode([999]) and tok.decode([600])
    ids = tok.apply_chat_template([{"role": "user", "content": "Repeat the digit 3."}], add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert max(ids) < 1000 and "Repeat the digit 3." in tok.decode(ids)
    assert json.loads((tmp_path / "tokenizer.json").read_text())["model"]["vocab"]["w0"] >= 512
