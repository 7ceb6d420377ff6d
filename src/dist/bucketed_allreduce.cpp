#include "dist/bucketed_allreduce.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <exception>

#include "base/error.h"

namespace koila::dist {

size_t bucket_bytes() {
  if (const char* text = std::getenv("KOILA_GROUP_BUCKET_BYTES")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (end != text && *end == '\0' && v > 0) return static_cast<size_t>(v);
  }
  return size_t(4) << 20;
}

namespace {

std::vector<Bucket> make_buckets(const std::vector<at::Tensor>& targets, size_t bytes) {
  std::vector<Bucket> buckets;
  for (size_t p = 0; p < targets.size(); ++p) {
    const at::Tensor& t = targets[p];
    const size_t size = static_cast<size_t>(t.numel()) * t.element_size();
    const bool alone = size >= bytes;
    if (alone || buckets.empty() || buckets.back().in_place || buckets.back().dtype != t.scalar_type() ||
        static_cast<size_t>(buckets.back().elements) * t.element_size() + size > bytes) {
      Bucket b;
      b.dtype = t.scalar_type();
      buckets.push_back(b);
    }
    Bucket& b = buckets.back();
    b.params.push_back(p);
    b.elements += t.numel();
    b.in_place = alone && t.is_contiguous();
  }
  for (Bucket& b : buckets)
    if (b.params.size() == 1 && targets[b.params[0]].is_contiguous()) b.in_place = true;
  return buckets;
}

}  // namespace

Reduction::Reduction(std::vector<at::Tensor> targets, size_t bytes, c10::Device device)
    : targets_(std::move(targets)), device_(device) {
  try {
    allocate(bytes);
    staged_ = true;
  } catch (...) {
    if (!is_out_of_memory(std::current_exception())) throw;
    free_.clear();
    allocate(0);  // buffers only for gradients that are not contiguous (rare)
  }
}

void Reduction::run(Group::Comm& comm, double scale, bool staged) {
  if (staged_ && !staged) buckets_ = make_buckets(targets_, 0);  // the buffers are large enough
  c10::NoGradGuard no_grad;
  std::deque<Flight> flights;
  for (const Bucket& b : buckets_) {
    if (static_cast<int>(flights.size()) == kInFlight) {
      land(flights.front());
      flights.pop_front();
    }
    flights.push_back(launch(comm, b, scale));
  }
  for (Flight& f : flights) land(f);
}

void Reduction::allocate(size_t bytes) {
  buckets_ = make_buckets(targets_, bytes);
  std::map<at::ScalarType, int64_t> largest;
  for (const Bucket& b : buckets_)
    if (!b.in_place) largest[b.dtype] = std::max(largest[b.dtype], b.elements);
  for (const auto& [dtype, elements] : largest)
    for (int i = 0; i < kInFlight; ++i)
      free_[dtype].push_back(at::empty({elements}, at::TensorOptions().dtype(dtype).device(device_)));
}

Reduction::Flight Reduction::launch(Group::Comm& comm, const Bucket& b, double scale) {
  at::Tensor buffer;
  at::Tensor reduced;
  if (b.in_place) {
    reduced = targets_[b.params[0]];
  } else {
    buffer = free_[b.dtype].back();
    free_[b.dtype].pop_back();
    reduced = buffer.narrow(0, 0, b.elements);
    int64_t offset = 0;
    for (size_t p : b.params) {
      const at::Tensor& t = targets_[p];
      reduced.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
      offset += t.numel();
    }
  }
  if (scale == 0)
    reduced.zero_();
  else if (scale != 1)
    reduced.mul_(scale);
  return Flight{&b, buffer, start_all_reduce(comm, reduced)};
}

void Reduction::land(Flight& f) {
  f.pending.wait();
  const Bucket& b = *f.bucket;
  if (b.in_place) {
    torch::autograd::impl::bump_version(targets_[b.params[0]]);
    return;
  }
  int64_t offset = 0;
  for (size_t p : b.params) {
    at::Tensor& t = targets_[p];
    t.copy_(f.buffer.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
  free_[b.dtype].push_back(f.buffer);
}

}  // namespace koila::dist
