#!/usr/bin/env bash
# Installs PyTorch 2.14.1 (its CUDA 13.0 build, which also runs on a machine without a GPU)
# and torchvision 0.29.1 into a virtual environment outside the clone, for koila's second
# build configuration (LibTorch 2.x with CUDA and NCCL compiled in). Idempotent: a venv that
# already imports these versions is kept. Prints nothing but progress; the venv is at
#   ${KOILA_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/koila/venv-torch-2.14.1}
# pip on Python 3.11 takes both wheels (about 5.5 GB installed) from the machine's disk
# where they lie there; elsewhere it downloads them.
set -euo pipefail
torch_version=2.14.1
vision_version=0.29.1
venv=${KOILA_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/koila/venv-torch-$torch_version}

have() {
  [[ -x $venv/bin/python ]] &&
    "$venv/bin/python" - "$torch_version" "$vision_version" 2>/dev/null <<'PY'
import sys, torch, torchvision
ok = torch.__version__.split("+")[0] == sys.argv[1] and torchvision.__version__.split("+")[0] == sys.argv[2]
sys.exit(0 if ok else 1)
PY
}

if have; then
  exit 0
fi
python=$(command -v python3.11 || command -v python3)
echo "setup_torch2: installing torch==$torch_version torchvision==$vision_version into $venv (with $python)"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "torch==$torch_version" "torchvision==$vision_version" 2>&1 |
  grep -v "^WARNING: Location .* is ignored" || true
have || { echo "setup_torch2: $venv cannot import torch $torch_version and torchvision $vision_version" >&2; exit 1; }
