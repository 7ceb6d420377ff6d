// Memory: what tensors hold on each device, the budget koila may use there, and a counter
// for simulated (meta) allocations that the planner uses to estimate peaks.
//
// CPU bytes are counted by a tracking allocator installed in front of LibTorch's default
// CPU allocator when the library loads. CUDA figures come from LibTorch's caching
// allocator, when koila is built against a CUDA LibTorch (KOILA_WITH_CUDA).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

namespace koila {

struct MemoryStats {
  uint64_t current = 0;  // bytes held by tensors now
  uint64_t peak = 0;     // most held at once since the last reset
};

// Installs the CPU tracking allocator (idempotent; also done when the library loads).
void ensure_memory_tracking();

MemoryStats memory_stats(const c10::Device& device);
void reset_peak(const c10::Device& device);

// Bytes the device could still give out: for CPU what the kernel reports available, for
// CUDA what the driver reports free plus what the caching allocator holds unused.
uint64_t free_bytes(const c10::Device& device);

// 0 = automatic.
void set_budget(const c10::Device& device, uint64_t bytes);
// The budget in force: the one set, or current + free bytes less a safety margin.
uint64_t budget(const c10::Device& device);

// "cuda" means the current CUDA device: budgets and stats are kept per device index.
c10::Device canonical_device(c10::Device device);

// Counts the bytes of meta tensors allocated on this thread while it lives. Nested scopes
// are not allowed. Meta storage has no data, so the count is what the same allocations
// would take on a real device.
class MetaAllocationScope {
 public:
  MetaAllocationScope();
  ~MetaAllocationScope();
  MetaAllocationScope(const MetaAllocationScope&) = delete;
  MetaAllocationScope& operator=(const MetaAllocationScope&) = delete;

  uint64_t current() const;
  uint64_t peak() const;
  void add_temporary(uint64_t bytes);  // a transient allocation the simulation cannot see

  // Timelines (plan_timeline.h): from now on, count windows — the most held since the last
  // take_window(), and how much of it the forward had allocated (allocations made while
  // set_backward(false), the start) at that moment.
  struct Window {
    uint64_t live = 0;             // held when the window was taken
    uint64_t peak = 0;             // the most held during the window
    uint64_t forward_at_peak = 0;  // of `peak`, what the forward allocated
  };
  void record_windows();
  void set_backward(bool backward);  // which phase later allocations belong to
  Window take_window();              // the window since the last take; a new one starts

  struct Counter;

 private:
  std::shared_ptr<Counter> counter_;
};

// While it lives, CPU allocations made on this thread that would take what tensors hold on
// the CPU beyond `budget` bytes fail with an out-of-memory error, as a device that size
// would fail: koila's planned runs hold their budget as a hard limit, and retry with a
// smaller chunk when an estimate fell short. Nests; other devices are not affected here.
// Allocations LibTorch makes on its own worker threads during the run are counted in the
// figures but not refused (most kernels allocate on the calling thread). On CUDA (when
// built with it) the device's caching allocator is capped at the budget while a scope on
// it lives (setMemoryFraction), so that an allocation beyond it fails there too.
class BudgetScope {
 public:
  BudgetScope(const c10::Device& device, uint64_t budget);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  uint64_t previous_;
  c10::Device device_;
};

// Gives back what a device's allocator caches unused (CUDA's caching allocator), before a
// run retries with a smaller chunk; nothing to do on the CPU.
void release_cached_memory(const c10::Device& device);

// The bytes that allocations made on this thread while it lives hold (wherever they are
// freed), and their peak: what one run or probe takes, whatever other threads do meanwhile.
// Exact on the CPU. On other devices, and when 256 are already alive, the device's own
// figures since it started (other threads included; its peak is reset).
class RunMemory {
 public:
  explicit RunMemory(const c10::Device& device);
  ~RunMemory();
  RunMemory(const RunMemory&) = delete;
  RunMemory& operator=(const RunMemory&) = delete;

  uint64_t current() const;
  uint64_t peak() const;
  // The most it held plus what it asked for when an allocation of its thread went over
  // koila's budget: what it needed at least, however little other threads left it. 0 when
  // none did, on other devices than the CPU (their allocators do not say), and when the
  // device itself ran out (set_cpu_limit's limit, as a real device's).
  uint64_t refused() const;

 private:
  c10::Device device_;
  int slot_ = -1;
  uint64_t start_ = 0;
};

namespace testing {
// Makes CPU allocations beyond `bytes` held fail with an out-of-memory error, as a real
// device would (0 = no limit). For tests of the out-of-memory paths only.
void set_cpu_limit(uint64_t bytes);
}  // namespace testing

}  // namespace koila
