# PPO on GSM8K with a critic (GAE advantages): one trainer command, the hydra overrides one a line.
set -x

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=gae \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    data.train_batch_size=512 \
    data.max_prompt_length=512 \
    data.max_response_length=256 \
    data.truncation='error' \
    actor_rollout_ref.model.path=/models/qwen2.5-0.5b-instruct \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=128 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    critic.model.path=/models/qwen2.5-0.5b-instruct \
    critic.optim.lr=1e-5 \
    critic.ppo_micro_batch_size_per_gpu=8 \
    critic.model.fsdp_config.param_offload=False \
    critic.model.fsdp_config.optimizer_offload=False \
    reward.custom_reward_function.path=/shared/rewards/gsm8k.py \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger=['console','wandb'] \
    trainer.project_name='gsm8k_ppo' \
    trainer.experiment_name="qwen05b_gae" \
    trainer.n_gpus_per_node=8 \
    trainer.nnodes=2 \
    trainer.save_freq=20 \
    trainer.total_training_steps=100 \
    trainer.use_legacy_worker_impl=False \
    trainer.total_epochs=3 $@  # the script's own arguments go last

    # trainer.test_freq=5 \
    # trainer.val_before_train=False \
