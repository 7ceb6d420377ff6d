#include "memory/run_memory.h"

#include <algorithm>
#include <atomic>
#include <optional>

#include "memory/accounting.h"
#include "memory/cpu_allocator.h"
#include "memory/device_memory.h"

namespace koila {

// ---- Run accounting: slots that follow what one thread's allocations hold ------------------
// (accounting.h says how a block is charged back to its slot)

namespace memory_detail {

Slot slots[kSlots];
thread_local int innermost_slot = -1;

void charge(int slot, int64_t bytes) {
  for (int s = slot; s >= 0; s = slots[s].parent) {
    const int64_t now = slots[s].live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    if (bytes <= 0) continue;
    const uint64_t held = static_cast<uint64_t>(std::max<int64_t>(now, 0));
    raise_peak(slots[s].peak, held);
    raise_peak(slots[s].window_peak, held);
  }
}

void note_refusal(uint64_t bytes) {
  for (int s = innermost_slot; s >= 0; s = slots[s].parent) {
    const uint64_t held = static_cast<uint64_t>(std::max<int64_t>(slots[s].live.load(std::memory_order_relaxed), 0));
    raise_peak(slots[s].refused, held + bytes);
  }
}

}  // namespace memory_detail

using memory_detail::innermost_slot;
using memory_detail::kSlots;
using memory_detail::Slot;
using memory_detail::slots;

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
  slot.window_peak.store(0);
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

std::optional<RunMemory::Window> RunMemory::take_window() {
  if (slot_ < 0) return std::nullopt;
  Slot& slot = slots[slot_];
  Window w;
  w.live = current();
  w.peak = std::max(slot.window_peak.exchange(w.live), w.live);
  return w;
}

}  // namespace koila
