#!/usr/bin/env bash
# PPO on the Megatron engine through the config name older verl scripts give; an estimator verl's PPO trainer runs.
set -x
python3 -m verl.trainer.main_ppo \
    --config-path=config \
    --config-name='ppo_megatron_trainer.yaml' \
    algorithm.adv_estimator=rloo \
    data.train_files=/shared/data/gsm8k/train.parquet \
    actor_rollout_ref.model.path=/models/qwen3-8b \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.name=vllm \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=1
