// The CPU tracking allocator: a counting wrapper installed in front of LibTorch's default
// CPU allocator when the library loads. It counts what tensors hold on the CPU
// (memory_stats, device_memory.h), charges each block to the RunMemory of the thread that
// allocated it (run_memory.h), and refuses what would go beyond a BudgetScope's budget
// (budget.h). The meta counter's allocator (meta_counter.h) is installed with it.
#pragma once

#include <cstdint>

namespace koila {

// Installs the CPU tracking allocator (idempotent; also done when the library loads).
void ensure_memory_tracking();

namespace testing {
// Makes CPU allocations beyond `bytes` held fail with an out-of-memory error, as a real
// device would (0 = no limit). For tests of the out-of-memory paths only.
void set_cpu_limit(uint64_t bytes);
}  // namespace testing

}  // namespace koila
