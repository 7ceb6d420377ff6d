#!/usr/bin/env bash
# Coverage-guided exploration of the C API with libFuzzer (Debian's clang), outside CI:
# builds tests/fuzz/api_fuzz.cpp as a libFuzzer target against build/libkoila.so (run
# scripts/build.sh first) and fuzzes for SECONDS (default 300), keeping its corpus in
# build/libfuzzer/corpus. A crash leaves a crash-* file there: replay it with
#   build/tests/fuzz/koila_api_fuzz --replay FILE --models build/tests/models --trace
# Only the harness is instrumented for coverage; the library runs as built.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KOILA_BUILD_DIR:-$root/build}
out=$build/libfuzzer
seconds=${1:-300}
command -v clang++ >/dev/null || { echo "libfuzzer: needs clang (apt-get install clang)"; exit 1; }
mkdir -p "$out/corpus"
flags=(-O1 -g -fsanitize=fuzzer,address,undefined -I"$root/include")
clang -c "${flags[@]}" "$root/tests/fuzz/int_enums.c" -o "$out/int_enums.o"
clang++ -std=c++17 "${flags[@]}" -DKOILA_LIBFUZZER "$root/tests/fuzz/api_fuzz.cpp" "$out/int_enums.o" \
        -L"$build" -lkoila -Wl,-rpath,"$build" -o "$out/api_libfuzzer"
cd "$out"
# Leak checking stays with the seeded runs under LeakSanitizer: libFuzzer runs many inputs
# in one process, and the harness keeps its corpus of module files for all of them.
KOILA_FUZZ_MODELS="$build/tests/models" ASAN_OPTIONS=detect_leaks=0 \
  ./api_libfuzzer -max_total_time="$seconds" -max_len=4096 corpus
