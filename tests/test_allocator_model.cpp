// The model of LibTorch's CUDA caching allocator that CUDA plans add to their estimates
// (memory/caching_allocator_model.h), against its rules worked out by hand: the rounding, the
// segment sizes, best fit, splitting, merging, and what must fit under a cap. Runs without a
// device; the GPU check compares the model with the allocator itself.
#include <gtest/gtest.h>

#include "memory/caching_allocator_model.h"
#include "memory/meta_counter.h"

#include <ATen/ATen.h>

namespace {

using koila::CachingAllocatorModel;
constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

TEST(AllocatorModel, RoundsRequestsAndSizesSegmentsAsTheAllocator) {
  EXPECT_EQ(CachingAllocatorModel::round_size(1), 512u);
  EXPECT_EQ(CachingAllocatorModel::round_size(512), 512u);
  EXPECT_EQ(CachingAllocatorModel::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocatorModel::segment_size(1 * MiB), 2 * MiB);         // small pool
  EXPECT_EQ(CachingAllocatorModel::segment_size(1 * MiB + 512), 20 * MiB);  // large, below 10 MiB
  EXPECT_EQ(CachingAllocatorModel::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocatorModel::segment_size(10 * MiB), 10 * MiB);  // rounded to 2 MiB
  EXPECT_EQ(CachingAllocatorModel::segment_size(11 * MiB + 512), 12 * MiB);
}

TEST(AllocatorModel, SmallRequestsShareTwoMiBSegments) {
  CachingAllocatorModel m;
  for (int i = 0; i < 3; ++i) m.malloc(600 * KiB);  // 1800 KiB of one 2 MiB segment
  EXPECT_EQ(m.reserved(), 2 * MiB);
  EXPECT_EQ(m.allocated(), 1800 * KiB);
  m.malloc(600 * KiB);  // 248 KiB left: a second segment
  EXPECT_EQ(m.reserved(), 4 * MiB);
  EXPECT_EQ(m.needed_peak(), 4 * MiB);
}

TEST(AllocatorModel, ALargeBlockIsSplitOnlyWhenMoreThanOneMiBRemains) {
  CachingAllocatorModel m;
  m.malloc(3 * MiB);  // a 20 MiB segment, split: 17 MiB stay free
  EXPECT_EQ(m.reserved(), 20 * MiB);
  EXPECT_EQ(m.allocated(), 3 * MiB);
  m.malloc(16 * MiB + 512 * KiB);  // the 17 MiB block, not split (512 KiB would remain)
  EXPECT_EQ(m.reserved(), 20 * MiB);
  EXPECT_EQ(m.allocated(), 20 * MiB);  // the whole block counts as allocated
}

TEST(AllocatorModel, AFreeBlockTooSmallForARequestFragmentsTheCap) {
  CachingAllocatorModel m;
  const uint64_t a = m.malloc(8 * MiB);  // 20 MiB segment: a at 0, b at 8 MiB, 4 MiB free
  const uint64_t b = m.malloc(8 * MiB);
  m.free(a);  // 8 MiB free at 0, 4 MiB at 16: neither takes 12 MiB
  m.malloc(12 * MiB);
  EXPECT_EQ(m.allocated(), 20 * MiB);
  EXPECT_EQ(m.reserved(), 32 * MiB);
  EXPECT_EQ(m.needed_peak(), 32 * MiB);  // b keeps the first segment: 12 MiB more than the tensors
  m.free(b);                             // the first segment merges whole
  m.malloc(20 * MiB);                    // and takes 20 MiB, best fit
  EXPECT_EQ(m.reserved(), 32 * MiB);
}

TEST(AllocatorModel, WhollyFreeSegmentsAreGivenBackUnderACap) {
  CachingAllocatorModel m;
  m.free(m.malloc(15 * MiB));  // a 16 MiB segment, cached free
  m.malloc(17 * MiB);          // too large for it: an 18 MiB segment
  EXPECT_EQ(m.peak_reserved(), 34 * MiB);
  EXPECT_EQ(m.needed_peak(), 18 * MiB);  // the free segment goes back before a capped allocator fails
}

TEST(AllocatorModel, BestFitTakesTheSmallestFreeBlockThatIsLargeEnough) {
  CachingAllocatorModel m;
  const uint64_t big = m.malloc(12 * MiB);   // its own 12 MiB segment
  const uint64_t small = m.malloc(4 * MiB);  // a 20 MiB segment, 16 MiB left free
  m.free(big);                               // free: 12 MiB (segment 1) and 16 MiB (segment 2)
  m.malloc(11 * MiB);                        // best fit: the 12 MiB block, not split (1 MiB left)
  EXPECT_EQ(m.allocated(), 16 * MiB);
  m.malloc(15 * MiB);  // the 16 MiB block, no new segment
  EXPECT_EQ(m.reserved(), 32 * MiB);
  m.free(small);
}

// What an expandable model needs beyond the pages its live blocks touch: a page of each pool,
// for the pages the tensors in use before a run share with it.
constexpr uint64_t kShared = 22 * MiB;

TEST(AllocatorModel, ExpandableSegmentsGrowByPagesAndNeedOnlyLivePages) {
  CachingAllocatorModel m(/*expandable=*/true);
  const uint64_t a = m.malloc(3 * MiB);  // one 20 MiB page of the large pool; split (17 MiB left)
  EXPECT_EQ(m.reserved(), 20 * MiB);
  EXPECT_EQ(m.allocated(), 3 * MiB);
  m.malloc(30 * MiB);  // the free 17 MiB at the end grows by one page (13 MiB more needed)
  EXPECT_EQ(m.reserved(), 40 * MiB);
  EXPECT_EQ(m.allocated(), 33 * MiB);
  m.malloc(100 * KiB);  // the small pool's own segment: one 2 MiB page
  EXPECT_EQ(m.reserved(), 42 * MiB);
  EXPECT_EQ(m.needed_peak(), 42 * MiB + kShared);
  m.free(a);
  // Live: 30 MiB at 3 MiB (pages 0 and 1) and the small page: nothing can be unmapped.
  m.malloc(1 * MiB + 512);  // best fit: the freed 3 MiB block at 0, split
  EXPECT_EQ(m.reserved(), 42 * MiB);
  CachingAllocatorModel n(/*expandable=*/true);
  const uint64_t x = n.malloc(25 * MiB);  // pages 0 and 1
  const uint64_t y = n.malloc(10 * MiB);  // at 25 MiB: page 1
  n.free(x);
  EXPECT_EQ(n.needed_peak(), 40 * MiB + kShared);
  n.free(y);
  n.malloc(5 * MiB);  // the merged 40 MiB block, split: only page 0 is live
  EXPECT_EQ(n.reserved(), 40 * MiB);
  EXPECT_EQ(n.needed_peak(), 40 * MiB + kShared);
}

// A meta simulation feeds the model: two tensors of 3 MiB and one of 100 KiB on the meta
// device take a 20 MiB segment and a 2 MiB one.
TEST(AllocatorModel, FollowsMetaAllocations) {
  koila::MetaAllocationScope scope;
  scope.model_allocator(/*expandable=*/false);
  const auto options = at::TensorOptions().dtype(at::kFloat).device(at::kMeta);
  at::Tensor a = at::empty({3 * 256 * 1024}, options);
  at::Tensor b = at::empty({3 * 256 * 1024}, options);
  at::Tensor c = at::empty({25 * 1024}, options);
  EXPECT_EQ(scope.peak(), 6 * MiB + 100 * KiB);
  EXPECT_EQ(scope.allocator_needed_peak(), 22 * MiB);
  a.reset();
  b.reset();
  c.reset();
  at::Tensor d = at::empty({5 * 256 * 1024}, options);  // 5 MiB in the cached 20 MiB segment
  EXPECT_EQ(scope.allocator_needed_peak(), 22 * MiB);
}

}  // namespace
