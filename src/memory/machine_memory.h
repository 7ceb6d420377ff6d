// What the machine itself can hold, checked before an allocation is asked for, and what it
// could still give this process now.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace koila {

// Refuses (Code::OutOfMemory) to allocate more than the machine could ever hold,
// before asking the allocator (which on Linux may overcommit and let the process be killed
// later). Other devices than the CPU fail cleanly by themselves.
void check_allocation(uint64_t bytes, const c10::Device& device);

// Bytes of CPU memory the process could still be given: what the kernel reports available
// (/proc/meminfo's MemAvailable, else the free pages), or less where its cgroup's
// (container's) limit is tighter. free_bytes (device_memory.h) for the CPU.
uint64_t cpu_free_bytes();

}  // namespace koila
