#!/usr/bin/env bash
# GRPO on GSM8K: several responses per prompt, the KL as a loss, no critic.
set -euo pipefail

export VLLM_ATTENTION_BACKEND=XFORMERS
export WANDB_API_KEY=not-a-real-key
MODEL=/models/qwen2-7b-instruct
DATA_DIR=/shared/data/gsm8k
N_RESPONSES=5
TAG="grpo-$(date +%Y%m%d)"

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files=${DATA_DIR}/test.parquet \
    data.train_batch_size=1024 \
    actor_rollout_ref.model.path=$MODEL \
    actor_rollout_ref.actor.ppo_mini_batch_size=256 \
    actor_rollout_ref.actor.ppo_micro_batch_size=128 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.fsdp_config.grad_offload=False \
    actor_rollout_ref.rollout.n=$N_RESPONSES \
    actor_rollout_ref.rollout.name=vllm \
    trainer.logger="['console']" \
    trainer.project_name=gsm8k-grpo \
    trainer.experiment_name=$TAG \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.total_epochs=15 2>&1 | tee grpo.log
