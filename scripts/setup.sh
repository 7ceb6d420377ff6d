#!/usr/bin/env bash
# Installs what koila needs to build and test on Debian 12 (idempotent; skips what is there).
set -euo pipefail
# libopenblas0-pthread: LibTorch on Debian otherwise runs its matrix products on the
# reference BLAS, some 30 times slower (tests and benchmarks would crawl).
packages=(build-essential cmake pkg-config libtorch-dev libgtest-dev swig libopenblas0-pthread
          python3 openjdk-17-jdk-headless junit5 bindgen)
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
