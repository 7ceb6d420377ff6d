#include "memory/machine_memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "base/error.h"

namespace koila {
namespace {

// A file the kernel writes on each read (/proc, /sys), opened once and read from its start
// with pread: a plan reads the machine's free memory every 50 ms (budget.cpp), and opening
// three files by path with std::ifstream each time took 15 us hot and several times that
// cold. (The descriptors are shared with a forked child; pread keeps no offset to share.)
class KernelFile {
 public:
  explicit KernelFile(const char* path) : fd_(::open(path, O_RDONLY | O_CLOEXEC)) {}
  KernelFile(const KernelFile&) = delete;
  KernelFile& operator=(const KernelFile&) = delete;

  // Its text, up to `size` - 1 bytes, into `buffer`; false when it cannot be read.
  bool read(char* buffer, size_t size) const {
    if (fd_ < 0) return false;
    ssize_t n;
    do {
      n = ::pread(fd_, buffer, size - 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    buffer[n] = '\0';
    return true;
  }

 private:
  int fd_;
};

// The number a cgroup file holds, UINT64_MAX for "max" or none.
uint64_t read_number(const KernelFile& file) {
  char text[64];
  if (!file.read(text, sizeof text)) return UINT64_MAX;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || errno == ERANGE) return UINT64_MAX;  // (also "max")
  return static_cast<uint64_t>(value);
}

// /proc/meminfo's MemAvailable in bytes, 0 when it does not say.
uint64_t mem_available(const KernelFile& meminfo) {
  char text[4096];  // (it is the third line; the file is about 1.5 KB)
  if (!meminfo.read(text, sizeof text)) return 0;
  static constexpr char kKey[] = "MemAvailable:";
  const char* line = std::strstr(text, kKey);
  if (!line) return 0;
  const char* number = line + sizeof kKey - 1;
  char* end = nullptr;
  const unsigned long long kib = std::strtoull(number, &end, 10);
  return end == number ? 0 : static_cast<uint64_t>(kib) * 1024;
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
    fail(Code::OutOfMemory, "a tensor of " + std::to_string(bytes) + " bytes exceeds the " + std::to_string(physical) +
                                " bytes of memory this machine has");
}

uint64_t cpu_free_bytes() {
  // Never destroyed: a plan made by another static object's destructor at exit still reads
  // them (the descriptors close with the process).
  static const KernelFile& meminfo = *new KernelFile("/proc/meminfo");
  static const KernelFile& cgroup_max = *new KernelFile("/sys/fs/cgroup/memory.max");
  static const KernelFile& cgroup_current = *new KernelFile("/sys/fs/cgroup/memory.current");
  uint64_t available = mem_available(meminfo);
  if (available == 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) available = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  }
  // A cgroup (container) limit may be tighter than the machine.
  const uint64_t limit = read_number(cgroup_max);
  const uint64_t used = read_number(cgroup_current);
  if (limit != UINT64_MAX && used != UINT64_MAX) available = std::min(available, limit > used ? limit - used : 0);
  return available;
}

}  // namespace koila
