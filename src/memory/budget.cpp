#include "memory/budget.h"

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "memory/accounting.h"
#include "memory/cuda_memory.h"
#include "memory/device_memory.h"

namespace koila {

using memory_detail::cpu_budget_in_force;
#ifdef KOILA_WITH_CUDA
using memory_detail::cap_cuda;
using memory_detail::uncap_cuda;
#endif

namespace {

std::mutex budget_mutex;
std::map<std::string, uint64_t>& budgets() {
  static std::map<std::string, uint64_t> map;
  return map;
}

// The machine's free CPU memory, read at most every kFreeRefresh. The kernel computes
// /proc/meminfo and the cgroup's files at each read: opened by path at every plan they took
// 65 us, about what planning a small model's training step takes otherwise (read with pread
// from descriptors kept open, machine_memory.cpp, 5 us hot). Between readings, what koila's
// own tensors took since (or gave back) is subtracted from (added to) the figure read, so
// that koila's allocations show at once; other processes' show at the next reading.
constexpr std::chrono::milliseconds kFreeRefresh{50};

struct FreeReading {
  std::chrono::steady_clock::time_point at;
  uint64_t free = 0, in_use = 0;  // the machine's free bytes, and koila's in use then
  bool valid = false;
};

uint64_t cpu_free_now(uint64_t in_use) {
  static std::mutex mutex;
  static FreeReading last;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex);
  if (!last.valid || now - last.at >= kFreeRefresh || now < last.at) {
    last = FreeReading{now, free_bytes(c10::Device(c10::kCPU)), in_use, true};
    return last.free;
  }
  if (in_use >= last.in_use) {
    const uint64_t taken = in_use - last.in_use;
    return last.free > taken ? last.free - taken : 0;
  }
  return last.free + (last.in_use - in_use);
}

}  // namespace

void set_budget(const c10::Device& device, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(budget_mutex);
  if (bytes == 0)
    budgets().erase(canonical_device(device).str());
  else
    budgets()[canonical_device(device).str()] = bytes;
}

uint64_t budget(const c10::Device& device) {
  {
    std::lock_guard<std::mutex> lock(budget_mutex);
    if (!budgets().empty()) {  // (a device's name is made only where some budget was set)
      auto found = budgets().find(canonical_device(device).str());
      if (found != budgets().end()) return found->second;
    }
  }
  const uint64_t in_use = memory_stats(device).current;
  const uint64_t free = device.is_cpu() ? cpu_free_now(in_use) : free_bytes(device);
  return in_use + free - free / 10;  // keep a tenth of what is free
}

// On the CPU the tracking allocator refuses what goes beyond cpu_budget_in_force
// (cpu_allocator.cpp); on CUDA the caching allocator is capped (cuda_memory.cpp).
BudgetScope::BudgetScope(const c10::Device& device, uint64_t budget)
    : previous_(cpu_budget_in_force), budget_(budget), device_(device) {
  if (device.is_cpu()) cpu_budget_in_force = budget;
#ifdef KOILA_WITH_CUDA
  if (device.is_cuda()) cap_cuda(device, budget);
#endif
}
BudgetScope::~BudgetScope() {
  cpu_budget_in_force = previous_;
#ifdef KOILA_WITH_CUDA
  if (device_.is_cuda()) uncap_cuda(device_, budget_);
#endif
}

}  // namespace koila
