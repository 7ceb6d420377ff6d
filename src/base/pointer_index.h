// A map from pointers (graph nodes, autograd nodes, tensors) to small numbers (positions in
// an order), for the walks every plan, evaluation and backward makes over a whole graph:
// open addressing in one array, so that a graph of a thousand nodes costs one allocation
// instead of one a node (std::unordered_map).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace koila {

template <class T>
class PointerIndex {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  explicit PointerIndex(size_t expected = 64) { rehash(capacity_for(expected)); }

  // The number stored for `node`, or kAbsent.
  uint32_t find(const T* node) const {
    for (size_t i = slot_of(node);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.node == node) return s.value;
      if (s.node == nullptr) return kAbsent;
    }
  }
  bool contains(const T* node) const { return find(node) != kAbsent; }

  // Stores `value` for `node` unless it has one; returns whether it was stored.
  bool insert(const T* node, uint32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    for (size_t i = slot_of(node);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
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
    for (const T* key : keys) {
      size_t i = slot_of(key), probes = 0;
      while (slots_[i].node != key && ++probes < slots_.size()) i = (i + 1) & mask_;  // (emptied slots skipped)
      if (slots_[i].node != key) {  // not a key of the index after all: every slot emptied
        std::fill(slots_.begin(), slots_.end(), Slot{});
        break;
      }
      slots_[i] = Slot{};
    }
    size_ = 0;
  }

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
  size_t slot_of(const T* node) const {
    // Objects lie apart by at least their size: mix the bits above the alignment.
    uint64_t h = reinterpret_cast<uintptr_t>(node);
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>(h >> 32) & mask_;
  }
  void rehash(size_t capacity) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.node) insert(s.node, s.value);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace koila
