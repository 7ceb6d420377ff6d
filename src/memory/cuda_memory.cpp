// CUDA memory: only in builds against a CUDA LibTorch (see cuda_memory.h).
#ifdef KOILA_WITH_CUDA

#include "memory/cuda_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "base/error.h"
#include "memory/device_memory.h"

namespace koila {
namespace memory_detail {
namespace {

// The devices whose caching allocator a live BudgetScope caps (cap_cuda, uncap_cuda).
std::mutex cuda_cap_mutex;
std::map<int, int> cuda_caps;  // device index -> live scopes

}  // namespace

c10::DeviceIndex current_cuda_device() { return c10::cuda::current_device(); }

MemoryStats cuda_memory_stats(const c10::Device& device) {
  MemoryStats s;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(canonical_device(device).index());
  s.current = static_cast<uint64_t>(stats.allocated_bytes[0].current);  // [0]: all pools
  s.peak = static_cast<uint64_t>(stats.allocated_bytes[0].peak);
  return s;
}

void reset_cuda_peak(const c10::Device& device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(canonical_device(device).index());
}

uint64_t cuda_free_bytes(const c10::Device& device) {
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
}

void release_cuda_cache() { c10::cuda::CUDACachingAllocator::emptyCache(); }

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

}  // namespace memory_detail
}  // namespace koila

#endif  // KOILA_WITH_CUDA
