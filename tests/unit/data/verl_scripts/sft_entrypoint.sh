#!/usr/bin/env bash
# SFT whose module and engine settings come from variables with defaults, as verl's VLM SFT example launches it.
set -xeuo pipefail

ENTRYPOINT=${ENTRYPOINT:-"-m verl.trainer.sft_trainer"}
backend=${BACKEND:-fsdp}
ENGINE_CONFIG="\
    engine=${backend} \
    optim=${backend} \
    optim.lr=2e-5 \
    optim.betas="[0.9,0.95]""

if [ "$backend" = "fsdp" ]; then
    exp_name=sft-${backend}-$((2 * 4))
else
    exp_name=sft-megatron
fi

torchrun --standalone --nnodes=1 --nproc-per-node=${NUM_TRAINERS:-8} \
    ${ENTRYPOINT} \
    data.train_files=/shared/data/sft/train.parquet \
    model=hf_model \
    model.path=/models/qwen3-vl-2b \
    ${ENGINE_CONFIG} \
    trainer.experiment_name="${exp_name}" \
    trainer.total_epochs=2
