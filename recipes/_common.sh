# Shared part of the recipes: sourced by each recipes/*.sh, not run on its own.
#
# A recipe is a thin layer over the shipped yaml (verl_offgrpo/config/off_grpo_trainer.yaml):
#
#   python3 -m verl.trainer.main_ppo --config-path <that dir> --config-name off_grpo_trainer \
#       <shared settings below> <task settings> <recipe knobs> <your overrides> <your hydra flags>
#
# Later overrides win, so `bash recipes/X.sh trainer.n_gpus_per_node=4` changes anything,
# `bash recipes/X.sh --check` composes the config and runs verl's and the plugin's startup checks on a
# CPU (`python -m verl_offgrpo compose`, no training; it notes data files and a model path that do not
# exist here), and `--cfg job` prints hydra's composition only.
#
# Environment: PYTHON (default python3), MODEL_PATH, DATA_DIR (+ AIME24_DIR, MATH500_DIR for
# DeepScaleR), N_GPUS_PER_NODE (8), NNODES (1), LOGGER ("[console]"; e.g. "[console,wandb]").
#
# Settings: the paper's experimental details were not available to us offline, so the values below
# are verl's GRPO example defaults (examples/grpo_trainer/run_qwen2-7b.sh: lr 1e-6, KL loss
# β = 0.001 low_var_kl, ε = 0.2 = verl's clip_ratio_low/high default, batch 1024 / mini-batch 256, n = 5,
# 15 epochs) for GSM8K, and DeepScaleR's 8K-context stage for DeepScaleR (batch 128 / mini 64,
# n = 8, 8K responses, temperature 0.6). Only v, i and the zero-variance mask differ between the
# recipes of one task. Correct them here if you know the paper's numbers.
set -euo pipefail

PYTHON=${PYTHON:-python3}
OFFGRPO_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)

# `--check`'s note on a missing data file: the data_prep command that makes it (and the variable to set).
# prep_hint <path> <script> <dir> <variable>
prep_hint() {
    local script=data_prep/$2
    [[ $(pwd -P) == "$OFFGRPO_REPO" ]] || script=$OFFGRPO_REPO/$script
    PATH_HINTS+=(--path-hint "$1" "make it with python $(printf %q "$script") --output-dir $(printf %q "$3"), or set $4")
}

# One line, not a traceback, where $PYTHON cannot run the plugin (another interpreter, a venv not activated);
# find_spec only, no import.
require_plugin_python() {
    local out missing
    if ! out=$("$PYTHON" -c 'import importlib.util as u; print("missing:" + " ".join(n for n in ("verl_offgrpo", "verl", "hydra") if u.find_spec(n) is None))' 2>&1); then
        echo "recipes: PYTHON=$PYTHON does not run ($(printf '%s\n' "$out" | tail -n 1)): set PYTHON to the interpreter that has verl-offgrpo" >&2
        exit 1
    fi
    missing=$(printf '%s\n' "$out" | sed -n 's/^missing://p' | tail -n 1)
    if [[ -n $missing ]]; then
        echo "recipes: PYTHON=$PYTHON lacks $missing: install verl-offgrpo there, or set PYTHON to the interpreter that has it" >&2
        exit 1
    fi
}

# Directory of the shipped yaml: `python -m verl_offgrpo config-dir`, or computed from the package.
offgrpo_config_dir() {
    local dir
    if dir=$("$PYTHON" -m verl_offgrpo config-dir 2>/dev/null) && [[ -f "$dir/off_grpo_trainer.yaml" ]]; then
        echo "$dir"
    else
        "$PYTHON" -c 'import os, verl_offgrpo; print(os.path.join(os.path.dirname(verl_offgrpo.__file__), "config"))'
    fi
}

# Shared by every recipe (the estimator and loss, off_grpo, come from the yaml itself).
SHARED_ARGS=(
    actor_rollout_ref.actor.clip_ratio_low=0.2            # ε per side (verl reads these; clip_ratio is
    actor_rollout_ref.actor.clip_ratio_high=0.2           # only their fallback when they are null)
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001            # β
    actor_rollout_ref.actor.kl_loss_type=low_var_kl
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.optim.lr=1e-6
    algorithm.use_kl_in_reward=False
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.ref.fsdp_config.param_offload=True
    data.filter_overlong_prompts=True
    data.truncation=error
    trainer.critic_warmup=0
    trainer.project_name=verl_offgrpo
    "trainer.logger=${LOGGER:-[console]}"
    "trainer.n_gpus_per_node=${N_GPUS_PER_NODE:-8}"
    "trainer.nnodes=${NNODES:-1}"
)

# A path as the shell would expand it: a leading ~ (a quoted DATA_DIR='~/data/gsm8k' keeps it) is $HOME; verl
# reads paths as written, and hydra's override grammar refuses a bare ~.
home_path() { local p=$1; printf '%s' "${p/#\~/$HOME}"; }

# GSM8K with Qwen2.5-0.5B-Instruct; data from data_prep/gsm8k.py; verl's built-in GSM8K scorer.
gsm8k_task() {
    local data; data=$(home_path "${DATA_DIR:-$HOME/data/gsm8k}")
    PATH_HINTS=()
    prep_hint "$data/train.parquet" gsm8k.py "$data" DATA_DIR
    prep_hint "$data/test.parquet" gsm8k.py "$data" DATA_DIR
    TASK_ARGS=(
        "actor_rollout_ref.model.path=$(home_path "${MODEL_PATH:-Qwen/Qwen2.5-0.5B-Instruct}")"
        "data.train_files=$data/train.parquet"
        "data.val_files=$data/test.parquet"
        data.train_batch_size=1024
        data.max_prompt_length=512
        data.max_response_length=1024
        actor_rollout_ref.actor.ppo_mini_batch_size=256
        actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32
        actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32
        actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32
        actor_rollout_ref.rollout.gpu_memory_utilization=0.6
        actor_rollout_ref.rollout.n=5
        trainer.total_epochs=15
        trainer.test_freq=10
        trainer.save_freq=-1
    )
}

# DeepScaleR with DeepSeek-R1-Distill-Qwen-1.5B; data from data_prep/{deepscaler,aime24,math500}.py;
# validation on AIME24 + MATH-500; math-verify reward from verl_offgrpo.rewards.
deepscaler_task() {
    local data aime math500
    data=$(home_path "${DATA_DIR:-$HOME/data/deepscaler}") aime=$(home_path "${AIME24_DIR:-$HOME/data/aime24}")
    math500=$(home_path "${MATH500_DIR:-$HOME/data/math500}")
    PATH_HINTS=()
    prep_hint "$data/train.parquet" deepscaler.py "$data" DATA_DIR
    prep_hint "$aime/test.parquet" aime24.py "$aime" AIME24_DIR
    prep_hint "$math500/test.parquet" math500.py "$math500" MATH500_DIR
    TASK_ARGS=(
        "actor_rollout_ref.model.path=$(home_path "${MODEL_PATH:-deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B}")"
        "data.train_files=$data/train.parquet"
        "data.val_files=[$aime/test.parquet,$math500/test.parquet]"
        reward.custom_reward_function.path=pkg://verl_offgrpo.rewards
        reward.custom_reward_function.name=compute_score
        +reward.custom_reward_function.reward_kwargs.require_think_end=true
        data.train_batch_size=128
        data.max_prompt_length=1024
        data.max_response_length=8192
        actor_rollout_ref.actor.ppo_mini_batch_size=64
        actor_rollout_ref.actor.use_dynamic_bsz=True
        actor_rollout_ref.actor.ppo_max_token_len_per_gpu=32768
        actor_rollout_ref.rollout.gpu_memory_utilization=0.85
        actor_rollout_ref.rollout.n=8
        actor_rollout_ref.rollout.temperature=0.6
        actor_rollout_ref.rollout.val_kwargs.n=8
        actor_rollout_ref.rollout.val_kwargs.do_sample=True
        actor_rollout_ref.rollout.val_kwargs.temperature=0.6
        actor_rollout_ref.rollout.val_kwargs.top_p=0.95
        trainer.total_epochs=30
        trainer.test_freq=20
        trainer.save_freq=-1
    )
}

# offgrpo_run <task> <recipe overrides...> -- <user args...>
# The user's hydra flags (--cfg job, --info, ...) go last: hydra takes overrides only before them.
offgrpo_run() {
    local task=$1
    shift
    "${task}_task"
    local recipe=() user=() flags=() check=0
    while (($#)) && [[ $1 != -- ]]; do recipe+=("$1"); shift; done
    (($#)) && shift
    while (($#)); do
        case $1 in
            --check) check=1; shift ;;
            --cfg | -c | --package | -p | --config-dir | -cd | --experimental-rerun)
                flags+=("$1" "${2:-}"); shift $(($# > 1 ? 2 : 1)) ;;
            -*) flags+=("$1"); shift ;;
            *) user+=("$1"); shift ;;
        esac
    done
    if ((check)); then
        local compose=("$PYTHON" -m verl_offgrpo compose "${PATH_HINTS[@]}" "${SHARED_ARGS[@]}" "${TASK_ARGS[@]}" "${recipe[@]}" "${user[@]}")
        if ((${#flags[@]} == 2)) && [[ ${flags[0]} == --cfg || ${flags[0]} == -c ]] && [[ ${flags[1]} == job ]]; then
            require_plugin_python
            exec "${compose[@]}"  # the checked config's yaml on stdout
        elif ((${#flags[@]})); then
            echo "recipes: --check takes hydra overrides only (and --cfg job, to print the checked config); ${flags[*]} is main_ppo's: leave --check out" >&2
            exit 64
        fi
        require_plugin_python
        exec "${compose[@]}" >/dev/null
    fi
    require_plugin_python
    local config_dir
    config_dir=$(offgrpo_config_dir)
    exec "$PYTHON" -m verl.trainer.main_ppo --config-path "$config_dir" --config-name off_grpo_trainer \
        "${SHARED_ARGS[@]}" "${TASK_ARGS[@]}" "${recipe[@]}" "${user[@]}" "${flags[@]}"
}
