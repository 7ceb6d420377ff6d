#include "memory/device_memory.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "memory/accounting.h"
#include "memory/cpu_allocator.h"
#include "memory/cuda_memory.h"
#include "memory/machine_memory.h"

namespace koila {

using memory_detail::cpu_current;
using memory_detail::cpu_peak;

namespace {

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

MemoryStats memory_stats(const c10::Device& device) {
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

void reset_peak(const c10::Device& device) {
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

uint64_t free_bytes(const c10::Device& device) {
  if (device.is_cpu()) return cpu_free_bytes();
#ifdef KOILA_WITH_CUDA
  return memory_detail::cuda_free_bytes(device);
#else
  no_cuda();
#endif
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

}  // namespace koila
