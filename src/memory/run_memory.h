// What one run takes: the bytes that the allocations of one thread hold, which the CPU
// tracking allocator (cpu_allocator.h) charges to per-thread slots.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

namespace koila {

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

  // Windows of what it held (calibration op by op, plan/estimate.cpp): what it holds now and
  // the most it held since the last take (or since it started); a new window starts. Only
  // where its figures are its thread's own (the CPU's slots): nullopt elsewhere.
  struct Window {
    uint64_t live = 0;
    uint64_t peak = 0;
  };
  std::optional<Window> take_window();

 private:
  c10::Device device_;
  int slot_ = -1;
  uint64_t start_ = 0;
};

}  // namespace koila
