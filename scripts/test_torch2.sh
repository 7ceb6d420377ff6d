#!/usr/bin/env bash
# The second configuration: koila built against the LibTorch inside PyTorch 2.14.1's CUDA
# build (scripts/setup_torch2.sh installs it into a venv outside the clone), with CUDA and
# NCCL compiled in, on a machine that may have no GPU. Runs the plain ctest suites there (the
# bindings' excepted), the real-model corpus made by that PyTorch included; tests that need a
# device skip and say so. Build directory: build-torch2 (or $KOILA_TORCH2_BUILD_DIR). Extra args go to ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup_torch2.sh"
venv=${KOILA_TORCH2_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/koila/venv-torch-2.14.1}
build=${KOILA_TORCH2_BUILD_DIR:-$root/build-torch2}
prefix=$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
echo "test_torch2: building against $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)') in $build"
# Left out here, for CI's time on two cores (the first configuration builds and tests them
# against 1.13):
#   - the benchmark programs (the GPU machine's check, shared/gpu/check.sh, also builds and
#     runs them against its 2.x);
#   - the bindings, which reach koila through its C API only, the same in both.
# torchrun, for the launcher tests (tests/launcher: workers that join from its environment), is
# the venv's: Debian's 1.13 one cannot launch programs that are not Python on Python 3.11.
# The library compiles in unity batches here (KOILA_UNITY_BUILD): the first configuration
# compiles each file alone.
KOILA_BUILD_DIR=$build "$root/scripts/build.sh" -DCMAKE_PREFIX_PATH="$prefix" -DKOILA_CORPUS_PYTHON="$venv/bin/python" \
    -DKOILA_BUILD_BENCHMARKS=OFF -DKOILA_BUILD_BINDINGS=OFF -DKOILA_UNITY_BUILD=ON -DKOILA_TORCHRUN="$venv/bin/torchrun"
# The example killed and restarted (c.example_train_resume_killed, half a minute) runs in the
# 1.13 configuration only: it drives koila's C API, whose saves the AtomicSave kill tests
# check here against this LibTorch.
"$root/scripts/ctest_run.sh" "$build" -j"$(nproc)" -E '^c\.example_train_resume_killed$' "$@"
