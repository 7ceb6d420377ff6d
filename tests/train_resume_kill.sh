#!/usr/bin/env bash
# Issue 29: examples/train_resume.c killed with SIGKILL at random moments and restarted until
# it finishes must end with the parameters, bit for bit, of a run that never stopped.
#   train_resume_kill.sh EXAMPLE CNN.pt [kills]
# Prints the kills, how many landed after a checkpoint (the restart resumed), and the two
# checksums. Its model has dropout (cnn_dropout.pt): the generators' files make it exact, and
# the test shows they matter: resumed from the uninterrupted run's last checkpoint, the run ends
# with its parameters again, but not when it skips loading them (KOILA_EXAMPLE_SKIP_RNG_LOAD).
set -euo pipefail
example=$1 cnn=$2 kills_wanted=${3:-10}
steps=24 save_every=2
work=$(mktemp -d "${TMPDIR:-/tmp}/koila-resume-kill-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/whole" "$work/killed"

"$example" "$cnn" "$work/whole" $steps $save_every > "$work/whole.txt"
want=$(grep -o 'fnv1a [0-9a-f]*' "$work/whole.txt")
[[ -n "$want" ]] || { echo "FAIL: the uninterrupted run printed no checksum"; cat "$work/whole.txt"; exit 1; }

# The generators matter: the uninterrupted run left its last checkpoint (before the last
# steps); resumed from it, the run ends with the same parameters, and resumed from it without
# loading the generators (dropout then draws other masks), with others.
last=$(cat "$work/whole/latest")
cp -r "$work/whole" "$work/again"
cp -r "$work/whole" "$work/no-rng"
"$example" "$cnn" "$work/again" $steps $save_every > "$work/again.txt"
KOILA_EXAMPLE_SKIP_RNG_LOAD=1 "$example" "$cnn" "$work/no-rng" $steps $save_every > "$work/no-rng.txt"
again=$(grep -o 'fnv1a [0-9a-f]*' "$work/again.txt")
no_rng=$(grep -o 'fnv1a [0-9a-f]*' "$work/no-rng.txt")
grep -q "^resumed after step $last " "$work/again.txt" && grep -q "^resumed after step $last " "$work/no-rng.txt" ||
  { echo "FAIL: the runs did not resume from checkpoint $last"; cat "$work/again.txt" "$work/no-rng.txt"; exit 1; }
echo "resumed after step $last of $steps: with the generators' file $again, without it $no_rng"
[[ "$again" == "$want" ]] || { echo "FAIL: resumed with its generators, the run's parameters differ"; exit 1; }
[[ "$no_rng" != "$want" ]] ||
  { echo "FAIL: resumed without its generators, the run ends the same (has the model no dropout?)"; exit 1; }
# How long a whole run takes, to spread the kills over it.
start=$(date +%s%N)
"$example" "$cnn" "$(mktemp -d "$work/timing-XXXXXX")" $steps $save_every > /dev/null
run_ms=$(( ($(date +%s%N) - start) / 1000000 ))

kills=0 resumed=0 starts=0 rounds=0
RANDOM=29
# Rounds of kill-and-restart, each from scratch and each ending with a run that finishes,
# until there were as many kills as wanted.
while ((kills < kills_wanted)); do
  rounds=$((rounds + 1))
  rm -rf "$work/killed"; mkdir -p "$work/killed"
  while :; do
    starts=$((starts + 1))
    ((starts < 300)) || { echo "FAIL: no finished run after 300 starts"; exit 1; }
    "$example" "$cnn" "$work/killed" $steps $save_every > "$work/run.txt" 2>&1 &
    pid=$!
    # Somewhere after LibTorch has loaded (about a third of a short run) and before the end.
    sleep "$(awk -v r=$RANDOM -v ms=$run_ms 'BEGIN { printf "%.3f", (0.35 + 0.65 * r / 32767) * ms / 1000 }')"
    if kill -9 $pid 2>/dev/null; then kills=$((kills + 1)); fi
    rc=0
    { wait $pid; } 2>/dev/null || rc=$?
    grep -q '^resumed' "$work/run.txt" && resumed=$((resumed + 1))
    if grep -q 'fnv1a' "$work/run.txt"; then break; fi
    # A run that was not killed must not fail.
    ((rc == 137)) || { echo "FAIL: a run exited with $rc:"; cat "$work/run.txt"; exit 1; }
  done
  got=$(grep -o 'fnv1a [0-9a-f]*' "$work/run.txt")
  left=$(ls -a "$work/killed" | grep -c 'tmp' || true)
  echo "round $rounds: uninterrupted $want, killed and resumed $got; temporaries left: $left"
  [[ "$got" == "$want" ]] || { echo "FAIL: the resumed run's parameters differ"; exit 1; }
  ((left == 0)) || { echo "FAIL: a finished run left temporaries"; exit 1; }
done
echo "train_resume: $kills kills in $starts starts over $rounds rounds, $resumed starts resumed from a checkpoint;" \
     "every round ended with the uninterrupted run's parameters, bit for bit"
