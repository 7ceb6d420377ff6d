// A model of LibTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, its
// default settings), fed the allocations and frees of a run's simulation on meta tensors
// (meta_counter.h), so that a plan knows what the allocator will reserve from the device for
// the run's own tensors, not only what they hold. koila caps what the allocator reserves
// (BudgetScope), so this, not the tensors' bytes, is what has to fit.
//
// The rules modelled, as the allocator applies them with no PYTORCH_CUDA_ALLOC_CONF:
//   - a request is rounded up to a multiple of 512 bytes (at least 512);
//   - requests of at most 1 MiB come from the small pool, larger ones from the large pool;
//   - a free block of the pool is found best fit (the smallest that is large enough, then the
//     lowest address);
//   - where none fits, a new segment is reserved: 2 MiB for the small pool, 20 MiB for
//     requests below 10 MiB, else the request rounded up to 2 MiB;
//   - a block found is split when what remains is at least 512 bytes (small pool) or more
//     than 1 MiB (large pool); otherwise the whole block is handed out (and counted as
//     allocated);
//   - a freed block merges with free neighbours in its segment;
//   - under a cap, a segment that is wholly free is given back to the device before the
//     allocator fails, so what must fit under the cap is what segments holding a live block
//     take, plus the segment being reserved (needed_peak).
// With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, LibTorch 2.1 and
// later) each pool is one segment that maps pages at its end as it grows (2 MiB pages for the
// small pool, 20 MiB for the large one), every block is split when 512 bytes or more remain,
// and under a cap the pages of free blocks are unmapped: what must fit is then the pages live
// blocks touch, plus one page of each pool: the tensors in use before the run share pages with
// the run's blocks, which the model, starting empty, cannot see (on an H200, forced splits of
// the corpus under expandable segments ran out of memory where this page was not counted).
// One stream is modelled (koila's runs allocate on the device's current stream).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace koila {

class CachingAllocatorModel {
 public:
  static constexpr uint64_t kMinBlockSize = 512;
  static constexpr uint64_t kSmallSize = uint64_t{1} << 20;
  static constexpr uint64_t kSmallBuffer = uint64_t{2} << 20;
  static constexpr uint64_t kLargeBuffer = uint64_t{20} << 20;
  static constexpr uint64_t kMinLargeAlloc = uint64_t{10} << 20;
  static constexpr uint64_t kRoundLarge = uint64_t{2} << 20;

  explicit CachingAllocatorModel(bool expandable = false) : expandable_(expandable) {}

  static uint64_t round_size(uint64_t bytes);
  static uint64_t segment_size(uint64_t rounded);  // a new (not expandable) segment for a request

  // Allocates `bytes` (0: nothing, returns 0); returns a handle for free().
  uint64_t malloc(uint64_t bytes);
  void free(uint64_t handle);

  uint64_t allocated() const { return allocated_; }  // blocks handed out, as its stats count them
  uint64_t reserved() const { return reserved_; }    // segments (or pages) held, cached ones too
  uint64_t peak_allocated() const { return peak_allocated_; }
  uint64_t peak_reserved() const { return peak_reserved_; }  // with every cached segment kept
  // The least cap on reserved bytes under which every allocation so far succeeds (segments
  // wholly free are given back under a cap; see above).
  uint64_t needed_peak() const { return needed_peak_; }

 private:
  struct Block {
    uint64_t size = 0;
    bool free = true;
  };
  struct Segment {
    bool small = false;
    uint64_t size = 0;
    uint64_t live = 0;                 // blocks handed out in it
    std::map<uint64_t, Block> blocks;  // offset -> block
  };
  using FreeKey = std::tuple<uint64_t, size_t, uint64_t>;  // size, segment, offset (best fit, then address)

  size_t new_segment(bool small, uint64_t size);
  void take(size_t segment, uint64_t offset, uint64_t size);
  void note_peaks();
  uint64_t live_pages(const Segment& s) const;
  static uint64_t page(bool small) { return small ? kSmallBuffer : kLargeBuffer; }  // expandable segments

  bool expandable_;
  std::vector<Segment> segments_;
  std::set<FreeKey> free_[2];                                          // [small]
  std::unordered_map<uint64_t, std::pair<size_t, uint64_t>> handles_;  // handle -> segment, offset
  uint64_t next_handle_ = 1;
  uint64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0, needed_peak_ = 0;
  uint64_t held_by_live_segments_ = 0;  // (not expandable) segments with a live block
};

}  // namespace koila
