#include "memory/reservations.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "memory/device_memory.h"

namespace koila {
namespace {

struct Entry {
  std::string device;
  uint64_t bytes;
  const RunMemory* usage;
};

std::mutex mutex;
std::condition_variable released;
std::map<size_t, Entry> alive;
std::map<std::string, uint64_t> ended_count;
size_t next_id = 0;

}  // namespace

Reservation::Reservation(const c10::Device& device, uint64_t bytes, const RunMemory& usage) {
  std::lock_guard<std::mutex> lock(mutex);
  id_ = next_id++;
  alive.emplace(id_, Entry{canonical_device(device).str(), bytes, &usage});
}

Reservation::~Reservation() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = alive.find(id_);
    ++ended_count[found->second.device];
    alive.erase(found);
  }
  released.notify_all();
}

uint64_t outstanding_reservations(const c10::Device& device) {
  const std::string key = canonical_device(device).str();
  std::lock_guard<std::mutex> lock(mutex);
  uint64_t total = 0;
  for (const auto& [id, e] : alive) {
    if (e.device != key) continue;
    const uint64_t used = e.usage->current();
    if (e.bytes > used) total += e.bytes - used;
  }
  return total;
}

size_t runs_alive(const c10::Device& device) {
  const std::string key = canonical_device(device).str();
  std::lock_guard<std::mutex> lock(mutex);
  size_t n = 0;
  for (const auto& [id, e] : alive) n += e.device == key;
  return n;
}

uint64_t runs_ended(const c10::Device& device) {
  std::lock_guard<std::mutex> lock(mutex);
  return ended_count[canonical_device(device).str()];
}

void wait_for_run_to_end(const c10::Device& device, uint64_t ended) {
  const std::string key = canonical_device(device).str();
  std::unique_lock<std::mutex> lock(mutex);
  released.wait(lock, [&] {
    if (ended_count[key] != ended) return true;
    for (const auto& [id, e] : alive)
      if (e.device == key) return false;
    return true;
  });
}

}  // namespace koila
