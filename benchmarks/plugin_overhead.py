#!/usr/bin/env python3
"""Cost of the plugin's own math: ``off_grpo`` estimator and loss vs verl's ``grpo`` and ``vanilla``.

Times, on the same random batch and device, the functions verl dispatches to (its registries
``get_adv_estimator_fn`` / ``get_policy_loss_fn``, with a real ``ActorConfig`` / ``AlgoConfig``):

* advantage: ``off_grpo`` (with and without the zero-variance mask) vs ``grpo``, once per step;
* policy loss forward + backward: ``off_grpo`` vs ``vanilla`` (both given verl's token IS weights),
  once per micro-batch and PPO epoch.

and turns the difference into a per-step overhead for a given step shape (``--seqs`` sequences of
``--response-length`` tokens, ``--micro`` per micro-batch, ``--epochs``), relative to a measured step
time (``--step-time-s``, or the median v=1 step of ``--throughput`` results for that shape).

    python3 benchmarks/plugin_overhead.py --out benchmarks/results --seqs 64 --response-length 256 --micro 16 \
        --throughput benchmarks/results/throughput.json

Writes ``OUT/plugin_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch


def _timeit(fn, device: str, repeats: int) -> float:
    """Median wall seconds of ``fn()`` (device-synchronised), after 5 warm-up calls."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(5):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def batch(seqs: int, length: int, group: int, device: str, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 2, length + 1, (seqs,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    scores = (torch.rand(seqs, generator=g) < 0.4).float()
    rewards = torch.zeros(seqs, length)
    rewards[torch.arange(seqs), lengths - 1] = scores
    old = -torch.rand(seqs, length, generator=g) * 2
    return {
        "rewards": rewards.to(device),
        "mask": mask.to(device),
        "index": np.array([str(i // group) for i in range(seqs)], dtype=object),
        "old_log_prob": old.to(device),
        "log_prob": (old + 0.05 * torch.randn(seqs, length, generator=g)).to(device),
        "advantages": torch.randn(seqs, 1, generator=g).expand(seqs, length).contiguous().to(device),
        "is_weights": torch.exp(0.2 * torch.randn(seqs, length, generator=g)).to(device),
    }


def measure(args) -> dict:
    import verl  # noqa: F401  (loads the plugin through its entry point)
    from omegaconf import OmegaConf

    import verl_offgrpo.plugin  # noqa: F401  (explicit, in case entry points are not installed)
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
    from verl.workers.config import ActorConfig, PolicyLossConfig

    device = args.device
    b = batch(args.seqs, args.response_length, args.group, device)
    algo = {
        name: OmegaConf.create({"norm_adv_by_std_in_grpo": True, "off_grpo": {"zero_var_mask": mask}})
        for name, mask in (("mask", True), ("nomask", False))
    }

    def adv(name, cfg):
        fn = get_adv_estimator_fn(name)
        return lambda: fn(token_level_rewards=b["rewards"], response_mask=b["mask"].clone(), index=b["index"], config=cfg)

    micro = min(args.micro, args.seqs)
    mb = {k: (v[:micro] if torch.is_tensor(v) else v) for k, v in b.items()}
    configs = {}
    for mode in ("off_grpo", "vanilla"):
        cfg = ActorConfig(
            strategy="fsdp", rollout_n=1, ppo_mini_batch_size=micro, ppo_micro_batch_size_per_gpu=micro,
            clip_ratio=0.2, policy_loss=PolicyLossConfig(loss_mode=mode),
        )  # fmt: skip
        cfg.global_batch_info.update(  # what verl's ppo_loss fills in before calling the loss
            dp_size=1, batch_num_tokens=int(mb["mask"].sum()), global_batch_size=micro,
            loss_scale_factor=cfg.loss_scale_factor,
        )  # fmt: skip
        configs[mode] = cfg

    def loss(mode):
        fn = get_policy_loss_fn(mode)

        def call():
            log_prob = mb["log_prob"].clone().requires_grad_(True)
            value, _metrics = fn(
                old_log_prob=mb["old_log_prob"], log_prob=log_prob, advantages=mb["advantages"],
                response_mask=mb["mask"], loss_agg_mode="token-mean", config=configs[mode],
                rollout_is_weights=mb["is_weights"],
            )  # fmt: skip
            value.backward()

        return call

    r = args.repeats
    t = {
        "adv_grpo_s": _timeit(adv("grpo", algo["nomask"]), device, r),
        "adv_off_grpo_s": _timeit(adv("off_grpo", algo["nomask"]), device, r),
        "adv_off_grpo_masked_s": _timeit(adv("off_grpo", algo["mask"]), device, r),
        "loss_vanilla_s": _timeit(loss("vanilla"), device, r),
        "loss_off_grpo_s": _timeit(loss("off_grpo"), device, r),
    }
    calls = -(-args.seqs // micro) * args.epochs
    extra = max(t["adv_off_grpo_masked_s"], t["adv_off_grpo_s"]) - t["adv_grpo_s"]
    extra += calls * (t["loss_off_grpo_s"] - t["loss_vanilla_s"])
    return {**t, "loss_calls_per_step": calls, "extra_s_per_step": extra}


def step_time_from(path: str | None, model: str | None) -> float | None:
    if not path or not Path(path).exists():
        return None
    rows = json.loads(Path(path).read_text()).get("rows", [])
    rows = [r for r in rows if r.get("v") == 1 and r.get("step_time_s") and (model is None or r["model"] == model)]
    return min(r["step_time_s"] for r in rows) if rows else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seqs", type=int, default=64, help="sequences per step (prompts × samples)")
    p.add_argument("--group", type=int, default=4, help="samples per prompt")
    p.add_argument("--response-length", type=int, default=256)
    p.add_argument("--micro", type=int, default=16, help="sequences per micro-batch")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--step-time-s", type=float, default=None)
    p.add_argument("--throughput", default=None, help="throughput.json: fastest v=1 step of --model")
    p.add_argument("--model", default=None)
    args = p.parse_args(argv)

    result = {"device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
              "shape": {k: getattr(args, k) for k in ("seqs", "group", "response_length", "micro", "epochs")},
              **measure(args)}  # fmt: skip
    step = args.step_time_s or step_time_from(args.throughput, args.model)
    result["step_time_s"] = step
    result["overhead_fraction_of_step"] = result["extra_s_per_step"] / step if step else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plugin_overhead.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
