#!/usr/bin/env bash
# One fresh seed for each fuzzer, in the ASan+UBSan build (scripts/sanitize.sh makes it).
# The seed is printed first: replay a failure with the command it prints.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-asan
seed=${KOILA_FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "fuzz: fresh seed $seed"
echo "fuzz: replay with: $build/tests/fuzz/koila_api_fuzz --seed $seed --calls 20000 --models $build/tests/models --trace"
echo "fuzz:          and: $build/tests/fuzz/koila_graph_fuzz --seed $seed --graphs 300 --verbose"
source "$root/scripts/sanitizer_env.sh"
"$build/tests/fuzz/koila_api_fuzz" --seed "$seed" --calls 20000 --models "$build/tests/models"
"$build/tests/fuzz/koila_graph_fuzz" --seed "$seed" --graphs 300
