# Sourced by scripts/sanitize.sh and scripts/fuzz_fresh.sh: every sanitizer report fails
# the run; suppressions (LibTorch-internal only, each with its reason) live in
# tests/sanitizers/.
supp=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/sanitizers
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_odr_violation=0:suppressions=$supp/asan.supp"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
