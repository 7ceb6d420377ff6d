#include "memory/caching_allocator_model.h"

#include <algorithm>

namespace koila {

namespace {

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

uint64_t CachingAllocatorModel::round_size(uint64_t bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize);
}

uint64_t CachingAllocatorModel::segment_size(uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded, kRoundLarge);
}

size_t CachingAllocatorModel::new_segment(bool small, uint64_t size) {
  Segment s;
  s.small = small;
  s.size = size;
  s.blocks.emplace(0, Block{size, true});
  segments_.push_back(std::move(s));
  const size_t id = segments_.size() - 1;
  free_[small].insert(FreeKey{size, id, 0});
  reserved_ += size;
  return id;
}

// Hands out `size` bytes from the free block at `offset` of `segment`, split as the allocator
// splits.
void CachingAllocatorModel::take(size_t segment, uint64_t offset, uint64_t size) {
  Segment& s = segments_[segment];
  Block& b = s.blocks.at(offset);
  free_[s.small].erase(FreeKey{b.size, segment, offset});
  const uint64_t remaining = b.size - size;
  const bool split = s.small || expandable_ ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (split) {
    b.size = size;
    s.blocks.emplace(offset + size, Block{remaining, true});
    free_[s.small].insert(FreeKey{remaining, segment, offset + size});
  }
  b.free = false;
  allocated_ += b.size;
  if (s.live++ == 0 && !expandable_) held_by_live_segments_ += s.size;
}

uint64_t CachingAllocatorModel::live_pages(const Segment& s) const {
  const uint64_t size = page(s.small);
  uint64_t pages = 0, last_page = UINT64_MAX;  // the last page counted
  for (const auto& [offset, b] : s.blocks) {
    if (b.free) continue;
    uint64_t first = offset / size;
    const uint64_t last = (offset + b.size - 1) / size;
    if (first == last_page) ++first;
    if (first <= last) pages += last - first + 1;
    last_page = last;
  }
  return pages * size;
}

void CachingAllocatorModel::note_peaks() {
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  uint64_t needed = held_by_live_segments_;
  if (expandable_) {
    needed = page(true) + page(false);  // the pages shared with what was in use before (see the header)
    for (const Segment& s : segments_) needed += live_pages(s);
  }
  needed_peak_ = std::max(needed_peak_, needed);
}

uint64_t CachingAllocatorModel::malloc(uint64_t bytes) {
  if (bytes == 0) return 0;
  const uint64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  std::set<FreeKey>& pool = free_[small];
  auto found = pool.lower_bound(FreeKey{size, 0, 0});
  size_t segment = 0;
  uint64_t offset = 0;
  if (found != pool.end()) {
    segment = std::get<1>(*found);
    offset = std::get<2>(*found);
  } else if (!expandable_) {
    segment = new_segment(small, segment_size(size));
  } else {
    // The pool's one segment maps pages at its end: its last block grows if free.
    size_t id = segments_.size();
    for (size_t i = 0; i < segments_.size(); ++i)
      if (segments_[i].small == small) id = i;
    if (id == segments_.size()) {
      id = new_segment(small, round_up(size, page(small)));
    } else {
      Segment& s = segments_[id];
      auto last = std::prev(s.blocks.end());
      const bool last_free = last->second.free;
      const uint64_t have = last_free ? last->second.size : 0;
      const uint64_t grow = round_up(size - have, page(small));
      if (last_free) {
        free_[small].erase(FreeKey{last->second.size, id, last->first});
        last->second.size += grow;
        free_[small].insert(FreeKey{last->second.size, id, last->first});
      } else {
        s.blocks.emplace(s.size, Block{grow, true});
        free_[small].insert(FreeKey{grow, id, s.size});
      }
      s.size += grow;
      reserved_ += grow;
    }
    const Segment& s = segments_[id];
    auto last = std::prev(s.blocks.end());
    segment = id;
    offset = last->first;
  }
  take(segment, offset, size);
  handles_.emplace(next_handle_, std::make_pair(segment, offset));
  note_peaks();
  return next_handle_++;
}

void CachingAllocatorModel::free(uint64_t handle) {
  auto found = handles_.find(handle);
  if (found == handles_.end()) return;
  const auto [segment, offset] = found->second;
  handles_.erase(found);
  Segment& s = segments_[segment];
  auto it = s.blocks.find(offset);
  it->second.free = true;
  allocated_ -= it->second.size;
  if (--s.live == 0 && !expandable_) held_by_live_segments_ -= s.size;
  std::set<FreeKey>& pool = free_[s.small];
  if (auto next = std::next(it); next != s.blocks.end() && next->second.free) {
    pool.erase(FreeKey{next->second.size, segment, next->first});
    it->second.size += next->second.size;
    s.blocks.erase(next);
  }
  if (it != s.blocks.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free) {
      pool.erase(FreeKey{prev->second.size, segment, prev->first});
      prev->second.size += it->second.size;
      s.blocks.erase(it);
      it = prev;
    }
  }
  pool.insert(FreeKey{it->second.size, segment, it->first});
}

}  // namespace koila
