#!/usr/bin/env bash
# The sanitizer suite (docs/RELIABILITY.md). Run after scripts/setup.sh; .ci/run calls it.
#   1. ASan + UBSan (LeakSanitizer included) in build-asan/: the C++ and C suites, the API
#      fuzzer and the differential graph fuzzer. Any report fails the run.
#   2. TSan in build-tsan/: the concurrency test (8 threads training while budgets change).
# Bindings run in the plain build only: their runtimes (JVM, cargo test) would need the
# sanitizer runtime preloaded into foreign processes. So does the real-model corpus (its
# TorchScript models are written by Python; the plain build runs it).
# Arguments: `asan`, `tsan` or nothing for both.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-all}
source "$root/scripts/sanitizer_env.sh"

configure_and_build() {  # dir sanitizers targets...
  local dir=$1 sanitizers=$2
  shift 2
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOILA_SANITIZE="$sanitizers" \
        -DKOILA_DEBUG_INFO="${KOILA_DEBUG_INFO:-full}" -DKOILA_UNITY_BUILD=ON \
        -DKOILA_BUILD_BINDINGS=OFF -DKOILA_BUILD_BENCHMARKS=OFF -DKOILA_BUILD_EXAMPLES=OFF \
        -DKOILA_BUILD_CORPUS=OFF >/dev/null
  cmake --build "$dir" -j"$(nproc)" --target "$@"
}

if [[ $what == all || $what == asan ]]; then
  echo "sanitize: building with AddressSanitizer + UndefinedBehaviorSanitizer"
  configure_and_build "$root/build-asan" address,undefined \
      koila koila_tests koila_c99_test koila_api_fuzz koila_graph_fuzz koila_concurrency_test koila_test_models
  # The install and export checks inspect the plain build's artefacts; the rest runs here.
  "$root/scripts/ctest_run.sh" "$root/build-asan" -j"$(nproc)" -E 'c\.(install_prefix|exports_only_koila_symbols)'
fi

if [[ $what == all || $what == tsan ]]; then
  echo "sanitize: building with ThreadSanitizer"
  configure_and_build "$root/build-tsan" thread koila koila_concurrency_test koila_test_models
  "$root/scripts/ctest_run.sh" "$root/build-tsan" -R 'reliability\.concurrency'
fi
