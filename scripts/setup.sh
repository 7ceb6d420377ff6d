#!/usr/bin/env bash
# Installs what koila needs to build and test on Debian 12 or 13 (idempotent; skips what is
# there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# libclang1 and clang: bindgen (the Rust binding's header check) loads libclang at run time
# and needs clang's own headers (stddef.h); the bindgen package depends on neither. clang
# also builds scripts/libfuzzer.sh's target.
# clang-format: the source's layout is checked against .clang-format (c.clang_format).
# nlohmann-json3-dev: the JSON reader of .pt2 archives (torch.export programs).
# zlib1g-dev: the CRC-32 that ends an optimizer state file.
# libopenblas0-pthread: LibTorch on Debian otherwise runs its matrix products on the
# reference BLAS, some 30 times slower (tests and benchmarks would crawl).
packages=(build-essential cmake pkg-config libtorch-dev libgtest-dev swig libopenblas0-pthread
          python3 python3-torch python3-torchvision default-jdk-headless junit5 bindgen
          libgloo-dev libclang1 clang clang-format nlohmann-json3-dev
          zlib1g-dev)
# Rust: a rustup toolchain when there is one, else Debian's cargo (rustc 1.63).
if ! command -v cargo >/dev/null && [[ ! -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]]; then
  packages+=(cargo)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Julia is not packaged by Debian, so the Julia binding cannot run here; its syntax is
# checked with tree-sitter-julia from npm instead (ctest julia.syntax, skipped without it).
tools="$root/.tools/julia-syntax"
if command -v npm >/dev/null &&
   [[ ! -f "$tools/node_modules/tree-sitter-julia/tree-sitter-julia.wasm" ||
      ! -f "$tools/node_modules/web-tree-sitter/package.json" ]]; then
  echo "setup: installing tree-sitter-julia into $tools"
  npm install --silent --no-audit --no-fund --ignore-scripts --prefix "$tools" \
      web-tree-sitter@0.24.4 tree-sitter-julia@0.23.1 ||
    echo "setup: could not install tree-sitter-julia; julia.syntax will be skipped"
fi
