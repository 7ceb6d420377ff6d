#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds koila and runs every test suite through ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
cd "${KOILA_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j"$(nproc)" "$@"
