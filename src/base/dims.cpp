#include "base/dims.h"

#include <string>

#include "base/error.h"
#include "base/text.h"

namespace koila {

uint64_t checked_numel(const std::vector<int64_t>& shape) {
  uint64_t numel = 1;
  for (int64_t size : shape) {
    const auto s = static_cast<uint64_t>(size);
    if (s != 0 && numel > (uint64_t{1} << 62) / s)
      fail(Code::InvalidArgument, "shape " + shape_string(shape) + " has too many elements");
    numel *= s;
  }
  return numel;
}

int64_t normalize_dim(int64_t dim, int64_t rank, const char* what) {
  const int64_t lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;
  if (dim < lo || dim > hi)
    fail(Code::InvalidArgument, std::string(what) + " " + std::to_string(dim) +
                                    " is out of range for a tensor of rank " + std::to_string(rank) + " (expected " +
                                    std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return dim < 0 ? dim + (rank == 0 ? 1 : rank) : dim;
}

}  // namespace koila
