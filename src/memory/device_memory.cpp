#include "memory/device_memory.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "base/error.h"
#include "memory/accounting.h"
#include "memory/cpu_allocator.h"
#include "memory/cuda_memory.h"
#include "memory/machine_memory.h"

namespace koila {

using memory_detail::cpu_current;
using memory_detail::cpu_peak;

namespace {

std::atomic<uint64_t> added_held{0};  // testing::set_held_unreleasable

#ifndef KOILA_WITH_CUDA
[[noreturn]] void no_cuda() {
  fail(Code::Device, "koila was built against a LibTorch without CUDA; CUDA memory is not available");
}
#endif

}  // namespace

c10::Device canonical_device(c10::Device device) {
  if (device.is_cuda() && !device.has_index()) {
#ifdef KOILA_WITH_CUDA
    return c10::Device(c10::kCUDA, memory_detail::current_cuda_device());
#else
    return c10::Device(c10::kCUDA, 0);
#endif
  }
  return device;
}

namespace {

// The device's own figures: the peak since the last reset of it (reset_peak or
// restart_device_peak).
MemoryStats raw_stats(const c10::Device& device) {
  ensure_memory_tracking();
  MemoryStats s;
  if (device.is_cpu()) {
    s.current = cpu_current.load();
    s.peak = std::max(cpu_peak.load(), s.current);
    return s;
  }
#ifdef KOILA_WITH_CUDA
  return memory_detail::cuda_memory_stats(device);
#else
  no_cuda();
#endif
}

void reset_raw_peak(const c10::Device& device) {
  ensure_memory_tracking();
  if (device.is_cpu()) {
    cpu_peak.store(cpu_current.load());
    return;
  }
#ifdef KOILA_WITH_CUDA
  memory_detail::reset_cuda_peak(device);
#else
  no_cuda();
#endif
}

// Per device: the most held since the last reset_peak, up to the last restart_device_peak.
std::mutex carried_mutex;
std::map<std::pair<int, int>, uint64_t> carried;  // (type, index) -> bytes

std::pair<int, int> key_of(const c10::Device& device) {
  const c10::Device d = canonical_device(device);
  return {static_cast<int>(d.type()), static_cast<int>(d.index())};
}

}  // namespace

MemoryStats memory_stats(const c10::Device& device) {
  MemoryStats s = raw_stats(device);
  std::lock_guard<std::mutex> lock(carried_mutex);
  const auto found = carried.find(key_of(device));
  if (found != carried.end()) s.peak = std::max(s.peak, found->second);
  return s;
}

void reset_peak(const c10::Device& device) {
  reset_raw_peak(device);
  std::lock_guard<std::mutex> lock(carried_mutex);
  carried.erase(key_of(device));
}

void restart_device_peak(const c10::Device& device) {
  const uint64_t peak = raw_stats(device).peak;
  std::lock_guard<std::mutex> lock(carried_mutex);
  uint64_t& kept = carried[key_of(device)];
  kept = std::max(kept, peak);
  reset_raw_peak(device);
}

uint64_t device_peak(const c10::Device& device) { return raw_stats(device).peak; }

uint64_t free_bytes(const c10::Device& device) {
  if (device.is_cpu()) return cpu_free_bytes();
#ifdef KOILA_WITH_CUDA
  return memory_detail::cuda_free_bytes(device);
#else
  no_cuda();
#endif
}

uint64_t held_unreleasable(const c10::Device& device) {
  uint64_t held = added_held.load();
#ifdef KOILA_WITH_CUDA
  if (device.is_cuda() && !allocator_expandable(device)) held += memory_detail::cuda_held_unreleasable(device);
#else
  (void)device;
#endif
  return held;
}

bool allocator_expandable(const c10::Device& device) {
#ifdef KOILA_WITH_CUDA
  return device.is_cuda() && memory_detail::cuda_expandable_segments();
#else
  (void)device;
  return false;
#endif
}

bool cuda_cap_follows_plan() {
  static const bool follows = [] {
    const char* value = std::getenv("KOILA_CUDA_CAP");
    return value == nullptr || std::string(value) != "budget";
  }();
  return follows;
}

void prepare_device(const c10::Device& device) {
#ifdef KOILA_WITH_CUDA
  if (device.is_cuda()) memory_detail::warm_cuda_libraries(canonical_device(device));
#else
  (void)device;
#endif
}

void release_cached_memory(const c10::Device& device) {
#ifdef KOILA_WITH_CUDA
  if (device.is_cuda()) memory_detail::release_cuda_cache();
#else
  (void)device;
#endif
}

namespace testing {
void set_held_unreleasable(uint64_t bytes) { added_held.store(bytes); }
}  // namespace testing

}  // namespace koila
