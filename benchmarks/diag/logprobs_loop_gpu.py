#!/usr/bin/env python3
"""Time verl's per-token log-prob loop against :func:`vector_logprobs.logprobs_chunked` on a GPU, and say
whether their outputs and gradients are bitwise equal (lab; NOTEBOOK §11).

One (tokens, vocab) logits tensor per dtype, with gradient, as ``update_actor`` sees it without
flash-attn and with ``use_remove_padding=False``: forward + backward of each, ``--reps`` times after one
warm-up, medians. Writes ``OUT/logprobs_loop.json``::

    {"device", "flash_attn_ce": bool, "rows", "vocab", "by_dtype": {"bfloat16": {"loop_s", "chunked_s",
     "speedup", "values_equal", "grads_equal", "max_abs_diff"}, ...}}

    python3 benchmarks/diag/logprobs_loop_gpu.py --out $OUT            # ~1 minute on an H200
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vector_logprobs import logprobs_chunked  # noqa: E402


def fwd_bwd(fn, logits: torch.Tensor, labels: torch.Tensor):
    """``fn``'s log-probs and the gradient of their sum w.r.t. ``logits``, and the seconds both took."""
    sync = torch.cuda.synchronize if logits.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = fn(logits, labels)
    (grad,) = torch.autograd.grad(out.sum(), logits)
    sync()
    return out.detach(), grad, time.perf_counter() - t0


def compare(loop_fn, logits: torch.Tensor, labels: torch.Tensor, reps: int) -> dict:
    times = {"loop": [], "chunked": []}
    for i in range(reps + 1):  # the first of each is a warm-up
        a, ga, ta = fwd_bwd(loop_fn, logits, labels)
        b, gb, tb = fwd_bwd(logprobs_chunked, logits, labels)
        if i:
            times["loop"].append(ta)
            times["chunked"].append(tb)
    loop_s, chunked_s = statistics.median(times["loop"]), statistics.median(times["chunked"])
    return {"loop_s": loop_s, "chunked_s": chunked_s, "speedup": loop_s / chunked_s,
            "values_equal": bool(torch.equal(a, b)), "grads_equal": bool(torch.equal(ga, gb)),
            "max_abs_diff": float((a.float() - b.float()).abs().max())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=20000, help="tokens (the learning runs' ≈ 17–23 k a pass)")
    ap.add_argument("--vocab", type=int, default=49152, help="SmolLM2's vocabulary")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    from verl.utils import torch_functional

    result = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "flash_attn_ce": bool(torch_functional.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE),
              "rows": args.rows, "vocab": args.vocab, "by_dtype": {}}
    gen = torch.Generator(device=args.device).manual_seed(0)
    for dtype in (torch.bfloat16, torch.float32):
        logits = (torch.randn(args.rows, args.vocab, device=args.device, generator=gen) * 3).to(dtype)
        logits.requires_grad_(True)
        labels = torch.randint(0, args.vocab, (args.rows,), device=args.device, generator=gen)
        row = compare(torch_functional.logprobs_from_logits_v2, logits, labels, args.reps)
        result["by_dtype"][str(dtype).removeprefix("torch.")] = row
        print(f"[logprobs-loop] {dtype}: {row}", flush=True)
        del logits
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "logprobs_loop.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
