#!/usr/bin/env bash
# GRPO with its overrides in arrays, the way verl's v0.9 examples pass them. Knobs: DEVICE (gpu|npu), ROLLOUT_N.
set -xeuo pipefail

# DEVICE is probed by running Python: the importer never runs it, so what depends on it stays for you to settle.
DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}
MODEL_PATH=${MODEL_PATH:-/models/qwen3-8b}
NNODES=${NNODES:-2}
BACKEND=vllm
max_prompt_length=$((1024 * 2))
max_response_length=$((1024 * 4))
ppo_max_token_len_per_gpu=$(( (max_prompt_length + max_response_length) * 2 ))
rollout_n=${ROLLOUT_N:-5}

DATA=(
    # the estimator sits in this array: it's what makes this GRPO (an apostrophe in a comment opens no quote)
    algorithm.adv_estimator=grpo
    data.train_files=/shared/data/gsm8k/train.parquet
    data.max_prompt_length=${max_prompt_length}
    data.max_response_length=${max_response_length}
)
MODEL=( actor_rollout_ref.model.path="$MODEL_PATH" )
ROLLOUT=(
    actor_rollout_ref.rollout.name=${BACKEND}
    actor_rollout_ref.rollout.n=${rollout_n}
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=${ppo_max_token_len_per_gpu}
)
if [ "${BACKEND}" = sglang ]; then
    ROLLOUT+=(actor_rollout_ref.rollout.mode=async)
fi
[ "$NNODES" -gt 1 ] && ROLLOUT+=(trainer.balance_batch=True) || ROLLOUT+=(trainer.balance_batch=False)
case "${DEVICE}" in
    npu)
        ROLLOUT+=(actor_rollout_ref.rollout.gpu_memory_utilization=0.9)
        GPUS=16
        ;;
    *)
        GPUS=8
        ;;
esac
TRAINER=(
    trainer.logger='["console","wandb"]'
    trainer.project_name=gsm8k_grpo
    trainer.nnodes=${NNODES}
    trainer.n_gpus_per_node=${GPUS}
)
TAGS=(one two)
TAGS+=(three)

python3 -m verl.trainer.main_ppo \
    "${DATA[@]}" \
    "${MODEL[@]}" \
    "${ROLLOUT[@]}" \
    "${TRAINER[@]}" \
    +trainer.tags="'${TAGS[*]}'" \
    "$@"
