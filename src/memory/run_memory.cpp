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
thread_local char thread_token = 0;

void charge(int slot, int64_t bytes) {
  if (slot < 0) return;
  constexpr auto relaxed = std::memory_order_relaxed;
  if (slots[slot].owner.load(relaxed) != &thread_token) {  // a block freed on another thread
    for (int s = slot; s >= 0; s = slots[s].parent.load(relaxed)) {
      const int64_t now = slots[s].foreign.fetch_add(bytes, relaxed) + bytes;
      if (bytes <= 0) continue;  // (allocations are charged on their own thread: see Slot)
      const uint64_t held = static_cast<uint64_t>(std::max<int64_t>(now + slots[s].own.load(relaxed), 0));
      raise_peak(slots[s].peak, held);
      raise_peak(slots[s].window_peak, held);
    }
    return;
  }
  for (int s = slot; s >= 0; s = slots[s].parent.load(relaxed)) {  // the chain is this thread's
    Slot& x = slots[s];
    const int64_t own = x.own.load(relaxed) + bytes;
    x.own.store(own, relaxed);
    if (bytes <= 0) continue;
    const uint64_t held = static_cast<uint64_t>(std::max<int64_t>(own + x.foreign.load(relaxed), 0));
    if (held > x.peak.load(relaxed)) x.peak.store(held, relaxed);
    if (held > x.window_peak.load(relaxed)) x.window_peak.store(held, relaxed);
  }
}

void note_refusal(uint64_t bytes) {
  for (int s = innermost_slot; s >= 0; s = slots[s].parent) {
    const uint64_t held = static_cast<uint64_t>(std::max<int64_t>(slots[s].live(), 0));
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
    restart_device_peak(device_);
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
    restart_device_peak(device_);
    start_ = memory_stats(device_).current;
    return;
  }
  Slot& slot = slots[slot_];
  slot.generation.fetch_add(1);
  slot.own.store(0);
  slot.foreign.store(0);
  slot.owner.store(&memory_detail::thread_token);
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
  if (slot_ >= 0) return static_cast<uint64_t>(std::max<int64_t>(slots[slot_].live(), 0));
  const uint64_t now = memory_stats(device_).current;
  return now > start_ ? now - start_ : 0;
}

uint64_t RunMemory::refused() const { return slot_ >= 0 ? slots[slot_].refused.load() : 0; }

uint64_t RunMemory::peak() const {
  if (slot_ >= 0) return slots[slot_].peak.load();
  const uint64_t peak = device_peak(device_);
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
