// The counter of simulated (meta) allocations that the planner uses to estimate peaks: the
// allocator of meta tensors, installed with the CPU tracking allocator (cpu_allocator.h),
// counts what they would take on a real device.
#pragma once

#include <cstdint>
#include <memory>

namespace koila {

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

  // From now on, also feeds the allocations to a model of LibTorch's CUDA caching allocator
  // (caching_allocator_model.h; `expandable`: with expandable segments), for a simulation of a
  // run on CUDA. allocator_needed_peak(): the least cap on what that allocator reserves under
  // which the allocations counted so far succeed (0 without a model).
  void model_allocator(bool expandable);
  uint64_t allocator_needed_peak() const;

  // Timelines (plan/timeline.h): from now on, count windows — the most held since the last
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

}  // namespace koila
