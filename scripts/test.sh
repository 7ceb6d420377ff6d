#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds koila and runs every test, in two configurations:
#   1. Debian's LibTorch (libtorch-dev): the ctest suites of the plain build, then (at the
#      end) the sanitizer suite (ASan+UBSan, TSan) with the fuzzers' fixed seeds and one
#      fresh fuzzer seed, printed so that a failure can be replayed;
#   2. PyTorch 2.14.1's LibTorch, the CUDA build, on this machine's CPU
#      (scripts/test_torch2.sh): the plain suites and the real-model corpus.
# KOILA_SKIP_TORCH2=1 leaves out the second, KOILA_SKIP_SANITIZERS=1 the sanitizers (for
# quick local runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Line tables (-g1) rather than full debug information: every build of this run compiles in
# about two thirds of the time, and stack traces and sanitizer reports keep file and line.
export KOILA_DEBUG_INFO=${KOILA_DEBUG_INFO:-lines}
# Each phase prints when it starts, in seconds since the start (CI's limit is 45 minutes).
start=$SECONDS
phase() { echo "== test.sh: $1 at $((SECONDS - start)) s"; }
phase "setup"
"$root/scripts/setup.sh"
phase "build (LibTorch 1.13)"
"$root/scripts/build.sh"
phase "ctest (LibTorch 1.13)"
"$root/scripts/ctest_run.sh" "${KOILA_BUILD_DIR:-$root/build}" -j"$(nproc)" "$@"
if [[ ${KOILA_SKIP_TORCH2:-0} != 1 ]]; then
  phase "LibTorch 2.14.1"
  "$root/scripts/test_torch2.sh"
fi
if [[ ${KOILA_SKIP_SANITIZERS:-0} != 1 ]]; then
  phase "sanitizers"
  "$root/scripts/sanitize.sh"
  phase "fresh fuzzer seeds"
  "$root/scripts/fuzz_fresh.sh"
fi
phase "done"
