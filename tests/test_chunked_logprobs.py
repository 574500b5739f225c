"""verl's per-row log-prob loop on chunks of rows (``verl_offgrpo.patches.chunked_logprobs``): through verl's own
``logprobs_from_logits`` (which takes the loop on a CPU: no flash-attn), the values and gradients of bf16 / fp16
logits are bitwise verl's, fp32 logits still run verl's loop, and the patch is installed only in a selecting
job's processes that do not ask for the loop."""

from __future__ import annotations

import sys

import pytest
import torch

from verl_offgrpo.patches import JOB_ENV, PATCH_MODULES
from verl_offgrpo.patches import chunked_logprobs as patch

tf = pytest.importorskip("verl.utils.torch_functional")


@pytest.fixture
def patched(monkeypatch):
    """verl's module with its loop replaced for this test only (restored after)."""
    monkeypatch.setattr(tf, "FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE", False)  # the loop's branch, as on a GPU without it
    monkeypatch.setattr(tf, "NPU_CROSS_ENTROPY_LOSS_AVAILABLE", False)
    loop = tf.logprobs_from_logits_v2
    monkeypatch.setattr(tf, patch.FUNCTION, loop)
    patch.replace_loop(tf)
    return loop


def _logits(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(*shape, generator=g)).to(dtype).requires_grad_(True)
    labels = torch.randint(0, shape[-1], shape[:-1], generator=g)
    return logits, labels


def _values_and_grad(fn, logits, labels):
    logits = logits.detach().clone().requires_grad_(True)
    out = fn(logits, labels)
    weights = torch.linspace(-1.0, 2.0, out.numel()).reshape(out.shape).to(out.dtype)  # a loss that weighs tokens apart
    (out * weights).sum().backward()
    return out.detach(), logits.grad


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(37, 50), (3, 13, 50)])  # rmpad (tokens, vocab); padded (batch, seq, vocab)
def test_bf16_and_fp16_values_and_gradients_are_verls_bit_for_bit(patched, monkeypatch, dtype, shape):
    monkeypatch.setattr(patch, "CHUNK_ROWS", 8)  # several chunks, the last one short
    logits, labels = _logits(shape, dtype)
    calls = []
    real_log_softmax = torch.nn.functional.log_softmax
    monkeypatch.setattr(torch.nn.functional, "log_softmax", lambda x, *a, **k: calls.append(x.shape) or real_log_softmax(x, *a, **k))
    got, got_grad = _values_and_grad(tf.logprobs_from_logits, logits, labels)  # verl's entry point, patched
    n_rows = got.numel()
    if len(shape) == 2:  # chunks of rows, not rows
        assert calls == [(min(8, n_rows - i), shape[-1]) for i in range(0, n_rows, 8)]
    else:  # padded: by whole sequences (8 rows < one 13-token sequence: one at a time), each in chunks of 8 rows
        assert calls == [(8, shape[-1]), (5, shape[-1])] * 3
    calls.clear()
    want, want_grad = _values_and_grad(patched, logits, labels)  # verl's loop itself
    assert len(calls) == shape[0]  # the loop: one call per row of the first dimension
    assert got.dtype == want.dtype and got.shape == labels.shape
    assert torch.equal(got, want) and torch.equal(got_grad, want_grad)
    # and the per-token formula, by hand, for one token
    row = logits[(0,) * (len(shape) - 1)].detach().float()
    label = labels[(0,) * (len(shape) - 1)]
    assert abs(float(got.reshape(-1)[0]) - float(row[label] - torch.logsumexp(row, -1))) < 0.05


def test_fp32_logits_still_run_verls_loop(patched, monkeypatch):
    logits, labels = _logits((9, 20), torch.float32)
    seen = []
    monkeypatch.setattr(torch, "logsumexp", lambda x, *a, **k: seen.append(tuple(x.shape)) or torch.special.logsumexp(x, *a, **k))
    got, got_grad = _values_and_grad(tf.logprobs_from_logits, logits, labels)
    assert seen == [(20,)] * 9  # verl's loop: one logsumexp per row
    want = logits.detach().gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.special.logsumexp(logits.detach(), -1)
    assert torch.allclose(got, want, atol=1e-6)


def test_replacing_twice_wraps_once_and_live_reads_the_module(patched, monkeypatch):
    monkeypatch.setitem(sys.modules, patch.MODULE, tf)
    first = tf.logprobs_from_logits_v2
    assert first is not patched and patch.live()
    patch.replace_loop(tf)
    assert tf.logprobs_from_logits_v2 is first and first.__wrapped__ is patched


def test_not_live_in_this_process():
    """The test session is no selecting job: verl's function is its own (and ``check`` says "not live")."""
    assert not patch.live() and "verl_offgrpo.patches.chunked_logprobs" in PATCH_MODULES


@pytest.mark.parametrize("environ, hooked", [
    ({JOB_ENV: "1"}, True),
    ({JOB_ENV: "1", patch.LOOP_ENV: "1"}, False),  # the user keeps verl's loop
    ({}, False),  # plain verl
])  # fmt: skip
def test_installed_only_in_a_selecting_job_that_does_not_ask_for_the_loop(monkeypatch, environ, hooked):
    from _post_import_hooks import install_leaves_a_hook

    assert install_leaves_a_hook(patch, environ, monkeypatch) is hooked


def test_a_verl_without_the_loop_is_one_line_for_a_selecting_job(monkeypatch):
    from types import SimpleNamespace

    from verl_offgrpo.patches import PatchError

    with pytest.raises(PatchError, match=r"lacks logprobs_from_logits_v2; .*\(set VERL_OFFGRPO_LOGPROBS_LOOP=1 "):
        patch.replace_loop(SimpleNamespace(__name__=patch.MODULE))


def test_padded_logits_sliced_as_verl_slices_them_go_by_whole_sequences(patched, monkeypatch):
    """verl's padded path hands over ``logits[:, -response_length - 1 : -1]`` (not contiguous): two 13-token
    sequences fit in 32 rows, so groups of two sequences, the same values as the loop."""
    monkeypatch.setattr(patch, "CHUNK_ROWS", 32)
    full, _ = _logits((5, 20, 50), torch.bfloat16, seed=3)
    logits = full.detach()[:, -14:-1]
    labels = torch.randint(0, 50, (5, 13), generator=torch.Generator().manual_seed(4))
    assert not logits.is_contiguous()
    calls = []
    real_log_softmax = torch.nn.functional.log_softmax
    monkeypatch.setattr(torch.nn.functional, "log_softmax", lambda x, *a, **k: calls.append(tuple(x.shape)) or real_log_softmax(x, *a, **k))
    got = tf.logprobs_from_logits(logits, labels)
    assert calls == [(26, 50), (26, 50), (13, 50)]
    assert torch.equal(got, patched(logits, labels))


def test_the_first_chunked_call_of_a_process_prints_one_console_line(patched, monkeypatch, capsys):
    """A run's log says which computation it used: one line at the first bf16 call (rank 0, or no process group),
    none for fp32 (verl's loop)."""
    monkeypatch.setattr(patch, "_said", False)
    tf.logprobs_from_logits(*_logits((4, 10), torch.float32))
    assert patch.LIVE_MESSAGE not in capsys.readouterr().out
    for _ in range(3):
        tf.logprobs_from_logits(*_logits((4, 10), torch.bfloat16))
    out = capsys.readouterr().out
    assert out.count(patch.LIVE_MESSAGE) == 1 and "VERL_OFFGRPO_LOGPROBS_LOOP=1 keeps the loop" in out
    monkeypatch.setattr(patch, "_said", False)
    monkeypatch.setattr(patch, "first_rank", lambda: False)  # another rank of the job: silent
    tf.logprobs_from_logits(*_logits((4, 10), torch.bfloat16))
    assert patch.LIVE_MESSAGE not in capsys.readouterr().out
