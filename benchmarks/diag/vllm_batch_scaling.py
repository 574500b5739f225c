"""How vLLM's generation time grows with the batch, by output kind: a window's question outside verl.

window_speed's CUDA-graph runs (NOTEBOOK §30, §31, §33) had vLLM's cumulative outputs (``final_outputs_only`` off):
a window's 1 280 samples took 8-9× one step's 128. This script asks the engine alone, as verl's server drives it
(``AsyncLLM``, one request a sample, each stream read to its end, ``logprobs=0``): the time for B and 10·B samples
of SmolLM2-135M-Instruct on GSM8K prompts, with ``RequestOutputKind.CUMULATIVE`` (verl's default) and ``FINAL_ONLY``
without detokenization (the plugin's ``final_outputs_only``; ``final_flat`` adds vLLM's ``flat_logprobs``), on one
engine, eager or with CUDA graphs.

    python3 benchmarks/diag/vllm_batch_scaling.py --out $OUT/scaling.json --work /tmp/vs --gsm8k .gpu/gsm8k \
        --batches 128,1280 --kinds cumulative,final --max-tokens 1024

Writes the JSON after every case (a cut run keeps what it measured). With CUDA graphs the engine's start-up (compile
and graph capture, uncached) took over 5 minutes on an H200, or hung (NOTEBOOK §34): give it a detached lease, and try
``--eager`` first. GPU only; nothing here runs in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "data_prep"))

from gsm8k import INSTRUCTION  # noqa: E402  (data_prep's prompt)


def gsm8k_prompts(path: Path, tokenizer, count: int) -> list[list[int]]:
    """``count`` chat-templated GSM8K questions (cycled) with data_prep's instruction, as token ids."""
    rows = [json.loads(line) for line in (path / "train.jsonl").read_text().splitlines() if line.strip()]
    prompts = []
    for i in range(count):
        messages = [{"role": "user", "content": f"{rows[i % len(rows)]['question']} {INSTRUCTION}"}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return prompts


async def generate_all(engine, prompts, params, tag: str) -> dict:
    """Every prompt as its own request (verl sends one a sample), each stream read to its last output."""
    from vllm.inputs import TokensPrompt

    async def one(i, ids):
        last = None
        async for output in engine.generate(prompt=TokensPrompt(prompt_token_ids=ids), sampling_params=params,
                                            request_id=f"{tag}-{i}"):
            last = output
        return len(last.outputs[0].token_ids)

    start = time.perf_counter()
    lengths = await asyncio.gather(*(one(i, ids) for i, ids in enumerate(prompts)))
    return {"seconds": time.perf_counter() - start, "samples": len(prompts), "mean_tokens": sum(lengths) / len(lengths),
            "max_tokens_hit": sum(n >= params.max_tokens for n in lengths)}


async def main_async(args) -> None:
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    import learning  # the SmolLM2 conversion

    model = learning.smollm2_from_gguf(Path(args.work) / "smollm2")
    tokenizer = AutoTokenizer.from_pretrained(model)
    batches = [int(b) for b in args.batches.split(",")]
    prompts = gsm8k_prompts(Path(args.gsm8k), tokenizer, max(batches) // args.n)
    # the engine arguments verl 0.9.1's vLLMHttpServer passes that differ from vLLM's defaults (the setup known to start)
    engine_args = AsyncEngineArgs(model=str(model), dtype="bfloat16", enforce_eager=args.eager, seed=0,
                                  gpu_memory_utilization=args.gpu_mem, max_num_seqs=args.max_num_seqs,
                                  max_model_len=args.max_tokens + 512, max_num_batched_tokens=8192,
                                  distributed_executor_backend="mp", enable_sleep_mode=True,
                                  enable_prefix_caching=True, compilation_config={"cudagraph_mode": "FULL_AND_PIECEWISE"})
    t0 = time.perf_counter()
    engine = AsyncLLM.from_vllm_config(vllm_config=engine_args.create_engine_config())
    result = {"engine_start_s": time.perf_counter() - t0, "args": vars(args), "cases": []}
    kinds = {"cumulative": dict(output_kind=RequestOutputKind.CUMULATIVE),
             "final": dict(output_kind=RequestOutputKind.FINAL_ONLY, detokenize=False),
             # the same with a request's log-probs in flat lists (vllm.logprobs.FlatLogprobs), not a dict per token
             "final_flat": dict(output_kind=RequestOutputKind.FINAL_ONLY, detokenize=False, flat_logprobs=True)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    warm = SamplingParams(max_tokens=16, logprobs=0)
    await generate_all(engine, [p for p in prompts[:16]], warm, "warm")
    for kind in args.kinds.split(","):
        for batch in batches:
            params = SamplingParams(max_tokens=args.max_tokens, temperature=1.0, logprobs=0, seed=None, **kinds[kind])
            chosen = [ids for ids in prompts[: batch // args.n] for _ in range(args.n)]
            case = {"kind": kind, "batch": batch, **await generate_all(engine, chosen, params, f"{kind}{batch}")}
            result["cases"].append(case)
            out.write_text(json.dumps(result, indent=1))
            print(json.dumps(case), flush=True)
    engine.shutdown()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--gsm8k", required=True, help="folder with train.jsonl (a 'question' a line)")
    p.add_argument("--batches", default="128,1280", help="samples a case, comma-separated")
    p.add_argument("--kinds", default="cumulative,final", help="of cumulative, final, final_flat")
    p.add_argument("--n", type=int, default=4, help="samples a prompt (rollout.n)")
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--max-num-seqs", type=int, default=256, help="verl's yaml: 256")
    p.add_argument("--gpu-mem", type=float, default=0.4)
    p.add_argument("--eager", action="store_true", help="vLLM eager (default: CUDA graphs, verl's default)")
    args = p.parse_args(argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
