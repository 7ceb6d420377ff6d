#!/usr/bin/env bash
# Issue 52: examples/train_ddp.c started by torchrun on one machine (loopback, torchrun's own
# store): 3 workers on uneven shards (31 samples: 10, 10, 11) end with the parameters of one
# worker on the whole batch, to float rounding; a missing variable and an unreachable store are
# clear errors.
#   loopback.sh TORCHRUN EXAMPLE CNN.pt
source "$(dirname "$0")/common.sh"
steps=6
mkdir -p "$work/one" "$work/three"
"$torchrun" --nproc-per-node 1 --master-port "$(free_port)" --no-python \
  "$example" "$cnn" "$work/one" $steps 3 31 > "$work/one.txt" 2>&1 || { cat "$work/one.txt"; exit 1; }
"$torchrun" --nproc-per-node 3 --master-port "$(free_port)" --no-python \
  "$example" "$cnn" "$work/three" $steps 3 31 > "$work/three.txt" 2>&1 || { cat "$work/three.txt"; exit 1; }
grep '^rank' "$work/three.txt" | sort
# Every worker ends with the same parameters, bit for bit.
[[ $(grep -o 'finished.*fnv1a [0-9a-f]*' "$work/three.txt" | sort -u | wc -l) == 1 ]] ||
  { echo "FAIL: the workers' parameters differ"; exit 1; }
compare_final "$work/one" "$work/three" 1e-4 || { echo "FAIL: 3 workers differ from 1 on the whole batch"; exit 1; }

# Without a launcher: the variable that is missing, named.
out=$(env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u LOCAL_RANK "$example" "$cnn" "$work/none" 2>&1) &&
  { echo "FAIL: ran without a launcher"; exit 1; }
echo "without a launcher: $out"
grep -q 'KOILA_ERROR_INVALID_ARGUMENT\|no WORLD_SIZE' <<< "$out" || { echo "FAIL: no clear message"; exit 1; }
# The launcher's store, which nobody serves: KOILA_ERROR_IO within the example's timeout.
start=$SECONDS
out=$(RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) TORCHELASTIC_USE_AGENT_STORE=True \
      TORCHELASTIC_RESTART_COUNT=0 KOILA_EXAMPLE_TIMEOUT_MS=3000 "$example" "$cnn" "$work/none" 2>&1) &&
  { echo "FAIL: joined a store nobody serves"; exit 1; }
echo "unreachable store ($((SECONDS - start)) s): $out"
grep -q 'could not join' <<< "$out" || { echo "FAIL: no clear message"; exit 1; }
((SECONDS - start <= 20)) || { echo "FAIL: took $((SECONDS - start)) s for a timeout of 3 s"; exit 1; }
# Another backend: an unknown one is a usage error; NCCL where no GPU is (scripts/gpu_check.sh
# runs it on one) a clear error, no crash.
set +e
KOILA_EXAMPLE_BACKEND=mpi "$example" "$cnn" "$work/none" > /dev/null 2>&1
code=$?
set -e
[[ $code == 2 ]] || { echo "FAIL: backend mpi gave exit $code, not the usage error"; exit 1; }
if ! command -v nvidia-smi > /dev/null; then
  set +e
  out=$(RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) KOILA_EXAMPLE_BACKEND=nccl \
        KOILA_EXAMPLE_TIMEOUT_MS=5000 "$example" "$cnn" "$work/nccl" 2 1 8 2>&1)
  code=$?
  set -e
  echo "NCCL without a GPU (exit $code): ${out%%$'\n'*}"
  [[ $code == 1 ]] && grep -q 'koila_group_new_from_env failed' <<< "$out" || { echo "FAIL: no clear error"; exit 1; }
fi
echo "loopback: 3 workers on uneven shards match 1 on the whole batch"
