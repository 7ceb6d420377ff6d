// Budgets: the bytes koila may use on each device, set or automatic, and BudgetScope, which
// holds a planned run to its budget as a hard limit.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace koila {

// 0 = automatic.
void set_budget(const c10::Device& device, uint64_t bytes);
// The budget in force: the one set, or current + free bytes less a safety margin (on the
// CPU, the machine's free memory is read at most every 50 ms, and meanwhile follows what
// koila's tensors take and give back).
uint64_t budget(const c10::Device& device);

// While it lives, CPU allocations made on this thread that would take what tensors hold on
// the CPU beyond `budget` bytes fail with an out-of-memory error, as a device that size
// would fail: koila's planned runs hold their budget as a hard limit, and retry with a
// smaller chunk when an estimate fell short. Nests; other devices are not affected here.
// Allocations LibTorch makes on its own worker threads during the run are counted in the
// figures but not refused (most kernels allocate on the calling thread). On CUDA (when
// built with it) the device's caching allocator is capped at the budget while a scope on
// it lives (setMemoryFraction), so that an allocation beyond it fails there too: at the
// smallest budget of the scopes on that device that live (a probe's within a run's), and
// after the allocator gives back what it caches unused when it holds more than that (its
// cap bounds only what it asks the device for, not the blocks it already holds).
class BudgetScope {
 public:
  BudgetScope(const c10::Device& device, uint64_t budget);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  uint64_t previous_;
  uint64_t budget_;
  c10::Device device_;
};

}  // namespace koila
