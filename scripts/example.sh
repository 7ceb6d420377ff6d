#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds koila and runs the main example.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
"${KOILA_BUILD_DIR:-$root/build}/examples/koila_example_mlp" "$@"
