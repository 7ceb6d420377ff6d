#!/usr/bin/env bash
# Regenerates src/bindings.rs from include/koila.h with bindgen (Debian package `bindgen`).
#
#   generate.sh           write src/bindings.rs
#   generate.sh --check   exit 1 when src/bindings.rs is not what the header gives now
#
# The check compares the text without layout, so whether and which rustfmt formatted it
# cannot make it fail; any change of a name, type, value or comment does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
header="$here/../../../include/koila.h"
committed="$here/src/bindings.rs"
# bindgen formats its output with rustfmt when it finds one (rustup's lives in ~/.cargo/bin).
export PATH="$PATH:${CARGO_HOME:-$HOME/.cargo}/bin"

command -v bindgen >/dev/null || { echo "generate.sh: bindgen not found (apt-get install bindgen)" >&2; exit 2; }

generate() {
  bindgen "$header" \
    --raw-line "// Generated from include/koila.h by bindings/rust/koila-sys/generate.sh; do not edit." \
    --allowlist-function 'koila_.*' --allowlist-type 'koila_.*' --allowlist-var 'KOILA_.*' \
    --blocklist-type '__u?int64_t' \
    --no-layout-tests --no-prepend-enum-name --size_t-is-usize \
    -- -fparse-all-comments
}

# The text without layout: whitespace and the trailing commas rustfmt adds are dropped.
tokens() {
  tr -d ' \t\n' | sed -e 's/,)/)/g' -e 's/,}/}/g'
}

case "${1:-}" in
  "")
    generate >"$committed.tmp"
    mv "$committed.tmp" "$committed"
    echo "wrote $committed"
    ;;
  --check)
    fresh=$(mktemp)
    trap 'rm -f "$fresh"' EXIT
    generate >"$fresh"
    if [[ "$(tokens <"$fresh")" != "$(tokens <"$committed")" ]]; then
      echo "src/bindings.rs is out of date with include/koila.h; run bindings/rust/koila-sys/generate.sh" >&2
      diff -u "$committed" "$fresh" | head -60 >&2 || true
      exit 1
    fi
    # Every function the header declares is bound (a scan independent of bindgen).
    missing=0
    for f in $(grep -oE '\bkoila_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u); do
      grep -q "pub fn $f(" "$committed" || { echo "not bound: $f" >&2; missing=1; }
    done
    # bindgen cannot evaluate INT64_MIN: lib.rs defines KOILA_NO_BATCH by hand.
    grep -qE '#define KOILA_NO_BATCH INT64_MIN$' "$header" ||
      { echo "KOILA_NO_BATCH changed in koila.h; update src/lib.rs" >&2; missing=1; }
    [[ $missing -eq 0 ]] && echo "src/bindings.rs matches include/koila.h ($(grep -c 'pub fn koila_' "$committed") functions)"
    exit $missing
    ;;
  *) echo "usage: generate.sh [--check]" >&2; exit 2 ;;
esac
