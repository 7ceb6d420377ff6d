#include "memory/cpu_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "base/libtorch_compat.h"
#include "memory/accounting.h"

namespace koila {

// ---- CPU: a counting wrapper around LibTorch's default allocator -----------------------
//
// Each block carries a header in front of the data with its size, so that the deleter
// (a plain function pointer) can subtract it. The data pointer is also the context:
// LibTorch's MKLDNN paths allocate through raw_allocate, which requires data == context.

namespace memory_detail {

std::atomic<uint64_t> cpu_current{0};
std::atomic<uint64_t> cpu_peak{0};
thread_local uint64_t cpu_budget_in_force = 0;  // 0: none (see BudgetScope)

}  // namespace memory_detail

using memory_detail::charge;
using memory_detail::cpu_budget_in_force;
using memory_detail::cpu_current;
using memory_detail::cpu_peak;
using memory_detail::innermost_slot;
using memory_detail::note_refusal;
using memory_detail::raise_peak;
using memory_detail::slots;

namespace {

constexpr size_t kHeader = 64;  // keeps the default allocator's 64-byte alignment

std::atomic<uint64_t> cpu_limit{0};
c10::Allocator* cpu_inner = nullptr;

// What a block carries in front of its data: its size, and the RunMemory slot it is charged
// to with that slot's generation (see accounting.h).
struct BlockHeader {
  uint64_t size;
  int32_t slot;  // -1: none
  uint32_t generation;
};
static_assert(sizeof(BlockHeader) <= 64, "the header must fit in front of the data");

void cpu_delete(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeader;
  BlockHeader header;
  std::memcpy(&header, base, sizeof header);
  cpu_current.fetch_sub(header.size, std::memory_order_relaxed);
  if (header.slot >= 0 && slots[header.slot].generation.load(std::memory_order_relaxed) == header.generation)
    charge(header.slot, -static_cast<int64_t>(header.size));
  cpu_inner->raw_deallocate(base);
}

class TrackingCpuAllocator final : public compat::Allocator {
 public:
  c10::DeleterFnPtr raw_deleter() const override { return &cpu_delete; }

 protected:
  c10::DataPtr make(size_t bytes) const override {
    const c10::Device device(c10::kCPU);
    if (bytes == 0) return {nullptr, nullptr, &cpu_delete, device};
    const uint64_t now = cpu_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    const uint64_t limit = cpu_limit.load(std::memory_order_relaxed);
    if (limit != 0 && now > limit) {  // as a device that ran out: says nothing of the run
      cpu_current.fetch_sub(bytes, std::memory_order_relaxed);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: tried to allocate ", bytes, " bytes with ",
                       now - bytes, " held and a limit of ", limit);
    }
    if (cpu_budget_in_force != 0 && now > cpu_budget_in_force) {
      cpu_current.fetch_sub(bytes, std::memory_order_relaxed);
      note_refusal(bytes);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory within koila's budget: tried to allocate ", bytes,
                       " bytes with ", now - bytes, " held and a budget of ", cpu_budget_in_force);
    }
    void* base;
    try {
      base = cpu_inner->raw_allocate(bytes + kHeader);
    } catch (...) {
      cpu_current.fetch_sub(bytes, std::memory_order_relaxed);
      throw;
    }
    BlockHeader header{bytes, innermost_slot, 0};
    if (header.slot >= 0) {
      header.generation = slots[header.slot].generation.load(std::memory_order_relaxed);
      charge(header.slot, static_cast<int64_t>(bytes));
    }
    std::memcpy(base, &header, sizeof header);
    raise_peak(cpu_peak, now);
    void* data = static_cast<char*>(base) + kHeader;
    return {data, data, &cpu_delete, device};
  }
};

TrackingCpuAllocator tracking_cpu_allocator;

void install() {
  cpu_inner = c10::GetDefaultCPUAllocator();
  c10::SetCPUAllocator(&tracking_cpu_allocator, /*priority=*/100);
  memory_detail::install_meta_allocator();
}

// Installed as the library loads, so that tensors made before the first koila call count.
// (koila_objects is an OBJECT library: every object file, this one included, is linked.)
const bool installed_at_load = (ensure_memory_tracking(), true);

}  // namespace

void ensure_memory_tracking() {
  static std::once_flag once;
  std::call_once(once, install);
}

namespace testing {
void set_cpu_limit(uint64_t bytes) { cpu_limit.store(bytes); }
}  // namespace testing

}  // namespace koila
