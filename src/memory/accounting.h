// Internal to memory/: the state the tracking allocators share with the code that reads or
// steers them (memory_stats, RunMemory, BudgetScope, MetaAllocationScope). Other folders
// include the public headers (cpu_allocator.h, device_memory.h, run_memory.h, budget.h,
// meta_counter.h), never this one.
#pragma once

#include <atomic>
#include <cstdint>

namespace koila {
namespace memory_detail {

// Raises `peak` to `value` when it is higher (the CPU counters, the run slots and the meta
// counter keep their peaks so).
inline void raise_peak(std::atomic<uint64_t>& peak, uint64_t value) {
  uint64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {}
}

// ---- CPU counters (cpu_allocator.cpp) -----------------------------------------------------

extern std::atomic<uint64_t> cpu_current;          // bytes tensors hold on the CPU now
extern std::atomic<uint64_t> cpu_peak;             // the most held since the last reset_peak
extern thread_local uint64_t cpu_budget_in_force;  // 0: none (see BudgetScope)

// ---- Run accounting (RunMemory, run_memory.cpp) ------------------------------------------
//
// Slots that follow what one thread's allocations hold. A block's header records the slot
// that was innermost on its thread when it was allocated and the slot's generation, so that
// freeing it (on any thread) is charged back to the same slot and its enclosing ones, and
// not at all once the slot has been reused.

constexpr int kSlots = 256;

// A slot belongs to the thread that opened it (its RunMemory's): only that thread allocates
// into it (innermost_slot is per thread), so only it raises the peaks, and it keeps what it
// holds with plain loads and stores; blocks freed on other threads are kept apart, with
// atomic additions. (A locked addition per allocation and per free, and two for the peaks,
// were some 4,000 locked instructions a training step of a small DenseNet: tens of us.)
struct Slot {
  std::atomic<bool> busy{false};
  std::atomic<uint32_t> generation{0};
  std::atomic<int64_t> own{0};           // charged on the owner's thread (only it writes)
  std::atomic<int64_t> foreign{0};       // freed on other threads
  std::atomic<uint64_t> peak{0};         // written by the owner's thread only
  std::atomic<uint64_t> window_peak{0};  // the most held since RunMemory::take_window()
  std::atomic<uint64_t> refused{0};      // see RunMemory::refused()
  std::atomic<int> parent{-1};           // a slot of the same thread, or -1
  std::atomic<const void*> owner{nullptr};

  int64_t live() const { return own.load(std::memory_order_relaxed) + foreign.load(std::memory_order_relaxed); }
};

extern Slot slots[kSlots];
extern thread_local int innermost_slot;  // -1: none
// Its address tells the threads apart (Slot::owner).
extern thread_local char thread_token;

// Adds `bytes` (less than 0: frees them) to `slot` and the slots enclosing it.
void charge(int slot, int64_t bytes);
// An allocation of `bytes` on this thread went over koila's budget: each slot it would
// have been charged to notes what it held plus the request.
void note_refusal(uint64_t bytes);

// ---- Meta (meta_counter.cpp) ---------------------------------------------------------------

// Puts the meta counter's allocator in place for meta tensors; ensure_memory_tracking calls
// it once, after installing the CPU tracking allocator.
void install_meta_allocator();

}  // namespace memory_detail
}  // namespace koila
