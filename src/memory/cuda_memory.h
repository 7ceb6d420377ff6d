// Internal to memory/: the figures of CUDA devices, from LibTorch's caching allocator and
// the CUDA runtime, and the cap a BudgetScope puts on a device's caching allocator. Only in
// builds against a CUDA LibTorch (KOILA_WITH_CUDA); device_memory.cpp and budget.cpp call
// them for CUDA devices, other folders the public headers (device_memory.h, budget.h).
#pragma once

#ifdef KOILA_WITH_CUDA

#include <c10/core/Device.h>

#include <cstdint>

#include "memory/device_memory.h"

namespace koila {
namespace memory_detail {

// The current CUDA device (what canonical_device makes of "cuda").
c10::DeviceIndex current_cuda_device();

// memory_stats, reset_peak and free_bytes of a CUDA device.
MemoryStats cuda_memory_stats(const c10::Device& device);
void reset_cuda_peak(const c10::Device& device);
uint64_t cuda_free_bytes(const c10::Device& device);
// held_unreleasable of a CUDA device: the caching allocator's inactive split bytes.
uint64_t cuda_held_unreleasable(const c10::Device& device);

// prepare_device of CUDA devices: a small matrix product and a linear layer on the device's
// current stream, once per thread, device and stream.
void warm_cuda_libraries(const c10::Device& device);

// release_cached_memory of CUDA devices: empties the caching allocator's cache.
void release_cuda_cache();

// Whether the caching allocator makes expandable segments (PYTORCH_CUDA_ALLOC_CONF's
// expandable_segments:True, LibTorch 2.1 and later; false before).
bool cuda_expandable_segments();

// The caching allocator of the device is capped (as a fraction of the device's memory) at
// the smallest budget of the scopes on it that live; when it holds more than that cap, what
// it caches unused goes back to the device first. The cap is lifted when the last one ends.
void cap_cuda(const c10::Device& device, uint64_t budget);
void uncap_cuda(const c10::Device& device, uint64_t budget);  // the budget its cap_cuda gave

}  // namespace memory_detail
}  // namespace koila

#endif  // KOILA_WITH_CUDA
