"""benchmarks/stability.py: only the lease's runs of the variant are taken, and every non-finite value in
verl's per-step metrics is counted, not only those of the plotted curves."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import stability  # benchmarks/ is on sys.path (conftest.py)

LABEL = "lease-x"


def lease_folder(tmp_path, jsonl_lines):
    rows = [{"step": 0, "val_pass1": 0.3, "train_reward": None},
            {"step": 1, "train_reward": 0.5, "bound_tv_token": 0.01, "mean_abs_log_rprime": 0.02, "clipfrac": 0.0,
             "rollout_lag": 0.0},
            {"step": 2, "train_reward": 0.6, "bound_tv_token": 0.05, "mean_abs_log_rprime": 0.09, "clipfrac": 0.003,
             "rollout_lag": 1.0, "skipped_update_frac": 1.0}]  # fmt: skip
    learning = {
        "task": "t", "model": "m", "settings": {},
        "configs": {"window_v10+b16": {"seeds": {"0": rows}}, "window_v10": {"seeds": {"0": rows}}},
        "runs": [{"config": "window_v10+b16", "seed": 0, "tag": "window_v10+b16_s0", "machine": LABEL,
                  "device": "NVIDIA H200", "returncode": 0, "complete": True, "steps_requested": 2, "steps_logged": 2},
                 {"config": "window_v10", "seed": 0, "tag": "window_v10_s0", "machine": LABEL},
                 {"config": "window_v10+b16", "seed": 1, "tag": "window_v10+b16_s1", "machine": "other"}],
    }  # fmt: skip
    device = tmp_path / "device"
    (device / "out").mkdir(parents=True)
    (device / "out" / "learning.json").write_text(json.dumps(learning))
    with tarfile.open(device / "lw_logs.tar.gz", "w:gz") as tar:
        for name, text in (("logs/window_v10+b16_s0.jsonl", "\n".join(jsonl_lines) + "\n"),
                           ("logs/window_v10+b16_s0.log", "console\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return device


def test_counts_every_non_finite_metric_and_takes_only_the_leases_variant(tmp_path):
    lines = ['{"step": 0, "data": {"val-core/x": 0.3}}',
             '{"step": 1, "data": {"actor/grad_norm": NaN, "actor/pg_loss": 0.1, "note": "inf"}}',
             '{"step": 2, "data": {"actor/entropy": Infinity, "actor/kl": -Infinity, "ok": 1}}',
             "not json"]  # fmt: skip
    device = lease_folder(tmp_path, lines)
    results, raw = tmp_path / "results", tmp_path / "raw"
    assert stability.main(["--from", str(device), "--label", LABEL, "--variant", "+b16",
                           "--results", str(results), "--raw", str(raw)]) == 0  # fmt: skip
    summary = json.loads((results / "stability.json").read_text())
    (run,) = summary["runs"]
    assert run["tag"] == "window_v10+b16_s0"
    assert run["non_finite_values"] == 3
    assert run["non_finite_first"] == ["1:actor/grad_norm", "2:actor/entropy", "2:actor/kl"]
    assert run["unparsed_log_lines"] == 1 and run["log_last_step"] == 2
    assert run["max_bound_tv_token"] == 0.05 and run["max_clipfrac"] == 0.003
    assert run["curves"]["val_pass1"] == [[0, 0.3]]
    assert run["updates_without_step"] == 1 and run["updates_without_step_per_100"] == [1]
    assert (results / "stability.png").stat().st_size > 0
    assert gzip.decompress((raw / "window_v10+b16_s0.log.gz").read_bytes()) == b"console\n"


def test_a_clean_log_has_no_non_finite_value():
    scan = stability.scan_jsonl('{"step": 1, "data": {"a": 1.0, "b": true, "c": null, "d": [1]}}\n')
    assert scan == {"steps": 1, "last_step": 1, "non_finite": [], "unparsed_lines": 0}
