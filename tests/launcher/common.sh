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
  "$python" "$(dirname "${BASH_SOURCE[0]}")/compare_final.py" "$1/final.pt" "$2/final.pt" "$3"
}

checksum() { grep -ho 'rank 0 finished.*fnv1a [0-9a-f]*' "$1" | grep -o '[0-9a-f]*$'; }
