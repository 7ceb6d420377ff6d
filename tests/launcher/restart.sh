#!/usr/bin/env bash
# Issue 52: a worker of examples/train_ddp.c killed (SIGKILL) after a checkpoint, under torchrun
# --max-restarts 1: torchrun restarts both workers, which join afresh (its store, the next
# restart attempt's keys) and resume from rank 0's last checkpoint and their own generators'
# files, ending with the parameters, bit for bit, of the same run never stopped. Its model has
# dropout (cnn_dropout.pt): each worker draws its masks from its own generators, which a restart
# continues. With SGD (momentum) and with Adam. And the generators matter: resumed from the
# uninterrupted run's last checkpoint without loading them (KOILA_EXAMPLE_SKIP_RNG_LOAD), the
# workers draw other masks and the run ends with other parameters.
#   restart.sh TORCHRUN EXAMPLE CNN.pt
source "$(dirname "$0")/common.sh"
steps=12 save_every=3 batch=30
for optimizer in sgd adam; do
  mkdir -p "$work/$optimizer-whole" "$work/$optimizer-killed"
  "$torchrun" --nproc-per-node 2 --master-port "$(free_port)" --no-python \
    "$example" "$cnn" "$work/$optimizer-whole" $steps $save_every $batch $optimizer > "$work/whole.txt" 2>&1 ||
    { cat "$work/whole.txt"; exit 1; }
  want=$(checksum "$work/whole.txt")
  [[ -n "$want" ]] || { echo "FAIL: the uninterrupted run printed no checksum"; cat "$work/whole.txt"; exit 1; }
  last=$(cat "$work/$optimizer-whole/latest")
  cp -r "$work/$optimizer-whole" "$work/$optimizer-no-rng"
  KOILA_EXAMPLE_SKIP_RNG_LOAD=1 "$torchrun" --nproc-per-node 2 --master-port "$(free_port)" --no-python \
    "$example" "$cnn" "$work/$optimizer-no-rng" $steps $save_every $batch $optimizer > "$work/no-rng.txt" 2>&1 ||
    { cat "$work/no-rng.txt"; exit 1; }
  no_rng=$(checksum "$work/no-rng.txt")
  skipped=$(grep -c "resumed after step $last\$" "$work/no-rng.txt" || true)
  echo "$optimizer: resumed after step $last without the generators' files: $no_rng"
  ((skipped == 2)) || { echo "FAIL: the workers did not both resume from $last"; cat "$work/no-rng.txt"; exit 1; }
  [[ -n "$no_rng" && "$no_rng" != "$want" ]] ||
    { echo "FAIL: resumed without the generators, the run ends the same (has the model no dropout?)"; exit 1; }
  start=$SECONDS
  "$torchrun" --nproc-per-node 2 --max-restarts 1 --master-port "$(free_port)" --no-python \
    "$example" "$cnn" "$work/$optimizer-killed" $steps $save_every $batch $optimizer > "$work/killed.txt" 2>&1 &
  launcher=$!
  cleanup_hooks+=("kill -9 $launcher 2>/dev/null")
  # After the first checkpoint, one worker (the newest process) is killed.
  until [[ -s "$work/$optimizer-killed/latest" ]]; do
    sleep 0.05
    ((SECONDS - start < 300)) || { echo "FAIL: no checkpoint after 300 s"; cat "$work/killed.txt"; exit 1; }
  done
  victim=$(pgrep -n -f "^$example $cnn $work/$optimizer-killed") || { echo "FAIL: no worker to kill"; exit 1; }
  kill -9 "$victim"
  at=$(cat "$work/$optimizer-killed/latest")
  rc=0
  wait $launcher || rc=$?
  ((rc == 0)) || { echo "FAIL: torchrun exited with $rc"; cat "$work/killed.txt"; exit 1; }
  got=$(checksum "$work/killed.txt")
  resumed=$(grep -c 'resumed after step' "$work/killed.txt" || true)
  echo "$optimizer: killed worker $victim after checkpoint $at;" \
       "$resumed workers resumed; uninterrupted $want, restarted $got"
  ((resumed == 2)) || { echo "FAIL: the restarted workers did not both resume"; cat "$work/killed.txt"; exit 1; }
  [[ -n "$want" && "$got" == "$want" ]] || { echo "FAIL: the restarted run's parameters differ"; exit 1; }
done
echo "restart: both optimizers resumed exactly"
