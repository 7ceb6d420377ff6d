#!/usr/bin/env bash
# bench_groups under torchrun (issue 52): a training step of the MLP 1024-1024-1024-10 (global
# batch 1024, uneven shards where it does not divide) with 1, 2 and 4 workers, on loopback and
# between two "machines" (network namespaces joined by a veth pair: needs root), koila's
# koila_group_backward against PyTorch's DDP (bench/groups_ddp.py, the same torch's Gloo). Prints
# a table: the slowest worker's median step (forward, backward and all-reduce), its local
# backward alone, and the all-reduce's share of the step ((step - local) / step).
#   bench/groups_scaling.sh BENCH_GROUPS TORCHRUN [batch] [repeats]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=$1 torchrun=$2 batch=${3:-1024} repeats=${4:-5}
python=$(dirname "$torchrun")/python
source "$root/scripts/netns_pair.sh"
trap netns_pair_remove EXIT
netns=no
if [[ $(id -u) == 0 ]] && netns_pair_create 2> /dev/null; then netns=yes; fi

# The slowest worker's figures from the workers' lines: "local STEP share".
summarize() { awk '/^worker/ { if ($6 > l) l = $6; if ($8 > s) s = $8 } END { printf "%.1f %.1f %.0f", l, s, 100 * (s - l) / s }'; }

# run WHO WHERE NODES PER_NODE: one configuration's figures.
run() {
  local who=$1 where=$2 nodes=$3 per=$4 port out node
  local -a program
  if [[ $who == koila ]]; then program=(--no-python "$bench" --worker "$batch" "$repeats"); else program=("$root/bench/groups_ddp.py" "$batch" "$repeats"); fi
  port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if [[ $where == loopback ]]; then
    timeout 600 "$torchrun" --nproc-per-node "$per" --master-port "$port" "${program[@]}" 2> /dev/null | summarize
  else
    out=$(mktemp)
    for node in 0 1; do
      local ns=$ns_a link=$link_a
      ((node == 1)) && ns=$ns_b link=$link_b
      # (PyTorch's Gloo takes the interface its hostname resolves to, not one in a namespace.)
      ip netns exec "$ns" env GLOO_SOCKET_IFNAME="$link" timeout 600 "$torchrun" --nnodes 2 --node-rank $node \
        --nproc-per-node "$per" --master-addr "$host_a" --master-port 29500 "${program[@]}" 2> /dev/null >> "$out" &
    done
    wait
    summarize < "$out"
    rm -f "$out"
  fi
}

echo "bench_groups under torchrun: MLP 1024-1024-1024-10, global batch $batch, median of $repeats steps;" \
     "$(nproc) CPU cores; $("$python" -c 'import torch; print("torch", torch.__version__)')"
printf '%-34s %10s %10s %8s %12s %12s %8s\n' "workers" "koila ms" "local ms" "comm %" "DDP ms" "local ms" "comm %"
configs=("loopback 1 1" "loopback 1 2" "loopback 1 4")
[[ $netns == yes ]] && configs+=("namespaces 2 1" "namespaces 2 2")
for config in "${configs[@]}"; do
  read -r where nodes per <<< "$config"
  read -r kl ks kc <<< "$(run koila "$where" "$nodes" "$per")"
  read -r dl ds dc <<< "$(run ddp "$where" "$nodes" "$per")"
  label="$((nodes * per)) on $where"
  ((nodes > 1)) && label="$label ($nodes x $per)"
  printf '%-34s %10s %10s %8s %12s %12s %8s\n' "$label" "$ks" "$kl" "$kc" "$ds" "$dl" "$dc"
done
[[ $netns == yes ]] || echo "(no namespaces: not root, or no iproute2)"
