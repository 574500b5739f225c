#!/usr/bin/env python3
"""GPU end-to-end check of the lagged weight sync (verl 0.9.1 + vLLM, one GPU, < 9 minutes).

Runs verl's real ``python3 -m verl.trainer.main_ppo`` with the plugin's yaml (``off_grpo_trainer``)
on a tiny random-init Qwen2 model built here (hidden 256, 4 layers, byte-level BPE tokenizer trained
with ``tokenizers``, chat template) and a synthetic verifiable task ("repeat the digit d"; reward =
fraction of response characters equal to d, so a random model gets a graded reward and learns):

* ``v1`` trainer (``trainer.v1.trainer_mode=off_grpo_sync``) with sync_period=4,
* ``v0`` trainer (``trainer.use_v1=false`` + ``LaggedCheckpointManager``) with sync_period=4,
* ``v1`` with sync_period=1 (on-policy control).

Each run logs with verl's ``file`` logger (jsonl; ``VERL_FILE_LOGGER_PATH``), falling back to the
console lines. Writes ``OUT/sync_e2e.json``::

    {"runs": [{"trainer", "sync_period", "device", "verl", "vllm", "returncode", "wall_s",
               "steps": [{"step", "synced", "lag", "rollout_lag", "sync_time_s", "step_time_s",
                          "mean_abs_log_rprime", "staleness", "rollout_corr_kl", "reward",
                          "response_length"}, ...],
               "checks": {...}}, ...],
     "ok": bool}

``lag`` = ``off_grpo/lag`` (age of the weights in vLLM after the step's sync slot, 0 right after a
sync); ``rollout_lag`` = ``off_grpo/rollout_lag`` (age of the weights that sampled this step's batch,
relative to π_k of this step). ``mean_abs_log_rprime`` = the loss's ``off_grpo/mean_abs_log_rprime``
(|log π_k/α| per token). The checks prove the lagged steps serve α, not garbage: everything finite,
the expected sync steps, |log r'| small at rollout_lag 0 and larger (and growing) with rollout lag,
responses not degenerate (garbage = token 0 forever = always max length with a huge |log r'|).

Usage on the GPU machine (after staging verl/vLLM, see ../shared/gpu/README.md); one run per
10-minute command (a run takes 4–6 minutes, most of it verl/vLLM start-up)::

    python3 benchmarks/sync_e2e.py --out benchmarks/results --steps 12 --runs v1:4 --merge benchmarks/results/sync_e2e.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from mainppo_job import EXIT_HANG, REPO, job_timeout, pick, read_merge, read_metrics, run_main_ppo, versions  # noqa: E402

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
DATA_SOURCE = "synthetic/repeat_digit"
#: a ground truth that no response character equals (it is longer than one character): the reward below
#: is exactly 0.0 for every response, so every group of such prompts is all-equal
NO_DIGIT = "none"

REWARD_SRC = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Fraction of non-space response characters equal to the digit (graded, verifiable)."""
    chars = [c for c in str(solution_str) if not c.isspace()]
    if not chars:
        return 0.0
    return sum(c == str(ground_truth) for c in chars) / len(chars)
'''


# ----------------------------------------------------------------------------- model + data
def corpus(n=4000, seed=0):
    rng = random.Random(seed)
    words = "repeat the digit as many times as you can write number answer please".split()
    for _ in range(n):
        d = rng.randrange(10)
        yield f"<|im_start|>user\nRepeat the digit {d} as many times as you can.<|im_end|>\n<|im_start|>assistant\n"
        yield " ".join(rng.choice(words) for _ in range(8)) + " " + str(d) * rng.randrange(1, 12)
        yield "".join(str(rng.randrange(10)) for _ in range(rng.randrange(1, 20)))


def build_tokenizer(model_dir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    model_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(model_dir / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "unk_token": None,
        "model_max_length": 512,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (model_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    (model_dir / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
    )
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = hf_tok.apply_chat_template(
        [{"role": "user", "content": "Repeat the digit 3."}], add_generation_prompt=True, tokenize=True
    )
    if hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
        ids = ids["input_ids"]
    assert len(ids) > 3 and hf_tok.eos_token_id == tok.token_to_id("<|im_end|>"), (ids, hf_tok.eos_token_id)
    assert hf_tok.pad_token_id == tok.token_to_id("<|endoftext|>")
    return hf_tok


def build_model(model_dir: Path, seed=0):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    hf_tok = build_tokenizer(model_dir)
    vocab = ((len(hf_tok) + 63) // 64) * 64
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=hf_tok.pad_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(model_dir), safe_serialization=True)
    GenerationConfig(
        eos_token_id=hf_tok.eos_token_id, pad_token_id=hf_tok.pad_token_id, bos_token_id=hf_tok.pad_token_id
    ).save_pretrained(str(model_dir))
    return model_dir


def build_data(data_dir: Path, n_train=1024, n_val=32, seed=0, constant_from: int | None = None):
    """``train.parquet``, ``val.parquet`` (in this order, row i = ``extra_info.index`` i) and ``reward.py``.
    With ``constant_from``, train rows from that index on get the ground truth :data:`NO_DIGIT` (reward
    0.0 for any response); the prompts and the rows before it are the same as without it."""
    import pandas as pd

    rng = random.Random(seed)
    data_dir.mkdir(parents=True, exist_ok=True)

    def rows(n, split):
        out = []
        for i in range(n):
            d = rng.randrange(10)
            constant = split == "train" and constant_from is not None and i >= constant_from
            out.append(
                {
                    "data_source": DATA_SOURCE,
                    "prompt": [{"role": "user", "content": f"Repeat the digit {d} as many times as you can."}],
                    "ability": "synthetic",
                    "reward_model": {"style": "rule", "ground_truth": NO_DIGIT if constant else str(d)},
                    "extra_info": {"split": split, "index": i},
                }
            )
        return out

    pd.DataFrame(rows(n_train, "train")).to_parquet(data_dir / "train.parquet")
    pd.DataFrame(rows(n_val, "test")).to_parquet(data_dir / "val.parquet")
    (data_dir / "reward.py").write_text(REWARD_SRC)
    return data_dir


# ----------------------------------------------------------------------------- runs
def overrides(trainer: str, period: int, model_dir: Path, data_dir: Path, steps: int, lr: float, name: str):
    ov = [
        f"algorithm.off_grpo.sync_period={period}",
        # the lagged per-step sync every committed run measured: the knob's default, auto, would make every
        # v > 1 job on the V1 trainer a window; window jobs (window_speed, learning's window_v10) set it
        "algorithm.off_grpo.rollout_schedule=per_step",
        # vLLM's output kind pinned to what every committed run had: the knob's default, auto, would turn it
        # on in the plugin's jobs but not in a plain verl job beside them (bigbatch). An A/B sets it by --extra
        "algorithm.off_grpo.final_outputs_only=false",
        f"data.train_files={data_dir / 'train.parquet'}",
        f"data.val_files={data_dir / 'val.parquet'}",
        "data.train_batch_size=16",
        "data.max_prompt_length=64",
        "data.max_response_length=32",
        "data.dataloader_num_workers=0",
        f"reward.custom_reward_function.path={data_dir / 'reward.py'}",
        "reward.custom_reward_function.name=compute_score",
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        f"actor_rollout_ref.actor.optim.lr={lr}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.rollout.enforce_eager=True",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}",
        "trainer.logger=[console,file]",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.project_name=offgrpo_sync_e2e",
        f"trainer.experiment_name={name}",
    ]
    if trainer == "v0":
        ov += [
            "trainer.use_v1=false",
            "+actor_rollout_ref.rollout.checkpoint_manager_class="
            "verl_offgrpo.sync.lagged_manager.LaggedCheckpointManager",
        ]
    return ov


def logged_steps(metrics: dict[int, dict]):
    """``(step, metrics row)`` of the training steps in order (rows without a step's metrics are left out)."""
    for step in sorted(s for s in metrics if s >= 1):
        row = metrics[step]
        if "off_grpo/synced" in row or "timing_s/step" in row:
            yield step, row


def step_rows(metrics: dict[int, dict]) -> list[dict]:
    out = []
    for step, row in logged_steps(metrics):
        out.append(
            {
                "step": step,
                "synced": pick(row, "off_grpo/synced"),
                "lag": pick(row, "off_grpo/lag"),
                "rollout_lag": pick(row, "off_grpo/rollout_lag"),
                "sync_time_s": pick(row, "timing_s/off_grpo_sync"),
                "update_weights_s": pick(row, "timing_s/update_weights"),
                "step_time_s": pick(row, "timing_s/step"),
                "mean_abs_log_rprime": pick(row, suffix="off_grpo/mean_abs_log_rprime"),
                "staleness": pick(row, "training/off_policy/trajectory_staleness/mean"),
                "rollout_corr_kl": pick(row, "rollout_corr/kl"),
                "rollout_probs_diff_mean": pick(row, "training/rollout_probs_diff_mean"),
                "reward": pick(row, "critic/score/mean", "critic/rewards/mean"),
                "response_length": pick(row, "response_length/mean"),
                "response_clip_ratio": pick(row, "response_length/clip_ratio"),
            }
        )
    return out


def finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def expected_schedule(steps: int, v: int) -> tuple[list[float], list[float]]:
    """The logged ``off_grpo/synced`` and ``off_grpo/rollout_lag`` of steps 1..steps at sync period v:
    step s syncs (at its end) iff s % v == 0, and its batch was sampled (s − 1) % v steps before π_k."""
    steps_ = range(1, steps + 1)
    return [float(s % v == 0) for s in steps_], [float((s - 1) % v) for s in steps_]


def check_run(run: dict, steps: int) -> dict:
    rows, v = run["steps"], run["sync_period"]
    checks: dict = {}
    checks["completed"] = run["returncode"] in (0, EXIT_HANG) and len(rows) >= steps
    expected_synced, expected_rollout_lag = expected_schedule(steps, v)
    checks["sync_schedule"] = [r["synced"] for r in rows[:steps]] == expected_synced
    checks["rollout_lag_schedule"] = [r["rollout_lag"] for r in rows[:steps]] == expected_rollout_lag
    rp = [r["mean_abs_log_rprime"] for r in rows]
    checks["rprime_finite"] = bool(rp) and all(finite(x) for x in rp)
    if run["trainer"] == "v1":
        checks["staleness_matches"] = all(
            r["staleness"] is None or abs(r["staleness"] - r["rollout_lag"]) < 1e-6 for r in rows
        )
    by_lag: dict[int, list[float]] = {}
    for r in rows:
        if finite(r["mean_abs_log_rprime"]) and r["rollout_lag"] is not None:
            by_lag.setdefault(int(r["rollout_lag"]), []).append(r["mean_abs_log_rprime"])
    means = {lag: sum(xs) / len(xs) for lag, xs in sorted(by_lag.items())}
    checks["mean_abs_log_rprime_by_rollout_lag"] = means
    if means:
        checks["lag0_small"] = means.get(0, float("inf")) < 0.1
    if v > 1 and len(means) > 1:
        lags = sorted(means)
        checks["grows_with_lag"] = means[lags[-1]] > means[lags[0]] and all(
            means[b] >= 0.8 * means[a] for a, b in zip(lags, lags[1:])
        )
        checks["lagged_not_garbage"] = max(means.values()) < 5.0
    clip = [r["response_clip_ratio"] for r in rows if finite(r["response_clip_ratio"])]
    # informational (not part of "ok"): garbage (token 0 forever) never stops, so this stays 1.0
    checks["min_response_clip_ratio"] = min(clip) if clip else None
    checks["ok"] = all(val for key, val in checks.items() if isinstance(val, bool))
    return checks


def run_one(trainer, period, args, model_dir, data_dir, log_dir, deadline, info):
    name = f"{trainer}_v{period}"
    job = [*overrides(trainer, period, model_dir, data_dir, args.steps, args.lr, name), *args.extra]
    # the budget's end is the deadline itself here (the sync checks are written after every run)
    timeout = job_timeout(args.run_timeout, deadline, 0.0, time.time(), reserve_s=0.0, floor_s=30.0)
    start = time.time()
    rc, progress, _ = run_main_ppo(name, job, args.out, log_dir, timeout, args.steps, args.stall_s)
    console = log_dir / f"{name}.log"
    metrics, source = read_metrics(log_dir, name)
    run = {
        "trainer": trainer,
        "sync_period": period,
        "extra_overrides": list(args.extra),
        "device": info.get("device"),
        "verl": info.get("verl"),
        "vllm": info.get("vllm"),
        "returncode": rc,
        "wall_s": round(time.time() - start, 1),
        **progress,
        "metrics_source": "file" if source.endswith(".jsonl") else "console",
        "log": str(console),
        "steps": step_rows(metrics),
    }
    run["checks"] = check_run(run, args.steps)
    if rc != 0:
        run["log_tail"] = console.read_text(errors="replace")[-4000:]
    print(f"[sync_e2e] {name}: rc={rc} wall={run['wall_s']}s startup={progress['startup_s']}s "
          f"stalled={progress['stalled']} ok={run['checks']['ok']} "
          f"|log r'| by lag={run['checks'].get('mean_abs_log_rprime_by_rollout_lag')}", flush=True)  # fmt: skip
    return run


def prepare_work(out_arg: str, work_arg: str | None, default_name: str, **data_options) -> tuple[Path, Path, Path, Path]:
    """``(out, model_dir, data_dir, log_dir)`` of a run, with the tiny model and the task built
    (``data_options``: :func:`build_data`'s keywords)."""
    out = Path(out_arg).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(work_arg).resolve() if work_arg else out / default_name
    model_dir, data_dir, log_dir = work / "model", work / "data", work / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    if not (model_dir / "config.json").exists():
        build_model(model_dir)
    build_data(data_dir, **data_options)
    return out, model_dir, data_dir, log_dir


def run_key(run: dict) -> tuple:
    """What makes a sync_e2e run: its trainer and sync period."""
    return run["trainer"], run["sync_period"]


def merged_runs(earlier: dict, runs: list[dict], key=run_key) -> dict:
    """``runs`` with the runs of an ``earlier`` results file not re-run now (same ``key``: for sync_e2e.json
    the trainer and period), and the earlier file's other keys (its note); ``ok``, ``total_wall_s`` and
    ``versions`` are this command's."""
    rerun = {key(r) for r in runs}
    kept = {k: x for k, x in earlier.items() if k not in ("runs", "ok", "total_wall_s", "versions")}
    return {**kept, "runs": [r for r in earlier.get("runs", []) if key(r) not in rerun] + runs}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--runs", default="v1:4,v0:4,v1:1", help="comma list of trainer:sync_period")
    p.add_argument("--lr", type=float, default=1e-3, help="high so that π visibly moves between syncs")
    p.add_argument("--budget-s", type=float, default=580.0, help="total wall budget for all runs")
    p.add_argument("--run-timeout", type=float, default=540.0,
                   help="per run; V1 needs 200-300 s to its first step on the offline GPU machine")
    p.add_argument("--stall-s", type=float, default=120.0,
                   help="a run with no new step for this long (after its first) is stalled: dump stacks, kill")
    p.add_argument("--work", default=None, help="scratch dir for model/data/logs (default OUT/sync_e2e_work)")
    p.add_argument("--extra", nargs="*", default=[], help="extra hydra overrides for every run")
    p.add_argument("--merge", default=None,
                   help="an earlier sync_e2e.json: keep its runs except those re-run now (same trainer and period)")
    args = p.parse_args(argv)

    t0 = time.time()
    deadline = t0 + args.budget_s
    earlier = read_merge(args.merge) or {}  # before any GPU work
    out, model_dir, data_dir, log_dir = prepare_work(args.out, args.work, "sync_e2e_work")
    info = versions()
    print(f"[sync_e2e] built model/data in {time.time() - t0:.1f}s; {info}", flush=True)

    runs = []
    for spec in args.runs.split(","):
        trainer, period = spec.split(":")
        if time.time() > deadline - 30:
            runs.append({"trainer": trainer, "sync_period": int(period), "skipped": "out of time budget"})
            continue
        runs.append(run_one(trainer, int(period), args, model_dir, data_dir, log_dir, deadline, info))
        (out / "sync_e2e.json").write_text(json.dumps({"runs": runs}, indent=1, default=str))

    result = merged_runs(earlier, runs)
    result["ok"] = all(r.get("checks", {}).get("ok", False) for r in result["runs"])
    result.update(total_wall_s=round(time.time() - t0, 1), versions=info)
    (out / "sync_e2e.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"[sync_e2e] ok={result['ok']} total {result['total_wall_s']}s -> {out / 'sync_e2e.json'}", flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
