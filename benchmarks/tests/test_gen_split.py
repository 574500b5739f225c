"""benchmarks/gen_split.py: verl's gen timer split into vLLM's generation and the rest (the sleep)."""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import gen_split
import gen_split_table


def _metrics_file(path: Path, steps: dict[int, tuple], cut_last_line: bool = False) -> None:
    """verl's file logger lines: step → (timing_s/gen, agent loop generate_sequences/max or None[, rollout lag])."""
    lines = []
    for step, (gen, vllm, *lag) in steps.items():
        data = {"timing_s/gen": gen, **({} if vllm is None else {"timing_s/agent_loop/generate_sequences/max": vllm})}
        data.update({"off_grpo/rollout_lag": lag[0]} if lag else {})
        lines.append(json.dumps({"step": step, "data": data}))
    text = "\n".join(lines) + ("\n" + lines[-1][:20] if cut_last_line else "") + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)


def test_split_and_pairs_by_hand(tmp_path):
    # step 1 is the warm-up (left out); step 4 of the v=1 run lacks the agent loop's timer (left out)
    _metrics_file(tmp_path / "L_2gpu-tp2_m_v1.jsonl", {1: (50.0, 40.0), 2: (4.0, 3.0), 3: (6.0, 5.0), 4: (9.0, None)})
    _metrics_file(tmp_path / "L_2gpu-tp2_m_v10_if_needed.jsonl.gz", {1: (60.0, 1.0, 0.0), 2: (7.0, 5.5, 0.0), 3: (9.0, 7.5, 1.0)},
                  cut_last_line=True)  # a killed job's last line
    _metrics_file(tmp_path / "L_2gpu-tp2-level1_m_v1.jsonl", {1: (1.0, 1.0), 2: (5.0, 4.0), 3: (5.0, 4.0)})
    _metrics_file(tmp_path / "M_1gpu-tp1_m_v10.jsonl", {1: (1.0, 1.0), 2: (2.0, 1.0)})  # no v=1 run: no pair
    out = tmp_path / "split.json"
    assert gen_split.main(["--raw", str(tmp_path), "--out", str(out)]) == 0
    pairs = {(p["layout"], p["control"], p["v"]): p for p in json.loads(out.read_text())["pairs"]}
    assert sorted(pairs, key=str) == sorted([("2gpu-tp2", None, 10), ("2gpu-tp2", "level1", 1)], key=str)
    lagged = pairs["2gpu-tp2", None, 10]
    assert lagged["variant"] == "if_needed" and lagged["files"] == ["L_2gpu-tp2_m_v1.jsonl", "L_2gpu-tp2_m_v10_if_needed.jsonl.gz"]
    # v=1: gen 4, 6 = vLLM 3, 5 + rest 1, 1; v=10: gen 7, 9 = vLLM 5.5, 7.5 + rest 1.5, 1.5
    assert lagged["gen"]["v1"] == {"median": 5.0, "mean": 5.0, "n": 2} and lagged["gen"]["mean_difference"] == 3.0
    assert lagged["gen_vllm"]["mean_difference"] == 2.5
    assert lagged["gen_rest"]["lagged"]["mean"] == 1.5 and lagged["gen_rest"]["mean_difference"] == 0.5
    assert lagged["gen_rest"]["mean_difference_ci90"] == [0.5, 0.5]  # no spread, no interval
    assert lagged["gen_vllm_after_sync"] == [5.5] and lagged["gen_vllm_after_skip"]["median"] == 7.5  # step 2 / 3
    low, high = lagged["gen_vllm"]["mean_difference_ci90"]
    assert 0.5 <= low < 2.5 < high <= 4.5  # resampled means lie between the extreme steps
    control = pairs["2gpu-tp2", "level1", 1]
    assert control["gen_vllm"]["mean_difference"] == 0.0 and control["gen_rest"]["mean_difference"] == 0.0


def test_committed_split_is_what_the_script_derives_and_what_the_results_page_says(tmp_path):
    """benchmarks/results/gen_split.json = gen_split.py over benchmarks/results/raw/throughput. benchmarks/NOTEBOOK.md §3: v=10's
    sleep costs 0.13–0.21 s a step more at 7B TP=2 (α is 7.6 GB per GPU), less elsewhere; vLLM's own
    generation was slower at v=10 in all three 7B TP=2 + offload pairs run one job after the other, and
    in no other pair (test_benchmarks checks the same layout's pair run side by side)."""
    committed = json.loads((REPO / "benchmarks" / "results" / "gen_split.json").read_text())
    assert gen_split.main(["--out", str(tmp_path / "split.json")]) == 0
    assert json.loads((tmp_path / "split.json").read_text()) == committed
    pairs = committed["pairs"]
    tp2_7b = [p for p in pairs if (p["layout"], p["model"], p["control"]) == ("2gpu-tp2-offload", "qwen2.5-7b", None)]
    controls = [p for p in pairs if p["control"]]  # test_benchmarks checks the level-1 control's claims
    side_by_side = [p for p in tp2_7b if p["lease"] in ("h100x4e", "h100x4n", "h100x4o")]  # and these (v=10, 4, 2)
    tp2_7b = [p for p in tp2_7b if p not in side_by_side]  # one job after the other
    kept_cache = [p for p in pairs if p["lease"] == "h100x4f"]  # the first pair with if_needed beside its v=1 run
    model_per_job = [p for p in pairs if p["lease"] == "h100x4g"]  # the 1-GPU jobs with if_needed, side by side
    offload_again = [p for p in pairs if p["lease"] == "h100x4h"]  # 1.5B TP=2 + offload with if_needed, 16 steps a side
    offload_longer = [p for p in pairs if p["lease"] == "h100x4i"]  # the same pair over 26 / 28 steps
    offload_v2_v4 = [p for p in pairs if p["lease"] in ("h100x4j", "h100x4k")]  # the layout at v=2, then v=4
    tp2_v2_v4 = [p for p in pairs if p["lease"] in ("h100x4l", "h100x4m")]  # the same at TP=2 without offload
    grouped = (tp2_7b + controls + side_by_side + kept_cache + model_per_job + offload_again + offload_longer
               + offload_v2_v4 + tp2_v2_v4)  # fmt: skip
    others = [p for p in pairs if p not in grouped]
    assert [(p["lease"], p["control"]) for p in controls] == [("h100x4d", "level1")]
    assert [p["lease"] for p in tp2_7b] == ["h100x2", "h100x2b", "h100x2c"] and len(others) == 7
    assert [(p["lease"], p["v"]) for p in side_by_side] == [("h100x4e", 10), ("h100x4n", 4), ("h100x4o", 2)]
    for p in tp2_7b:
        rest = p["gen_rest"]
        assert 0.12 < rest["mean_difference"] < 0.22 and rest["mean_difference_ci90"][0] > 0.03
        assert p["gen_vllm"]["mean_difference"] > 0.5
    assert tp2_7b[0]["gen_vllm"]["mean_difference_ci90"][0] > 0.8  # only the first pair's gap is beyond the noise
    assert all(p["gen_vllm"]["mean_difference_ci90"][0] < 0 for p in tp2_7b[1:])
    for p in tp2_7b[:2]:  # within the v=10 run, the step right after a real sync was not faster than those after a skip
        (after_sync,) = p["gen_vllm_after_sync"]
        assert after_sync > p["gen_vllm_after_skip"]["median"]
    for p in others:
        assert -0.25 < p["gen_vllm"]["mean_difference"] < 0.35
        assert p["gen_vllm"]["mean_difference_ci90"][0] < 0 < p["gen_vllm"]["mean_difference_ci90"][1]
        assert -0.01 < p["gen_rest"]["mean_difference"] < 0.09
    # update_actor was slower after a level-1 sleep at 7B TP=2 + offload (the three v=10 pairs and the
    # level-1 control), and not measurably anywhere else; the sync slot shrank by what the lag saves
    for p in (*tp2_7b, *controls):
        assert 0.2 < p["update_actor"]["mean_difference"] < 0.75
    assert tp2_7b[0]["update_actor"]["mean_difference_ci90"][0] > 0
    for p in others:
        low, high = p["update_actor"]["mean_difference_ci90"]
        assert low < 0 < high and p["sync_slot"]["mean_difference"] < 0.05
    for p in tp2_7b:
        assert p["sync_slot"]["mean_difference_ci90"][1] < -0.8
    for p in others:  # where nothing else moved (TP=2 and TP=4 pairs), the step fell by what the slot saved
        if p["layout"] != "1gpu-tp1":
            assert p["sync_slot"]["mean_difference"] < -0.6 and abs(p["step"]["mean_difference"] - p["sync_slot"]["mean_difference"]) < 0.15
    # 1.5B TP=2 with the cache kept on skips (h100x4-2026-11-26f): vLLM's generation did not move, the
    # slot saved 0.88 s and update_actor 0.20 s more (its interval below 0); the step fell by their sum
    (kept,) = kept_cache
    assert kept["layout"] == "2gpu-tp2" and kept["variant"] == "if_needed"
    assert kept["gen_vllm"]["mean_difference_ci90"][0] < 0 < kept["gen_vllm"]["mean_difference_ci90"][1]
    assert -0.94 < kept["sync_slot"]["mean_difference"] < -0.8 and kept["update_actor"]["mean_difference_ci90"][1] < -0.05
    parts = sum(kept[k]["mean_difference"] for k in ("sync_slot", "update_actor", "gen", "old_log_prob"))
    assert abs(kept["step"]["mean_difference"] - parts) < 0.05
    # 1-GPU 1.5B with the cache kept (h100x4-2026-11-27): vLLM's generation did not move; the rest of the
    # generation phase (the level-1 sleep keeps α in host memory) took 0.06-0.10 s more; the slot less
    assert sorted(p["v"] for p in model_per_job) == [2, 4, 10]
    for p in model_per_job:
        assert p["layout"] == "1gpu-tp1" and p["variant"] == "if_needed"
        assert p["gen_vllm"]["mean_difference_ci90"][0] < 0 < p["gen_vllm"]["mean_difference_ci90"][1]
        assert 0.05 < p["gen_rest"]["mean_difference"] < 0.11 and p["gen_rest"]["mean_difference_ci90"][0] > 0.01
        assert p["sync_slot"]["mean_difference_ci90"][1] < 0
        assert p["update_actor"]["mean_difference_ci90"][0] < 0 < p["update_actor"]["mean_difference_ci90"][1]
    # 1.5B TP=2 + offload again (h100x4-2026-11-27b): the slot saved 0.97 s a step; generation, the level-1
    # sleep (+0.03 s: α's host copy is small at 1.5B) and the step itself did not move beyond the noise
    (again,) = offload_again
    assert (again["layout"], again["model"], again["variant"]) == ("2gpu-tp2-offload", "qwen2.5-1.5b", "if_needed")
    assert -1.0 < again["sync_slot"]["mean_difference"] < -0.95 and 0 < again["gen_rest"]["mean_difference"] < 0.05
    for part in ("gen_vllm", "gen_rest", "step", "update_actor"):
        assert again[part]["mean_difference_ci90"][0] < 0 < again[part]["mean_difference_ci90"][1], part
    # the same pair over 26 / 28 steps (h100x4-2026-11-27c): the slot saved 0.94 s and the step fell 1.28 s,
    # the rest being vLLM's generation, faster at v=10 this time but within its noise
    (longer,) = offload_longer
    assert (longer["layout"], longer["model"], longer["variant"]) == ("2gpu-tp2-offload", "qwen2.5-1.5b", "if_needed")
    assert longer["sync_slot"]["mean_difference_ci90"][1] < -0.8 and longer["step"]["mean_difference_ci90"][1] < -0.7
    assert -1.3 < longer["step"]["mean_difference"] < -1.25 and -0.95 < longer["sync_slot"]["mean_difference"] < -0.9
    for part in ("gen_vllm", "gen_rest", "update_actor", "old_log_prob"):
        assert longer[part]["mean_difference_ci90"][0] < 0 < longer[part]["mean_difference_ci90"][1], part
    # the same layout at v=2 and v=4, each beside its own v=1 job (h100x4-2026-11-27d): the slot saved 0.69 /
    # 0.83 s a step (a skip costs the 0.25 s wake instead of a 1.1-1.4 s sync on 1/2 and 3/4 of the steps),
    # the step fell 0.77 / 0.53 s with an interval holding 0 (the host's steps spread 15-21 s), and vLLM's
    # generation moved within its noise, one way at v=2 and the other at v=4
    assert [(p["lease"], p["v"], p["variant"]) for p in offload_v2_v4] == [("h100x4j", 2, "if_needed"), ("h100x4k", 4, "if_needed")]
    v2, v4 = offload_v2_v4
    assert -0.75 < v2["sync_slot"]["mean_difference"] < -0.65 and -0.85 < v4["sync_slot"]["mean_difference"] < -0.8
    for p in offload_v2_v4:
        assert p["sync_slot"]["mean_difference_ci90"][1] < -0.45 and p["step"]["mean_difference"] < -0.5
        for part in ("step", "gen_vllm", "update_actor", "old_log_prob"):
            assert p[part]["mean_difference_ci90"][0] < 0 < p[part]["mean_difference_ci90"][1], part
    assert v2["gen_vllm"]["mean_difference"] < 0 < v4["gen_vllm"]["mean_difference"]
    # 1.5B TP=2 without offload at v=2 and v=4 (h100x4-2026-11-27e): the slot saved 0.61 / 0.83 s a step; at
    # v=4 the step fell 0.96 s (the slot's saving and 0.21 s of update_actor, both intervals below 0), at v=2
    # only 0.17 s (interval holding 0): vLLM's generation took 0.37 s more, its interval barely holding 0,
    # and as much on the steps generated right after a sync as after a skip; the level-1 sleep cost nothing
    assert [(p["lease"], p["layout"], p["v"], p["variant"]) for p in tp2_v2_v4] == [
        ("h100x4l", "2gpu-tp2", 2, "if_needed"), ("h100x4m", "2gpu-tp2", 4, "if_needed")]  # fmt: skip
    v2, v4 = tp2_v2_v4
    assert -0.65 < v2["sync_slot"]["mean_difference"] < -0.6 and -0.85 < v4["sync_slot"]["mean_difference"] < -0.8
    assert v4["step"]["mean_difference_ci90"][1] < -0.4 and v4["update_actor"]["mean_difference_ci90"][1] < 0
    assert abs(v4["step"]["mean_difference"] - v4["sync_slot"]["mean_difference"] - v4["update_actor"]["mean_difference"]) < 0.1
    assert v2["step"]["mean_difference_ci90"][0] < 0 < v2["step"]["mean_difference_ci90"][1]
    assert 0.35 < v2["gen_vllm"]["mean_difference"] < 0.4 and -0.1 < v2["gen_vllm"]["mean_difference_ci90"][0] < 0
    assert 0.05 < v4["gen_vllm"]["mean_difference"] < 0.1
    assert v2["gen_vllm_after_skip"]["median"] > statistics.median(v2["gen_vllm_after_sync"])
    for p in tp2_v2_v4:
        assert p["gen_rest"]["mean_difference_ci90"][0] < 0.01 and abs(p["gen_rest"]["mean_difference"]) < 0.05
    tp4 = next(p for p in others if p["layout"] == "4gpu-tp4")
    assert (tp4["gen_vllm"]["v1"]["n"], tp4["gen_vllm"]["lagged"]["n"]) == (36, 35)


def test_runs_of_one_job_are_pooled(tmp_path):
    """A job run twice on a lease (throughput.py --accumulate) leaves ``….run1`` and ``….run2`` files: each
    run's warm-up is left out, the rest pooled, and the pair is the jobs', not the files'."""
    _metrics_file(tmp_path / "L_2gpu-tp2_m_v1.run1.jsonl.gz", {1: (50.0, 40.0), 2: (4.0, 3.0)})
    _metrics_file(tmp_path / "L_2gpu-tp2_m_v1.run2.jsonl.gz", {1: (50.0, 40.0), 2: (8.0, 7.0), 3: (6.0, 5.0)})
    _metrics_file(tmp_path / "L_2gpu-tp2-level1_m_v1.run1.jsonl.gz", {1: (1.0, 1.0), 2: (6.0, 4.0)})
    _metrics_file(tmp_path / "L_2gpu-tp2-level1_m_v1.run2.jsonl.gz", {1: (1.0, 1.0), 2: (7.0, 5.0)})
    out = tmp_path / "split.json"
    assert gen_split.main(["--raw", str(tmp_path), "--out", str(out)]) == 0
    (pair,) = json.loads(out.read_text())["pairs"]
    assert pair["control"] == "level1" and pair["files"] == [
        "L_2gpu-tp2_m_v1.run1.jsonl.gz", "L_2gpu-tp2_m_v1.run2.jsonl.gz",
        "L_2gpu-tp2-level1_m_v1.run1.jsonl.gz", "L_2gpu-tp2-level1_m_v1.run2.jsonl.gz"]  # fmt: skip
    # v=1: vLLM 3, 7, 5 (mean 5), rest 1, 1, 1; control: vLLM 4, 5 (mean 4.5), rest 2, 2
    assert pair["gen_vllm"]["v1"] == {"median": 5.0, "mean": 5.0, "n": 3} and pair["gen_vllm"]["mean_difference"] == -0.5
    assert pair["gen_rest"]["mean_difference"] == 1.0 and pair["gen_rest"]["mean_difference_ci90"] == [1.0, 1.0]


def test_the_steps_other_parts_by_hand(tmp_path):
    """The step, update_actor and sync slot (verl's update_weights, or the plugin's own sync timer)
    compared like gen; a timer one job did not log (old_log_prob here) gives None."""

    def write(path, steps):
        path.write_text("".join(json.dumps({"step": step, "data": {"timing_s/gen": 5.0, "timing_s/agent_loop/generate_sequences/max": 4.0, **data}}) + "\n"
                                for step, data in steps.items()))  # fmt: skip

    write(tmp_path / "L_1gpu-tp1_m_v1.jsonl", {
        1: {"timing_s/step": 99.0}, 2: {"timing_s/step": 10.0, "timing_s/update_actor": 3.0, "timing_s/update_weights": 2.0},
        3: {"timing_s/step": 12.0, "timing_s/update_actor": 5.0, "timing_s/update_weights": 2.0, "timing_s/old_log_prob": 1.0}})  # fmt: skip
    write(tmp_path / "L_1gpu-tp1_m_v4.jsonl", {
        1: {"timing_s/step": 99.0}, 2: {"timing_s/step": 9.0, "timing_s/update_actor": 4.5, "timing_s/off_grpo_sync": 0.5},
        3: {"timing_s/step": 10.0, "timing_s/update_actor": 4.5, "timing_s/off_grpo_sync": 0.5}})  # fmt: skip
    out = tmp_path / "split.json"
    assert gen_split.main(["--raw", str(tmp_path), "--out", str(out)]) == 0
    (pair,) = json.loads(out.read_text())["pairs"]
    assert pair["step"]["v1"] == {"median": 11.0, "mean": 11.0, "n": 2} and pair["step"]["mean_difference"] == -1.5
    assert pair["update_actor"]["mean_difference"] == 0.5 and pair["update_actor"]["mean_difference_ci90"] == [-0.5, 1.5]
    assert pair["sync_slot"]["mean_difference"] == -1.5 and pair["sync_slot"]["mean_difference_ci90"] == [-1.5, -1.5]
    assert pair["old_log_prob"] is None and pair["gen"]["mean_difference"] == 0.0


@pytest.mark.parametrize("name, ok", [("h100x2c_2gpu-tp2-offload_qwen2.5-7b_v10_if_needed.jsonl.gz", True),
                                      ("h100x2c_2gpu-tp2-offload-level1_qwen2.5-7b_v1.jsonl", True),
                                      ("h100x4d_2gpu-tp2-offload-level1_qwen2.5-7b_v1.run2.jsonl.gz", True),
                                      ("h100x4_qwen2.5-7b_v1_run1_killed.jsonl", False),
                                      ("h100x2c_2gpu-tp2-offload_qwen2.5-7b_v1.log.gz", False)])
def test_metrics_file_names(name, ok):
    assert bool(gen_split.METRICS_FILE.match(name)) is ok


def test_the_results_pages_split_tables_are_the_committed_json_row_by_row():
    """benchmarks/NOTEBOOK.md §3's two hand-ordered gen_split tables: every row as gen_split_table.py formats
    it from gen_split.json (bold aside), and every pair of the JSON in both, but for the pairs the page
    discusses beside them: h100x4f's TP=2 pair (its own subsection) in both, and the level-1 control
    (h100x4d, its own subsection) in the generation table."""
    page = (REPO / "benchmarks" / "NOTEBOOK.md").read_text()
    split = json.loads((REPO / "benchmarks" / "results" / "gen_split.json").read_text())
    found = gen_split_table.page_mismatches(page, split)
    assert found["generation"] == [] and found["parts"] == []
    assert found["generation_missing"] == [("h100x4d", "2gpu-tp2-offload-level1", "7b", "control"),
                                           ("h100x4f", "2gpu-tp2", "1.5b", "10")]  # fmt: skip
    assert found["parts_missing"] == [("h100x4f", "2gpu-tp2", "1.5b", "10")]


def test_split_table_rows_format_a_pair_as_the_page_writes_it():
    """Hand-made pair: Unicode minus, intervals, v=1 → v means, and the after-sync column's three forms."""
    part = {"v1": {"n": 4, "mean": 6.0}, "lagged": {"n": 5, "mean": 5.5}, "mean_difference": -0.5, "mean_difference_ci90": [-1.25, 0.004]}
    pair = {"lease": "h100x9", "layout": "2gpu-tp2", "control": None, "model": "qwen2.5-1.5b", "v": 4,
            "gen": part, "gen_vllm": part, "gen_rest": part, "step": part, "sync_slot": part, "update_actor": part,
            "old_log_prob": part, "gen_vllm_after_sync": [5.0, 7.0, 6.0, 9.0], "gen_vllm_after_skip": {"median": 5.25}}  # fmt: skip
    assert gen_split_table.generation_row(pair) == (
        "| h100x9 | 2gpu-tp2 | 1.5b | 4 | 4 / 5 | −0.50 | 6.00 → 5.50 | −0.50 (−1.25 to +0.00) | 6.00 → 5.50 "
        "| −0.50 (−1.25 to +0.00) | 4 steps, median 6.50 / 5.25 |"
    )
    assert gen_split_table.after_sync_cell({**pair, "gen_vllm_after_sync": [5.0, 7.0]}) == "5.00, 7.00 / 5.25"
    assert gen_split_table.after_sync_cell({**pair, "gen_vllm_after_sync": []}) == "– / 5.25"
    control = {**pair, "control": "level1"}
    assert gen_split_table.parts_row(control).startswith("| h100x9 | 2gpu-tp2-level1 | 1.5b | control | −0.50 (−1.25 to +0.00) |")
