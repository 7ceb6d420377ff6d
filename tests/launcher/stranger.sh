#!/usr/bin/env bash
# Issue 52: c10d's store has no authentication. Strangers' connections to a group's store while
# it trains (a port scanner opening and closing, a wrong program writing junk or HTTP, one that
# stays connected): the workers finish with the parameters of the same run left alone, or fail
# with a clear message within the timeout; none crashes or hangs. Both stores: torchrun's (its
# agent serves it) and koila's own (workers started by hand with the launcher's variables, rank 0
# listening).
#   stranger.sh TORCHRUN EXAMPLE CNN.pt
source "$(dirname "$0")/common.sh"
timeout_ms=10000 steps=60
export KOILA_EXAMPLE_TIMEOUT_MS=$timeout_ms

pester() {
  local port=$1 i
  for i in $(seq 1 24); do
    { exec 3<> "/dev/tcp/127.0.0.1/$port"; } 2> /dev/null || { sleep 0.05; continue; }
    case $((i % 4)) in
      0) ;;
      1) printf '\x01' >&3 ;;
      2) head -c 4096 /dev/urandom >&3 2> /dev/null ;;
      3) printf 'GET / HTTP/1.0\r\n\r\n' >&3 ;;
    esac
    ((i == 12)) && exec 4<> "/dev/tcp/127.0.0.1/$port" 2> /dev/null  # one that stays connected
    exec 3>&- 3<&-
    sleep 0.05
  done
}

# One run of 2 workers, through torchrun or by hand, pestered or not: its log.
run() {
  local how=$1 pestered=$2 dir=$3 port pids=() rank rc=0
  port=$(free_port)
  mkdir -p "$dir"
  if [[ $how == torchrun ]]; then
    timeout 200 "$torchrun" --nproc-per-node 2 --master-port "$port" --no-python \
      "$example" "$cnn" "$dir" $steps 20 30 > "$dir.txt" 2>&1 &
    pids+=($!)
  else
    for rank in 0 1; do
      RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout 200 "$example" "$cnn" "$dir" $steps 20 30 > "$dir-$rank.txt" 2>&1 &
      pids+=($!)
    done
  fi
  if [[ $pestered == yes ]]; then
    sleep 0.5
    pester "$port"
  fi
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  exec 4>&- 4<&- 2> /dev/null || true
  [[ $how == torchrun ]] || cat "$dir-0.txt" "$dir-1.txt" > "$dir.txt"
  echo $rc > "$dir.rc"
}

for how in torchrun own; do
  run $how no "$work/$how-alone"
  [[ $(cat "$work/$how-alone.rc") == 0 ]] || { echo "FAIL: $how alone"; cat "$work/$how-alone.txt"; exit 1; }
  want=$(checksum "$work/$how-alone.txt")
  start=$SECONDS
  run $how yes "$work/$how-pestered"
  rc=$(cat "$work/$how-pestered.rc") took=$((SECONDS - start))
  got=$(checksum "$work/$how-pestered.txt" || true)
  echo "$how's store pestered: exit $rc after $took s; parameters $got (alone: $want)"
  grep -h 'failed: ' "$work/$how-pestered.txt" | cut -c1-240 | head -2 || true
  ((took <= 120 && rc != 124)) || { echo "FAIL: it hung"; exit 1; }
  ((rc < 125)) || { echo "FAIL: a worker was killed by a signal (exit $rc)"; cat "$work/$how-pestered.txt"; exit 1; }
  ! grep -q 'Signal [0-9]* (SIG\|core dumped\|terminate called' "$work/$how-pestered.txt" ||
    { echo "FAIL: a worker crashed"; cat "$work/$how-pestered.txt"; exit 1; }
  if ((rc == 0)); then
    [[ "$got" == "$want" ]] || { echo "FAIL: the strangers changed the parameters"; exit 1; }
  else
    grep -q 'failed: ' "$work/$how-pestered.txt" || { echo "FAIL: failed without a message"; exit 1; }
  fi
done
echo "stranger: no crash, no hang, no parameter changed"
