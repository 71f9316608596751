# LoRA SFT on GSM8K under torchrun. Usage: sft_peft.sh GPUS SAVE_DIR [more key=value overrides]

set -x
if [ "$#" -lt 2 ]; then
    echo "need GPUS and SAVE_DIR" >&2
    exit 1
fi

gpus=$1
save_dir=$2
shift 2  # what is left goes to the trainer ($@ below)

torchrun --standalone --nnodes=1 --nproc_per_node=$gpus \
     -m verl.trainer.fsdp_sft_trainer \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    data.prompt_key=extra_info \
    data.response_key=extra_info \
    data.prompt_dict_keys=['question'] \
    +data.response_dict_keys=['answer'] \
    data.micro_batch_size_per_gpu=4 \
    model.partial_pretrain=/models/qwen2.5-0.5b-instruct \
    model.lora_rank=32\
    model.lora_alpha=16 \
    optim.lr=1e-4 \
    trainer.default_local_dir=$save_dir \
    trainer.project_name=gsm8k-sft \
    trainer.experiment_name=qwen05b-lora \
    trainer.logger=['console'] \
    trainer.total_epochs=2 \
    trainer.default_hdfs_dir=null $@ \
    model.target_modules=all-linear

    # model.target_modules=[q_proj,v_proj] \
