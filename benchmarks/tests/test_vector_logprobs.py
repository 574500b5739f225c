"""benchmarks/diag/vector_logprobs.py and logprobs_loop_gpu.py on the CPU: the chunked log-probs equal
verl 0.9.1's per-token loop bit for bit (values and gradients, both dtype branches), and the patch is
installed only where asked."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch
from verl.utils import torch_functional

BENCH_DIAG = __import__("pathlib").Path(__file__).resolve().parents[1] / "diag"
sys.path.insert(0, str(BENCH_DIAG))
vector_logprobs = importlib.import_module("vector_logprobs")  # OFFGRPO_VECTOR_LOGPROBS unset: installs nothing
logprobs_loop_gpu = importlib.import_module("logprobs_loop_gpu")

VERL_V2 = torch_functional.logprobs_from_logits_v2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_chunked_equals_verls_loop_bitwise_with_gradients(dtype):
    gen = torch.Generator().manual_seed(1)
    logits = (torch.randn(257, 500, generator=gen) * 4).to(dtype).requires_grad_(True)
    labels = torch.randint(0, 500, (257,), generator=gen)
    loop = VERL_V2(logits, labels)
    (g_loop,) = torch.autograd.grad(loop.sum(), logits)
    chunked = vector_logprobs.logprobs_chunked(logits, labels, chunk_rows=64)  # 257 = 4 chunks + 1 row
    (g_chunked,) = torch.autograd.grad(chunked.sum(), logits)
    assert chunked.dtype == loop.dtype and chunked.shape == (257,)
    assert torch.equal(chunked, loop) and torch.equal(g_chunked, g_loop)
    # and they are log-probabilities: log_softmax picked by hand for one row
    row = torch.log_softmax(logits[3].detach().float(), -1)[labels[3]]
    assert abs(float(chunked[3]) - float(row)) < (2e-2 if dtype is torch.bfloat16 else 1e-5)


def test_installed_only_with_its_env(monkeypatch):
    monkeypatch.setattr(torch_functional, "logprobs_from_logits_v2", VERL_V2)
    assert vector_logprobs.install({}) is False and torch_functional.logprobs_from_logits_v2 is VERL_V2
    assert vector_logprobs.install({vector_logprobs.ENV: "1"}) is True
    assert torch_functional.logprobs_from_logits_v2 is vector_logprobs.logprobs_chunked
    # verl's dispatcher (no flash-attn here) now reaches the chunked version
    logits, labels = torch.randn(5, 7, dtype=torch.bfloat16), torch.tensor([0, 1, 2, 3, 6])
    assert torch.equal(torch_functional.logprobs_from_logits(logits, labels), VERL_V2(logits, labels))


def test_gpu_script_reports_equality_and_timings(tmp_path):
    assert logprobs_loop_gpu.main(["--out", str(tmp_path), "--rows", "64", "--vocab", "32", "--reps", "1",
                                   "--device", "cpu"]) == 0
    got = json.loads((tmp_path / "logprobs_loop.json").read_text())
    assert got["device"] == "cpu" and got["rows"] == 64 and set(got["by_dtype"]) == {"bfloat16", "float32"}
    for row in got["by_dtype"].values():
        assert row["values_equal"] and row["grads_equal"] and row["max_abs_diff"] == 0.0
        assert row["loop_s"] > 0 and row["chunked_s"] > 0


def test_verl_loads_it_in_every_process_that_imports_verl():
    """``VERL_USE_EXTERNAL_MODULES`` is read at ``import verl`` (Ray's workers included): with the env set, a fresh
    process's verl dispatches to the chunked version, and says so on stdout (where the job's log keeps it)."""
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = ("import verl\nfrom verl.utils import torch_functional as t\n"
            "print('V2', t.logprobs_from_logits_v2.__module__)")
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "benchmarks.diag.vector_logprobs",
           vector_logprobs.ENV: "1", "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env,
                          cwd=repo, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verl's logprobs_from_logits_v2 replaced" in done.stdout
    assert "V2 benchmarks.diag.vector_logprobs" in done.stdout
