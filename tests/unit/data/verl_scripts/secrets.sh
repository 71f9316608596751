#!/usr/bin/env bash
# Logs in with its secrets and hands one to the trainer: no value of them may reach the spec or the report.
export WANDB_API_KEY=wandb-secret-0123456789
HF_TOKEN=hf_secret_0123456789
wandb login $WANDB_API_KEY
wandb login wandb-literal-0123456789
curl -H "Authorization: Bearer bearer-secret-0123456789" https://example.invalid/check
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    actor_rollout_ref.model.path=/models/qwen3-8b \
    data.train_files=/shared/data/gsm8k/train.parquet \
    +trainer.wandb_key=$WANDB_API_KEY \
    +data.hf_token="$HF_TOKEN" \
    actor_rollout_ref.rollout.name=vllm
