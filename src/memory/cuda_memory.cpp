// CUDA memory: only in builds against a CUDA LibTorch (see cuda_memory.h).
#ifdef KOILA_WITH_CUDA

#include "memory/cuda_memory.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#if __has_include(<c10/cuda/CUDAAllocatorConfig.h>)
#include <c10/cuda/CUDAAllocatorConfig.h>
#define KOILA_CUDA_ALLOCATOR_CONFIG 1
#endif

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "base/error.h"
#include "memory/device_memory.h"

namespace koila {
namespace memory_detail {
namespace {

// The budgets of the live BudgetScopes of each device (cap_cuda, uncap_cuda): the cap in
// force is the smallest, so that a scope nested in another (a calibration probe within a
// plan's run) tightens the cap while it lives and the outer one's comes back after it.
std::mutex cuda_cap_mutex;
std::map<int, std::multiset<uint64_t>> cuda_caps;  // device index -> budgets of live scopes

// The device's index, once LibTorch's CUDA state is set up. Its caching allocator answers
// for a device only after that ("Invalid device argument ... did you call init?"), which
// happens at the first CUDA tensor: a program whose first call asks for a budget or figures
// (the koila command asks for the budget first) met that error. A device the machine lacks
// is refused here.
c10::DeviceIndex ready(const c10::Device& device) {
  const c10::Device d = canonical_device(device);
  static std::once_flag once;  // (an exception leaves it unset: the next call tries again)
  std::call_once(once, [] { (void)at::empty({0}, at::TensorOptions().device(at::kCUDA)); });
  const int count = c10::cuda::device_count();
  if (d.index() < 0 || d.index() >= count)
    fail(Code::Device,
         "device " + d.str() + " is not available: this machine has " + std::to_string(count) + " CUDA device(s)");
  return d.index();
}

// The driver's free and total bytes of a device (the current device is left as it was); on
// an error, which is cleared, its code.
cudaError_t device_memory_info(int index, size_t* free, size_t* total) {
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(index);
  const cudaError_t err = cudaMemGetInfo(free, total);
  cudaSetDevice(previous);
  if (err != cudaSuccess) cudaGetLastError();
  return err;
}

// Under cuda_cap_mutex. The caching allocator's cap (setMemoryFraction) bounds the memory it
// reserves from the device, and it is checked only when the allocator asks the device for
// more: blocks it already holds unused are handed out without it. So when it holds more
// than the cap, what it caches unused goes back to the device first: then every allocation
// the cap allows is within the budget, however the allocator hands it out (the cap is on
// reserved bytes, which are at least the allocated bytes that budgets count).
void apply_cap(int index, uint64_t cap) {
  size_t free = 0, total = 0;
  if (device_memory_info(index, &free, &total) != cudaSuccess || total == 0)
    return;  // no cap: the planner's estimate alone keeps the run within the budget
  const double fraction = std::min(1.0, static_cast<double>(cap) / static_cast<double>(total));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, index);
  if (fraction >= 1.0) return;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  if (static_cast<uint64_t>(std::max<int64_t>(stats.reserved_bytes[0].current, 0)) > cap)
    c10::cuda::CUDACachingAllocator::emptyCache();
}

}  // namespace

c10::DeviceIndex current_cuda_device() { return c10::cuda::current_device(); }

MemoryStats cuda_memory_stats(const c10::Device& device) {
  MemoryStats s;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(ready(device));
  s.current = static_cast<uint64_t>(stats.allocated_bytes[0].current);  // [0]: all pools
  s.peak = static_cast<uint64_t>(stats.allocated_bytes[0].peak);
  return s;
}

void reset_cuda_peak(const c10::Device& device) { c10::cuda::CUDACachingAllocator::resetPeakStats(ready(device)); }

uint64_t cuda_free_bytes(const c10::Device& device) {
  const c10::Device d(c10::kCUDA, ready(device));
  size_t free = 0, total = 0;
  const cudaError_t err = device_memory_info(d.index(), &free, &total);
  if (err != cudaSuccess)
    fail(Code::Device, std::string("cudaMemGetInfo failed on ") + d.str() + ": " + cudaGetErrorString(err));
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
  const int64_t cached = stats.reserved_bytes[0].current - stats.allocated_bytes[0].current;
  return free + static_cast<uint64_t>(std::max<int64_t>(cached, 0));
}

uint64_t cuda_held_unreleasable(const c10::Device& device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(ready(device));
  return static_cast<uint64_t>(std::max<int64_t>(stats.inactive_split_bytes[0].current, 0));  // [0]: all pools
}

void warm_cuda_libraries(const c10::Device& device) {
  // LibTorch gives cuBLAS a workspace from the caching allocator at the first product on
  // each (handle, stream), and cuBLASLt (a linear layer's product with its bias) one of its
  // own in some versions; both are kept for the process's lifetime. Handles are per
  // thread: a backward's products run on autograd's thread for the device, which the small
  // backward here reaches.
  thread_local std::set<std::pair<int, c10::StreamId>> warmed;
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device.index());
  if (!warmed.insert({device.index(), stream.id()}).second) return;
  c10::cuda::CUDAGuard on(device);
  c10::AutoGradMode grad(true);
  try {
    const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
    const at::Tensor a = at::ones({16, 16}, options);
    const at::Tensor w = at::ones({16, 16}, options).requires_grad_(true);
    const at::Tensor bias = at::zeros({16}, options).requires_grad_(true);
    at::linear(at::mm(a, a), w, bias).sum().backward();
  } catch (const std::exception&) {
    // Best effort (under InferenceMode no backward runs): a measurement may then count a
    // workspace as the run's, which errs high.
  }
}

void release_cuda_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }

bool cuda_expandable_segments() {
#ifdef KOILA_CUDA_ALLOCATOR_CONFIG
  return c10::cuda::CUDACachingAllocator::CUDAAllocatorConfig::expandable_segments();
#else
  return false;  // (LibTorch before 2.2 has no header for its configuration; 1.13 has no such segments)
#endif
}

void cap_cuda(const c10::Device& device, uint64_t budget) {
  const int index = ready(device);
  std::lock_guard<std::mutex> lock(cuda_cap_mutex);
  std::multiset<uint64_t>& live = cuda_caps[index];
  live.insert(budget);
  apply_cap(index, *live.begin());
}

void uncap_cuda(const c10::Device& device, uint64_t budget) {
  const int index = canonical_device(device).index();
  std::lock_guard<std::mutex> lock(cuda_cap_mutex);
  auto found = cuda_caps.find(index);
  if (found == cuda_caps.end()) return;
  auto it = found->second.find(budget);
  if (it != found->second.end()) found->second.erase(it);
  if (found->second.empty()) {
    cuda_caps.erase(found);
    c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, index);
  } else {
    apply_cap(index, *found->second.begin());
  }
}

}  // namespace memory_detail
}  // namespace koila

#endif  // KOILA_WITH_CUDA
