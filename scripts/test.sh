#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds koila and runs every test: the ctest suites of the
# plain build, then the sanitizer suite (ASan+UBSan, TSan) with the fuzzers' fixed seeds,
# then one fresh fuzzer seed, printed so that a failure can be replayed.
# KOILA_SKIP_SANITIZERS=1 stops after the plain suites (for quick local runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
"$root/scripts/ctest_run.sh" "${KOILA_BUILD_DIR:-$root/build}" -j"$(nproc)" "$@"
[[ ${KOILA_SKIP_SANITIZERS:-0} == 1 ]] && exit 0
"$root/scripts/sanitize.sh"
"$root/scripts/fuzz_fresh.sh"
