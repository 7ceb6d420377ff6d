#!/usr/bin/env bash
# Trains the TorchScript CNN data-parallel on 2 processes of this machine with Gloo, meeting
# through a file store in a fresh temporary directory; each prints its steps, and the last
# column (a weight of the model) must agree between the ranks at every step.
#
#   examples/train_cnn_dp.sh [TRAINER] [cnn.pt] [batch] [steps]
# TRAINER defaults to build/examples/koila_example_train_cnn_dp (scripts/build.sh builds it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trainer=${1:-$root/build/examples/koila_example_train_cnn_dp}
model=${2:-$root/build/examples/cnn.pt}
batch=${3:-1024}
steps=${4:-5}
world=2
store=$(mktemp -d)
trap 'rm -rf "$store"' EXIT
pids=()
for ((rank = 0; rank < world; ++rank)); do
  "$trainer" "$model" "$rank" "$world" "file://$store/rendezvous" "$batch" "$steps" > "$store/out.$rank" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
cat "$store"/out.*
if ((status == 0)); then
  # The ranks took the same steps: the weight printed at each step is the same on both.
  diff <(grep -o 'step [0-9]*:.*first filter .*' "$store/out.0" | sed 's/shard loss [^,]*, [^,]*, //') \
       <(grep -o 'step [0-9]*:.*first filter .*' "$store/out.1" | sed 's/shard loss [^,]*, [^,]*, //') \
    || { echo "the ranks' weights differ"; status=1; }
fi
exit $status
