// What tensors hold on each device, and what it could still give out.
//
// CPU bytes are counted by a tracking allocator installed in front of LibTorch's default
// CPU allocator when the library loads (cpu_allocator.h). CUDA figures come from LibTorch's
// caching allocator, when koila is built against a CUDA LibTorch (KOILA_WITH_CUDA).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace koila {

struct MemoryStats {
  uint64_t current = 0;  // bytes held by tensors now
  uint64_t peak = 0;     // most held at once since the last reset
};

// `peak`: since the last reset_peak, whatever runs restarted the device's own figure since.
MemoryStats memory_stats(const c10::Device& device);
void reset_peak(const c10::Device& device);

// For a run measured by the device's own peak (RunMemory, where no slot follows it): restarts
// that figure, which device_peak then gives, while memory_stats still reports the most held
// since the last reset_peak. Before, each attempt of a planned run on CUDA reset the peak a
// caller had asked for: after a retry, koila_memory_stats showed the last attempt's alone.
void restart_device_peak(const c10::Device& device);
uint64_t device_peak(const c10::Device& device);

// Bytes the device could still give out: for CPU what the kernel reports available, for
// CUDA what the driver reports free plus what the caching allocator holds unused.
uint64_t free_bytes(const c10::Device& device);

// Bytes the device's allocator holds unused and cannot give back now: on CUDA, the free parts
// of the caching allocator's segments that also hold live tensors (its inactive split blocks;
// PyTorch's "non-releasable memory"). A cap on what the allocator reserves counts them, and a
// run can reuse them only where its blocks fit, so a plan counts them as taken (resnext50 in
// a forced split on an H200 ran out with 40 MiB of them beside its 250 MiB allocated). 0 on
// the CPU, and under expandable segments, whose free pages go back to the device.
uint64_t held_unreleasable(const c10::Device& device);

// "cuda" means the current CUDA device: budgets and stats are kept per device index.
c10::Device canonical_device(c10::Device device);

// Whether the device's allocator makes expandable segments (CUDA's caching allocator under
// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), as the planner's model of it needs to
// know (caching_allocator_model.h); false on the CPU.
bool allocator_expandable(const c10::Device& device);

// Whether a planned run on CUDA caps the caching allocator at what its plan needs (the
// default) rather than at the budget (KOILA_CUDA_CAP=budget, read once). See koila.h.
bool cuda_cap_follows_plan();

// Before a run or probe on `device` is measured: makes LibTorch take now, on this thread,
// what it keeps for the rest of the process once a library is first used there, so that no
// measurement counts it as what that run took. On CUDA, cuBLAS's workspace for this
// thread's handle and stream (32 MiB on Hopper, 8 MiB before), which a calibration probe
// otherwise measured as the graph's own and added to every later estimate. Once per
// thread, device and stream; nothing to do on the CPU.
void prepare_device(const c10::Device& device);

// Gives back what a device's allocator caches unused (CUDA's caching allocator), before a
// run retries with a smaller chunk; nothing to do on the CPU.
void release_cached_memory(const c10::Device& device);

namespace testing {
// Adds `bytes` to held_unreleasable on every device (the CPU included), to test how plans
// count what an allocator holds; 0 by default.
void set_held_unreleasable(uint64_t bytes);
}  // namespace testing

}  // namespace koila
