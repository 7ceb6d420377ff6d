// Internal to dist/ (only src/dist/*.cpp include it; not part of koila's interface): the
// all-reduce of a backward's gradients, in buckets, once the ranks have agreed.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "dist/comm.h"

namespace koila::dist {

// Bytes of gradients reduced per collective (KOILA_GROUP_BUCKET_BYTES overrides it, for
// benchmarks); larger tensors are reduced alone, in place.
size_t bucket_bytes();

// Consecutive parameters of one dtype whose gradients are reduced by one collective.
struct Bucket {
  std::vector<size_t> params;
  int64_t elements = 0;
  at::ScalarType dtype = at::kFloat;
  bool in_place = false;  // one contiguous gradient, reduced where it is
};

// Reduces `targets` (the rank's share of each gradient, scaled by `scale`) so that each
// ends holding the sum over the ranks. Small gradients are packed into staging buffers and
// reduced a bucket at a time, larger ones in place; up to two buckets are in flight at once:
// while Gloo reduces one, the next is packed and the one before unpacked. The buffers are
// allocated by the constructor, within the budget and before the group agrees; when they
// do not fit, this rank says so in the agreement and every rank reduces each gradient
// alone, in place, which needs no memory beyond the gradients (collectives are matched by
// order, so the ranks must choose alike).
class Reduction {
 public:
  Reduction(std::vector<at::Tensor> targets, size_t bytes, c10::Device device);

  bool staged() const { return staged_; }

  // `staged`: whether every rank could allocate its staging buffers.
  void run(Group::Comm& comm, double scale, bool staged);

 private:
  static constexpr int kInFlight = 2;

  void allocate(size_t bytes);

  struct Flight {
    const Bucket* bucket;
    at::Tensor buffer;  // the staging buffer (not in place)
    Pending pending;
  };

  Flight launch(Group::Comm& comm, const Bucket& b, double scale);
  void land(Flight& f);

  std::vector<at::Tensor> targets_;
  const c10::Device device_;  // the collectives' (the gradients are there too)
  bool staged_ = false;
  std::vector<Bucket> buckets_;
  std::map<at::ScalarType, std::vector<at::Tensor>> free_;
};

}  // namespace koila::dist
