# SFT first, then GRPO from the SFT model: two trainer commands.
MODEL=/models/qwen2.5-0.5b-instruct
python3 -m verl.trainer.sft_trainer_ray model.path=$MODEL data.train_files=/data/sft.parquet trainer.total_epochs=1
python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo actor_rollout_ref.model.path=/ckpt/sft \
    data.train_files=/data/rl.parquet actor_rollout_ref.rollout.n=4
