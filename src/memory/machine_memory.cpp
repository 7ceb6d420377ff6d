#include "memory/machine_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

#include "base/error.h"

namespace koila {
namespace {

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

}  // namespace

void check_allocation(uint64_t bytes, const c10::Device& device) {
  if (!device.is_cpu()) return;  // the CUDA allocator fails cleanly by itself
  static const uint64_t physical = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
                                 : std::numeric_limits<uint64_t>::max();
  }();
  if (bytes > physical)
    fail(KOILA_ERROR_OUT_OF_MEMORY, "a tensor of " + std::to_string(bytes) + " bytes exceeds the " +
                                        std::to_string(physical) + " bytes of memory this machine has");
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

}  // namespace koila
