#include "memory/budget.h"

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
    auto found = budgets().find(canonical_device(device).str());
    if (found != budgets().end()) return found->second;
  }
  const uint64_t free = free_bytes(device);
  return memory_stats(device).current + free - free / 10;  // keep a tenth of what is free
}

// On the CPU the tracking allocator refuses what goes beyond cpu_budget_in_force
// (cpu_allocator.cpp); on CUDA the caching allocator is capped (cuda_memory.cpp).
BudgetScope::BudgetScope(const c10::Device& device, uint64_t budget) : previous_(cpu_budget_in_force), device_(device) {
  if (device.is_cpu()) cpu_budget_in_force = budget;
#ifdef KOILA_WITH_CUDA
  if (device.is_cuda()) cap_cuda(device, budget);
#endif
}
BudgetScope::~BudgetScope() {
  cpu_budget_in_force = previous_;
#ifdef KOILA_WITH_CUDA
  if (device_.is_cuda()) uncap_cuda(device_);
#endif
}

}  // namespace koila
