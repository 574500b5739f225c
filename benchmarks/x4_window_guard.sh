#!/usr/bin/env bash
# One nvidia-h100-x4 lease, two experiments side by side (lab launcher; run from the repo root after
# staging the packs with --with-smollm2 and carrying the GSM8K jsonl as .gpu/gsm8k):
#
#   GPUs 0, 1   window_speed.py: on-policy v=1 (per_step) vs rollout_schedule=window at v=10, one GPU each
#   GPUs 2, 3   guard_faults_gpu.py: the exact served-weights check under injected faults
#                 SmolLM2 TP=1 on GPU 2 (honest 100 steps, level2, perturb, noise)
#                 the Qwen2.5-1.5B shape (random init) TP=2 on GPUs 2+3 (honest, level2, perturb on the
#                 last TP rank; SmolLM2 cannot: 9 attention heads)
#                 the Qwen2.5-1.5B shape TP=1: honest on GPU 2, perturb on GPU 3
#
# Each runs detached (benchmarks/detach.sh) with its own budget; the starts are staggered so that the
# Ray clusters and vLLM engines pick their ports apart. Poll with `bash benchmarks/detach.sh wait DIR S`;
# collect with `bash benchmarks/x4_window_guard.sh collect $OUT`.
set -euo pipefail
BUDGET=${BUDGET:-1140}
dirs=(/tmp/x4ws /tmp/x4g1 /tmp/x4g2 /tmp/x4g3)
if [ "${1:-start}" = collect ]; then
  out=${2:?OUT}
  for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    n=$(basename "$d")
    cp "$d/log" "$out/$n.console.log" 2>/dev/null || true
    tar -czf "$out/$n.tgz" -C "$d" out work/logs 2>/dev/null || tar -czf "$out/$n.tgz" -C "$d" out 2>/dev/null || true
  done
  ls -la "$out"
  exit 0
fi
d=benchmarks/detach.sh
bash $d start /tmp/x4ws -- python3 benchmarks/window_speed.py --out /tmp/x4ws/out --work /tmp/x4ws/work \
  --gsm8k .gpu/gsm8k --gpus 0,1 --jobs v1=step:1,w10=window:10 --steps 60 --budget-s "$BUDGET"
sleep 5
bash $d start /tmp/x4g1 -- python3 benchmarks/guard_faults_gpu.py --out /tmp/x4g1/out --work /tmp/x4g1/work \
  --runs honest,level2,perturb,noise --gpus 2,2,2,2 --honest-steps 100 --budget-s $((BUDGET - 20))
sleep 20
bash $d start /tmp/x4g2 -- python3 benchmarks/guard_faults_gpu.py --out /tmp/x4g2/out --work /tmp/x4g2/work \
  --shape qwen2.5-1.5b --tp 2 --runs honest,level2,perturb --gpus '2,3;2,3;2,3' --honest-steps 30 --stagger-s 30 \
  --budget-s $((BUDGET - 40))
sleep 10
bash $d start /tmp/x4g3 -- python3 benchmarks/guard_faults_gpu.py --out /tmp/x4g3/out --work /tmp/x4g3/work \
  --shape qwen2.5-1.5b --runs honest,perturb --gpus 2,3 --honest-steps 40 --budget-s $((BUDGET - 50))
nvidia-smi -L
