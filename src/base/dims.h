// Checks on dims and shapes that every stage makes the same way.
#pragma once

#include <cstdint>
#include <vector>

namespace koila {

// Element count of a shape, failing (Code::InvalidArgument) on overflow.
uint64_t checked_numel(const std::vector<int64_t>& shape);

// Normalizes a dim of a tensor of rank `rank` (negative counts from the end); out of range
// fails with Code::InvalidArgument naming `what`.
int64_t normalize_dim(int64_t dim, int64_t rank, const char* what);

}  // namespace koila
