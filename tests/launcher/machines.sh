#!/usr/bin/env bash
# Issue 52: two "machines" on this one, network namespaces joined by a veth pair with addresses
# that exist only inside them, made here and removed at the end (needs root). One torchrun in
# each, 2 workers each, node 0's torchrun hosting the store: 4 workers on uneven shards (30
# samples: 7, 8, 7, 8) end with the parameters of one worker on the whole batch, to float
# rounding. Then a machine dies (every process in the second namespace killed): the first
# machine's workers fail within the group's timeout, and none hangs.
#   machines.sh TORCHRUN EXAMPLE CNN.pt
source "$(dirname "$0")/common.sh"
[[ $(id -u) == 0 ]] || { echo "FAIL: needs root for network namespaces (CI runs as root)"; exit 1; }
command -v ip > /dev/null || { echo "FAIL: needs ip (iproute2)"; exit 1; }
source "$(dirname "$0")/../../scripts/netns_pair.sh"
cleanup_hooks+=("netns_pair_remove")
netns_pair_create || { echo "FAIL: could not make the namespaces"; exit 1; }
a=$ns_a b=$ns_b
echo "machines: $a ($host_a) and $b ($host_b)"

steps=6 batch=30 port=29500
mkdir -p "$work/one" "$work/two"
"$torchrun" --nproc-per-node 1 --master-port "$(free_port)" --no-python \
  "$example" "$cnn" "$work/one" $steps 3 $batch > "$work/one.txt" 2>&1 || { cat "$work/one.txt"; exit 1; }

# Machine k runs: torchrun --nnodes 2 --node-rank k ... on its own namespace.
machine() {
  local ns=$1 node=$2 dir=$3 steps=$4
  shift 4
  ip netns exec "$ns" env "$@" "$torchrun" --nnodes 2 --node-rank "$node" --nproc-per-node 2 --master-addr "$host_a" \
    --master-port $port --no-python "$example" "$cnn" "$dir" "$steps" 3 $batch
}
machine "$a" 0 "$work/two" $steps > "$work/a.txt" 2>&1 &
pid_a=$!
machine "$b" 1 "$work/two" $steps > "$work/b.txt" 2>&1 &
pid_b=$!
rc_a=0 rc_b=0
wait $pid_a || rc_a=$?
wait $pid_b || rc_b=$?
grep -h '^rank' "$work/a.txt" "$work/b.txt" | sort
((rc_a == 0 && rc_b == 0)) || { echo "FAIL: torchrun exited with $rc_a and $rc_b"; cat "$work/a.txt" "$work/b.txt"; exit 1; }
[[ $(grep -ho 'finished.*fnv1a [0-9a-f]*' "$work/a.txt" "$work/b.txt" | sort -u | wc -l) == 1 ]] ||
  { echo "FAIL: the workers' parameters differ"; exit 1; }
compare_final "$work/one" "$work/two" 1e-4 || { echo "FAIL: 2 machines x 2 workers differ from 1 worker"; exit 1; }

# A machine dies mid-training, twice: its processes killed (the other's connections are reset),
# then its network gone silent (the link down: nothing answers, nothing is reset). The other
# machine's workers fail within the group's timeout (5 s) both times, and none hangs.
timeout_ms=5000
for death in killed silent; do
  rm -rf "$work/dies"
  mkdir -p "$work/dies"
  machine "$a" 0 "$work/dies" 400 KOILA_EXAMPLE_TIMEOUT_MS=$timeout_ms > "$work/a.txt" 2>&1 &
  pid_a=$!
  machine "$b" 1 "$work/dies" 400 KOILA_EXAMPLE_TIMEOUT_MS=$timeout_ms > "$work/b.txt" 2>&1 &
  pid_b=$!
  start=$SECONDS
  until [[ -s "$work/dies/latest" ]]; do
    sleep 0.05
    ((SECONDS - start < 300)) || { echo "FAIL: no checkpoint after 300 s"; cat "$work/a.txt"; exit 1; }
  done
  if [[ $death == killed ]]; then
    ip netns pids "$b" | xargs -r kill -9 2> /dev/null || true  # (some may have ended already)
  else
    ip -n "$b" link set "$link_b" down
  fi
  died=$SECONDS
  rc_a=0
  wait $pid_a || rc_a=$?
  took=$((SECONDS - died))
  ip netns pids "$b" | xargs -r kill -9 2> /dev/null || true
  wait $pid_b 2> /dev/null || true
  ip -n "$b" link set "$link_b" up
  echo "machine $b $death after checkpoint $(cat "$work/dies/latest"): $a's torchrun exited with $rc_a after $took s:"
  grep -h 'rank [01]: .*failed' "$work/a.txt" | cut -c1-240 | head -2
  ((rc_a != 0)) || { echo "FAIL: the surviving machine's run did not fail"; exit 1; }
  grep -q 'rank [01]: .*failed' "$work/a.txt" || { echo "FAIL: no clear failure on the workers"; cat "$work/a.txt"; exit 1; }
  ((took <= timeout_ms / 1000 + 30)) || { echo "FAIL: $took s to fail with a timeout of $((timeout_ms / 1000)) s"; exit 1; }
  [[ -z $(ip netns pids "$a") ]] || { echo "FAIL: processes left in $a"; ip netns pids "$a" | xargs ps -o pid,cmd -p; exit 1; }
done
echo "machines: 2 x 2 workers matched 1 worker; a dead machine, killed or silent, failed the other's workers in time"
