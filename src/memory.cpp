#include "memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

#include "error.h"
#include "libtorch_compat.h"

#ifdef KOILA_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace koila {
namespace {

void raise_peak(std::atomic<uint64_t>& peak, uint64_t value) {
  uint64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

// ---- CPU: a counting wrapper around LibTorch's default allocator -----------------------
//
// Each block carries a header in front of the data with its size, so that the deleter
// (a plain function pointer) can subtract it. The data pointer is also the context:
// LibTorch's MKLDNN paths allocate through raw_allocate, which requires data == context.

constexpr size_t kHeader = 64;  // keeps the default allocator's 64-byte alignment

std::atomic<uint64_t> cpu_current{0};
std::atomic<uint64_t> cpu_peak{0};
std::atomic<uint64_t> cpu_limit{0};
thread_local uint64_t cpu_budget_in_force = 0;  // 0: none (see BudgetScope)
c10::Allocator* cpu_inner = nullptr;

// ---- Run accounting (RunMemory): slots that follow what one thread's allocations hold ----
//
// A block's header records the slot that was innermost on its thread when it was allocated
// and the slot's generation, so that freeing it (on any thread) is charged back to the
// same slot and its enclosing ones, and not at all once the slot has been reused.

constexpr int kSlots = 256;

struct Slot {
  std::atomic<bool> busy{false};
  std::atomic<uint32_t> generation{0};
  std::atomic<int64_t> live{0};
  std::atomic<uint64_t> peak{0};
  std::atomic<uint64_t> refused{0};  // see RunMemory::refused()
  std::atomic<int> parent{-1};
};

Slot slots[kSlots];
thread_local int innermost_slot = -1;

struct BlockHeader {
  uint64_t size;
  int32_t slot;  // -1: none
  uint32_t generation;
};
static_assert(sizeof(BlockHeader) <= 64, "the header must fit in front of the data");

void charge(int slot, int64_t bytes) {
  for (int s = slot; s >= 0; s = slots[s].parent) {
    const int64_t now = slots[s].live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    if (bytes > 0) raise_peak(slots[s].peak, static_cast<uint64_t>(std::max<int64_t>(now, 0)));
  }
}

// An allocation of `bytes` on this thread went over koila's budget: each slot it would
// have been charged to notes what it held plus the request.
void note_refusal(uint64_t bytes) {
  for (int s = innermost_slot; s >= 0; s = slots[s].parent) {
    const uint64_t held = static_cast<uint64_t>(std::max<int64_t>(slots[s].live.load(std::memory_order_relaxed), 0));
    raise_peak(slots[s].refused, held + bytes);
  }
}

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

#ifdef KOILA_WITH_CUDA
// CUDA: the caching allocator of the device is capped at the budget (as a fraction of the
// device's memory) while any scope on it lives; the cap is lifted when the last one ends.
std::mutex cuda_cap_mutex;
std::map<int, int> cuda_caps;  // device index -> live scopes

void cap_cuda(const c10::Device& device, uint64_t budget) {
  const int index = canonical_device(device).index();
  size_t free = 0, total = 0;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(index);
  const cudaError_t err = cudaMemGetInfo(&free, &total);
  cudaSetDevice(previous);
  if (err != cudaSuccess || total == 0) {
    cudaGetLastError();
    return;  // no cap: the planner's estimate alone keeps the run within the budget
  }
  std::lock_guard<std::mutex> lock(cuda_cap_mutex);
  ++cuda_caps[index];
  const double fraction = std::min(1.0, static_cast<double>(budget) / static_cast<double>(total));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, index);
}

void uncap_cuda(const c10::Device& device) {
  const int index = canonical_device(device).index();
  std::lock_guard<std::mutex> lock(cuda_cap_mutex);
  auto found = cuda_caps.find(index);
  if (found == cuda_caps.end()) return;
  if (--found->second == 0) {
    cuda_caps.erase(found);
    c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, index);
  }
}
#endif

}  // namespace

BudgetScope::BudgetScope(const c10::Device& device, uint64_t budget)
    : previous_(cpu_budget_in_force), device_(device) {
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

void release_cached_memory(const c10::Device& device) {
#ifdef KOILA_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#else
  (void)device;
#endif
}

RunMemory::RunMemory(const c10::Device& device) : device_(canonical_device(device)) {
  ensure_memory_tracking();
  if (!device_.is_cpu()) {
    reset_peak(device_);
    start_ = memory_stats(device_).current;
    return;
  }
  for (int s = 0; s < kSlots; ++s) {
    bool expected = false;
    if (slots[s].busy.compare_exchange_strong(expected, true)) {
      slot_ = s;
      break;
    }
  }
  if (slot_ < 0) {  // every slot taken: the device's own figures (other threads included)
    reset_peak(device_);
    start_ = memory_stats(device_).current;
    return;
  }
  Slot& slot = slots[slot_];
  slot.generation.fetch_add(1);
  slot.live.store(0);
  slot.peak.store(0);
  slot.refused.store(0);
  slot.parent = innermost_slot;
  innermost_slot = slot_;
}

RunMemory::~RunMemory() {
  if (slot_ < 0) return;
  innermost_slot = slots[slot_].parent;
  slots[slot_].generation.fetch_add(1);  // what it allocated is no longer charged to it
  slots[slot_].busy.store(false);
}

uint64_t RunMemory::current() const {
  if (slot_ >= 0) return static_cast<uint64_t>(std::max<int64_t>(slots[slot_].live.load(), 0));
  const uint64_t now = memory_stats(device_).current;
  return now > start_ ? now - start_ : 0;
}

uint64_t RunMemory::refused() const { return slot_ >= 0 ? slots[slot_].refused.load() : 0; }

uint64_t RunMemory::peak() const {
  if (slot_ >= 0) return slots[slot_].peak.load();
  const uint64_t peak = memory_stats(device_).peak;
  return peak > start_ ? peak - start_ : 0;
}

namespace {

// ---- Meta: counts what meta tensors would take --------------------------------------------

thread_local std::shared_ptr<MetaAllocationScope::Counter> active_meta_counter;

}  // namespace

struct MetaAllocationScope::Counter {
  std::atomic<uint64_t> current{0};
  std::atomic<uint64_t> peak{0};
  // Windows (timelines only, see record_windows()): under the mutex.
  std::atomic<bool> windows{false};
  std::mutex mutex;
  bool backward = false;  // allocations from now on are the backward's
  uint64_t forward = 0;   // bytes held that the forward allocated
  MetaAllocationScope::Window window;

  // Returns whether the allocation counts as the forward's.
  bool add(uint64_t bytes) {
    const uint64_t now = current.fetch_add(bytes) + bytes;
    raise_peak(peak, now);
    if (!windows.load()) return false;
    std::lock_guard<std::mutex> lock(mutex);
    if (!backward) forward += bytes;
    if (now >= window.peak) {
      window.peak = now;
      window.forward_at_peak = forward;
    }
    return !backward;
  }
  void remove(uint64_t bytes, bool was_forward) {
    current.fetch_sub(bytes);
    if (!was_forward) return;
    std::lock_guard<std::mutex> lock(mutex);
    forward -= bytes;
  }
};

namespace {

struct MetaRecord {
  uint64_t bytes;
  bool forward;
  std::shared_ptr<MetaAllocationScope::Counter> counter;
};

void meta_delete(void* context) {
  auto* record = static_cast<MetaRecord*>(context);
  if (record == nullptr) return;
  record->counter->remove(record->bytes, record->forward);
  delete record;
}

class TrackingMetaAllocator final : public compat::Allocator {
 public:
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

 protected:
  c10::DataPtr make(size_t bytes) const override {
    const c10::Device device(c10::kMeta);
    const auto& counter = active_meta_counter;
    if (!counter || bytes == 0) return {nullptr, nullptr, &meta_delete, device};
    const bool forward = counter->add(bytes);
    return {nullptr, new MetaRecord{bytes, forward, counter}, &meta_delete, device};
  }
};

TrackingMetaAllocator tracking_meta_allocator;

void install() {
  cpu_inner = c10::GetDefaultCPUAllocator();
  c10::SetCPUAllocator(&tracking_cpu_allocator, /*priority=*/100);
  c10::SetAllocator(c10::kMeta, &tracking_meta_allocator, /*priority=*/100);
}

// Installed as the library loads, so that tensors made before the first koila call count.
const bool installed_at_load = (ensure_memory_tracking(), true);

uint64_t read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return UINT64_MAX;
  try {
    return std::stoull(word);
  } catch (...) {
    return UINT64_MAX;
  }
}

uint64_t cpu_free_bytes() {
  uint64_t available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t value = 0;
  std::string unit;
  while (meminfo >> key >> value) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:") {
      available = value * 1024;
      break;
    }
  }
  if (available == 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) available = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  }
  // A cgroup (container) limit may be tighter than the machine.
  const uint64_t limit = read_number("/sys/fs/cgroup/memory.max");
  const uint64_t used = read_number("/sys/fs/cgroup/memory.current");
  if (limit != UINT64_MAX && used != UINT64_MAX) available = std::min(available, limit > used ? limit - used : 0);
  return available;
}

std::mutex budget_mutex;
std::map<std::string, uint64_t>& budgets() {
  static std::map<std::string, uint64_t> map;
  return map;
}

#ifndef KOILA_WITH_CUDA
[[noreturn]] void no_cuda() {
  fail(KOILA_ERROR_DEVICE, "koila was built against a LibTorch without CUDA; CUDA memory is not available");
}
#endif

}  // namespace

void ensure_memory_tracking() {
  static std::once_flag once;
  std::call_once(once, install);
}

c10::Device canonical_device(c10::Device device) {
  if (device.is_cuda() && !device.has_index()) {
#ifdef KOILA_WITH_CUDA
    return c10::Device(c10::kCUDA, c10::cuda::current_device());
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
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(canonical_device(device).index());
  s.current = static_cast<uint64_t>(stats.allocated_bytes[0].current);  // [0]: all pools
  s.peak = static_cast<uint64_t>(stats.allocated_bytes[0].peak);
  return s;
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
  c10::cuda::CUDACachingAllocator::resetPeakStats(canonical_device(device).index());
#else
  no_cuda();
#endif
}

uint64_t free_bytes(const c10::Device& device) {
  if (device.is_cpu()) return cpu_free_bytes();
#ifdef KOILA_WITH_CUDA
  const c10::Device d = canonical_device(device);
  size_t free = 0, total = 0;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(d.index());
  const cudaError_t err = cudaMemGetInfo(&free, &total);
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(KOILA_ERROR_DEVICE, std::string("cudaMemGetInfo failed on ") + d.str() + ": " + cudaGetErrorString(err));
  }
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
  const int64_t cached = stats.reserved_bytes[0].current - stats.allocated_bytes[0].current;
  return free + static_cast<uint64_t>(std::max<int64_t>(cached, 0));
#else
  no_cuda();
#endif
}

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

MetaAllocationScope::MetaAllocationScope() : counter_(std::make_shared<Counter>()) {
  ensure_memory_tracking();
  if (active_meta_counter) fail(KOILA_ERROR_INTERNAL, "nested meta allocation scopes");
  active_meta_counter = counter_;
}

MetaAllocationScope::~MetaAllocationScope() { active_meta_counter.reset(); }

uint64_t MetaAllocationScope::current() const { return counter_->current.load(); }
uint64_t MetaAllocationScope::peak() const { return counter_->peak.load(); }
void MetaAllocationScope::add_temporary(uint64_t bytes) { counter_->remove(bytes, counter_->add(bytes)); }

void MetaAllocationScope::record_windows() {
  Counter& c = *counter_;
  std::lock_guard<std::mutex> lock(c.mutex);
  c.windows.store(true);
  c.window = Window{c.current.load(), c.current.load(), c.forward};
}

void MetaAllocationScope::set_backward(bool backward) {
  std::lock_guard<std::mutex> lock(counter_->mutex);
  counter_->backward = backward;
}

MetaAllocationScope::Window MetaAllocationScope::take_window() {
  Counter& c = *counter_;
  std::lock_guard<std::mutex> lock(c.mutex);
  Window w = c.window;
  w.live = c.current.load();
  c.window = Window{w.live, w.live, c.forward};
  return w;
}

namespace testing {
void set_cpu_limit(uint64_t bytes) { cpu_limit.store(bytes); }
}  // namespace testing

}  // namespace koila
