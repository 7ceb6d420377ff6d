#!/usr/bin/env bash
# Runs ctest in a build directory and keeps what it prints short, so that a failure stays in
# sight in a CI log that shows only part of a long output: the full output goes to
# DIR/ctest.log; printed are each failing test as it fails, the summary, and at the end the
# whole output of every test that failed (from ctest's own LastTest.log).
#   usage: scripts/ctest_run.sh DIR [ctest arguments...]
set -uo pipefail
dir=$1
shift
cd "$dir" || exit 2
# ctest runs as many tests at once as the machine has cores, and each LibTorch process
# starts an OpenMP pool of as many threads, whose idle threads spin for a while by default:
# on 2 cores the spinning pools of two tests took each other's time (the 2.14.1 suites took
# 492 s; with passive waiting, 202 s). Passive waiting changes no result, only who waits.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
log=$PWD/ctest.log
echo "ctest in $PWD $* (full output: $log)"
ctest --output-on-failure "$@" 2>&1 | tee "$log" |
  grep --line-buffered -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\.\.\. *(\*\*\*|Failed|Not Run)'
rc=${PIPESTATUS[0]}
sed -n '/tests passed, /,$p' "$log"
if ((rc != 0)); then
  echo "ctest_run: the output of each failing test follows"
  # LastTest.log holds one block per test, from "N/M Testing: NAME" to its "time elapsed"
  # line; a block without "Test Passed." is printed whole.
  awk '/^[0-9]+\/[0-9]+ Testing: / { block = ""; inside = 1 }
       inside { block = block $0 "\n" }
       inside && /" time elapsed: / { if (block !~ /\nTest Passed\.\n/) printf "%s", block; inside = 0 }' \
    Testing/Temporary/LastTest.log
fi
exit "$rc"
