"""Would a job that served another job's weights show in its lag-0 |log π_k/α|?

``throughput.py --model-per-job`` gives each job side by side its own random init (seed = the job's
index). If one job's vLLM loaded another job's weights (verl's shared weight socket, fixed by
``verl_offgrpo.patches.ipc_socket``), that job's trainer would score α's samples under its own policy:

    gap(a, b) = mean over sampled tokens y of |log π_a(y | x) − log π_b(y | x)|

with the samples drawn from π_b (the served α) at temperature 1, as the benchmark samples. This script
builds two random-init Qwen2 models of a ``throughput.SHAPES`` shape the way ``build_model`` does
(``torch.manual_seed(seed)``, transformers' init, bf16; on the CPU, so the numbers differ from a GPU
host's build but not their distribution), draws responses from ``b``, scores them under both in fp32,
and prints ``RESULT {json}`` with ``gap(a, b)`` (exactly 0 for ``--seeds 0,0``: the same weights).

    python3 benchmarks/diag/swap_visibility.py --shape qwen2.5-1.5b --seeds 0,1 --out benchmarks/results/raw/swap_visibility.json

On the GPU the lag-0 floor of a correctly served job is ≈ 0.02 (bf16 vLLM vs FSDP, results §3); a swap
shows when gap(a, b) is far above it.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import throughput  # noqa: E402


def random_model(shape: str, seed: int):
    """``throughput.build_model``'s random init, drawn on the CPU, rounded to bf16 and held in fp32."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(**throughput.SHAPES[shape], max_position_embeddings=4096))
    return model.to(torch.bfloat16).to(torch.float32).eval()


@torch.no_grad()
def sample(model, prompts: torch.Tensor, n_tokens: int, generator: torch.Generator) -> torch.Tensor:
    """prompt ⧺ n_tokens drawn from ``model`` at temperature 1 (no EOS: fixed length, as the benchmark)."""
    seq, past = prompts, None
    step_input = prompts
    for _ in range(n_tokens):
        out = model(input_ids=step_input, past_key_values=past, use_cache=True)
        past = out.past_key_values
        probs = torch.softmax(out.logits[:, -1].float(), dim=-1)
        step_input = torch.multinomial(probs, 1, generator=generator)
        seq = torch.cat([seq, step_input], dim=1)
    return seq


@torch.no_grad()
def response_logprobs(model, seq: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """log π(y_t | x, y_<t) of every response token."""
    logp = torch.log_softmax(model(input_ids=seq).logits[:, :-1].float(), dim=-1)
    targets = seq[:, 1:]
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)[:, prompt_len - 1 :]


def gaps(shape: str, seed_a: int, seed_b: int, batch: int = 4, prompt_len: int = 16, n_tokens: int = 32,
         sample_seed: int = 0) -> dict:  # fmt: skip
    """gap(a, b) on responses sampled from model b (the one a swapped engine serves); 0 when a == b."""
    served = random_model(shape, seed_b)
    g = torch.Generator().manual_seed(sample_seed)
    vocab = throughput.SHAPES[shape]["vocab_size"]
    prompts = torch.randint(0, vocab, (batch, prompt_len), generator=g)
    seq = sample(served, prompts, n_tokens, g)
    logp_served = response_logprobs(served, seq, prompt_len)
    del served
    trainer = random_model(shape, seed_a)
    gap = (response_logprobs(trainer, seq, prompt_len) - logp_served).abs().mean().item()
    return {"shape": shape, "seed_trainer": seed_a, "seed_served": seed_b, "tokens": batch * n_tokens,
            "gap": gap, "mean_logprob_served": logp_served.mean().item()}  # fmt: skip


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(throughput.SHAPES))
    p.add_argument("--seeds", default="0,1", help="trainer seed, served seed")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    seed_a, seed_b = (int(s) for s in args.seeds.split(","))
    result = gaps(args.shape, seed_a, seed_b, batch=args.batch, n_tokens=args.tokens)
    result["torch"] = torch.__version__
    print("RESULT " + json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
