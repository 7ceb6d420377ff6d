#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds koila and runs the main example.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build=${KOILA_BUILD_DIR:-$root/build}
"$build/examples/koila_example_mlp"
echo
"$build/examples/koila_example_train_cnn" "$build/examples/cnn.pt" "$@"
