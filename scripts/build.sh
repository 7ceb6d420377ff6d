#!/usr/bin/env bash
# Configures and builds koila into build/ (or $KOILA_BUILD_DIR). Extra args go to cmake.
# KOILA_DEBUG_INFO=lines builds with line tables (-g1) instead of full debug information.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KOILA_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} -DKOILA_REQUIRE_BINDINGS=ON \
      -DKOILA_DEBUG_INFO=${KOILA_DEBUG_INFO:-full} "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
