"""benchmarks/ingest_learning.py: a lease's files go into the raw folder gzipped and whole, a run it replaces
moves to ``replaced/`` under its own lease's name, and only the lease's runs are taken."""

from __future__ import annotations

import gzip
import io
import json
import tarfile

import pytest

import ingest_learning  # benchmarks/ is on sys.path (conftest.py)


def device_folder(tmp_path, label, tags, other=()):
    device = tmp_path / "device"
    device.mkdir()
    runs = [{"tag": t, "machine": label} for t in tags] + [{"tag": t, "machine": "earlier"} for t in other]
    (device / "learning.json").write_text(json.dumps({"runs": runs}))
    with tarfile.open(device / "lw_logs.tar.gz", "w:gz") as tar:
        for tag in (*tags, *other):
            for suffix in (".jsonl", ".log"):
                data = f"{tag}{suffix} of {label}\n".encode()
                info = tarfile.TarInfo(f"logs/{tag}{suffix}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    (device / "console_tail.log").write_text("tail\n")
    return device


def test_the_leases_runs_go_in_whole_and_a_replaced_run_keeps_its_lease_name(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "red_weight_s0.jsonl.gz").write_bytes(gzip.compress(b"the cut run"))
    (raw / "red_weight_s0.log.gz").write_bytes(gzip.compress(b"its log"))
    committed = {"runs": [{"tag": "red_weight_s0", "machine": "h200x1-2026-11-29"}]}
    device = device_folder(tmp_path, "L2", ["red_weight_s0", "rec_oneside_wide_s0"], other=["off_policy_v10_s0"])
    assert ingest_learning.ingest_files(device, "L2", raw, committed) == ["red_weight_s0", "rec_oneside_wide_s0"]
    assert gzip.decompress((raw / "red_weight_s0.jsonl.gz").read_bytes()) == b"red_weight_s0.jsonl of L2\n"
    assert gzip.decompress((raw / "rec_oneside_wide_s0.log.gz").read_bytes()) == b"rec_oneside_wide_s0.log of L2\n"
    replaced = raw / "replaced"
    assert gzip.decompress((replaced / "h200x1-2026-11-29_red_weight_s0.jsonl.gz").read_bytes()) == b"the cut run"
    assert (replaced / "h200x1-2026-11-29_red_weight_s0.log.gz").exists()
    assert not (raw / "off_policy_v10_s0.jsonl.gz").exists()  # another lease's run: not this one's to commit
    assert gzip.decompress((raw / "L2.console.log.gz").read_bytes()) == b"tail\n"


def test_a_label_without_runs_stops_before_touching_anything(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    device = device_folder(tmp_path, "L2", ["red_weight_s0"])
    with pytest.raises(SystemExit, match="no run of .* has machine='L3'"):
        ingest_learning.ingest_files(device, "L3", raw, {})
    assert not list(raw.iterdir())


def test_ingesting_a_lease_again_rewrites_its_own_files(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    device = device_folder(tmp_path, "L2", ["red_weight_s0"])
    ingest_learning.ingest_files(device, "L2", raw, {})
    ingest_learning.ingest_files(device, "L2", raw, {"runs": [{"tag": "red_weight_s0", "machine": "L2"}]})
    assert not (raw / "replaced").exists()
    assert gzip.decompress((raw / "red_weight_s0.jsonl.gz").read_bytes()) == b"red_weight_s0.jsonl of L2\n"
