// A map from pointers (graph nodes, autograd nodes, tensors) to small numbers (positions in
// an order), for the walks every plan, evaluation and backward makes over a whole graph:
// open addressing in one array, so that a graph of a thousand nodes costs one allocation
// instead of one a node (std::unordered_map).
//
// The first kInlineSlots slots lie in the index itself: the indexes a training step makes
// (the .grad states a plan reads, the leaves a backward reaches, those it adds into) hold a
// few dozen pointers, and allocate nothing. (An array of a kilobyte or more is a "large"
// request to glibc's malloc, which first merges every small chunk freed since, LibTorch's
// thousands a step: 1-3 us an index. The merge then falls to the next large request, a
// tensor's, so a step as a whole did not get measurably faster: docs/benchmarks-log/log.md §25.)
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace koila {

template <class T>
class PointerIndex {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;
  static constexpr size_t kInlineSlots = 64;  // up to 32 pointers without an allocation

  // `expected`: how many pointers it will hold (it grows beyond).
  explicit PointerIndex(size_t expected = 0) {
    if (capacity_for(expected) > kInlineSlots) rehash(capacity_for(expected));
  }

  // The number stored for `node`, or kAbsent.
  uint32_t find(const T* node) const {
    const Slot* slots = data();
    for (size_t i = slot_of(node);; i = (i + 1) & mask_) {
      const Slot& s = slots[i];
      if (s.node == node) return s.value;
      if (s.node == nullptr) return kAbsent;
    }
  }
  bool contains(const T* node) const { return find(node) != kAbsent; }

  // Stores `value` for `node` unless it has one; returns whether it was stored.
  bool insert(const T* node, uint32_t value) {
    if ((size_ + 1) * 2 > capacity()) rehash(capacity() * 2);
    Slot* slots = data();
    for (size_t i = slot_of(node);; i = (i + 1) & mask_) {
      Slot& s = slots[i];
      if (s.node == node) return false;
      if (s.node == nullptr) {
        s = Slot{node, value};
        ++size_;
        return true;
      }
    }
  }
  size_t size() const { return size_; }

  // Empties the index and keeps its capacity, touching only the slots in use: `keys` are
  // every key inserted since it was made or last emptied (an index reused for every graph
  // of a thread costs what the graph filled, not a fresh array's allocation and zeroing).
  void clear(const std::vector<const T*>& keys) {
    Slot* slots = data();
    const size_t n = capacity();
    for (const T* key : keys) {
      size_t i = slot_of(key), probes = 0;
      while (slots[i].node != key && ++probes < n) i = (i + 1) & mask_;  // (emptied slots skipped)
      if (slots[i].node != key) {  // not a key of the index after all: every slot emptied
        std::fill(slots, slots + n, Slot{});
        break;
      }
      slots[i] = Slot{};
    }
    size_ = 0;
  }

  // Whether its slots are still those inside it (tests).
  bool is_inline() const { return heap_.empty(); }

 private:
  struct Slot {
    const T* node = nullptr;
    uint32_t value = kAbsent;
  };

  static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c < n * 2) c *= 2;
    return c;
  }
  // The slots: inside the index until it outgrows them, then on the heap. (No pointer to
  // the inline ones is kept, so that copies and moves need nothing of their own.)
  Slot* data() { return heap_.empty() ? inline_.data() : heap_.data(); }
  const Slot* data() const { return heap_.empty() ? inline_.data() : heap_.data(); }
  size_t capacity() const { return heap_.empty() ? kInlineSlots : heap_.size(); }
  size_t slot_of(const T* node) const {
    // Objects lie apart by at least their size: mix the bits above the alignment.
    uint64_t h = reinterpret_cast<uintptr_t>(node);
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>(h >> 32) & mask_;
  }
  // Moves every pointer into `capacity` (> kInlineSlots) slots on the heap.
  void rehash(size_t capacity) {
    std::vector<Slot> old(data(), data() + this->capacity());
    heap_.assign(capacity, Slot{});  // (inline_ is no longer read)
    mask_ = capacity - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.node) insert(s.node, s.value);
  }

  std::array<Slot, kInlineSlots> inline_{};
  std::vector<Slot> heap_;  // empty: the slots are inline_
  size_t mask_ = kInlineSlots - 1;
  size_t size_ = 0;
};

}  // namespace koila
