#!/usr/bin/env bash
# Create or update a venv with verl 0.9.1 for CPU-only SFT.
#   scripts/install_verl.sh VENV_DIR
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
"$venv/bin/python" -c 'import torch, verl, ray, transformers; print("torch", torch.__version__, "verl", verl.__version__, "ray", ray.__version__, "transformers", transformers.__version__)'
echo "install took $(( $(date +%s) - start )) s"
du -sh "$venv"
