# Shared by the launcher tests (sourced): the arguments, a work folder removed at the end, a
# free port, and a comparison of two final modules' parameters with PyTorch.
#   TORCHRUN EXAMPLE CNN.pt
set -euo pipefail
torchrun=$1 example=$2 cnn=$3
python=$(dirname "$torchrun")/python
work=$(mktemp -d "${TMPDIR:-/tmp}/koila-launcher-XXXXXX")
cleanup_hooks=()
cleanup() {
  local hook
  for hook in "${cleanup_hooks[@]}"; do eval "$hook" || true; done
  rm -rf "$work"
}
trap cleanup EXIT
[[ -n ${KOILA_KEEP_WORK:-} ]] && trap - EXIT

free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The final parameters of two runs (final.pt in each folder), as PyTorch loads them: equal
# within `tolerance` of each parameter's largest magnitude.
compare_final() {
  local a=$1 b=$2 tolerance=$3
  "$python" - "$a/final.pt" "$b/final.pt" "$tolerance" <<'PY'
import sys, warnings
warnings.simplefilter("ignore")
import torch
a, b = (dict(torch.jit.load(p).named_parameters()) for p in sys.argv[1:3])
tolerance = float(sys.argv[3])
worst = 0.0
for name, x in a.items():
    y = b[name]
    scale = max(x.abs().max().item(), 1e-6)
    worst = max(worst, (x - y).abs().max().item() / scale)
print(f"largest difference of {len(a)} parameters: {worst:.3g} of their largest magnitude")
sys.exit(0 if worst <= tolerance else 1)
PY
}

checksum() { grep -ho 'rank 0 finished.*fnv1a [0-9a-f]*' "$1" | grep -o '[0-9a-f]*$'; }
