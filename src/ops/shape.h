// Shape operators (ops/shape.cpp): each builds the node of one op call from decoded
// arguments, checks them (failing with koila::Error) and names the node `name`. Dims may
// be negative (counted from the end).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace koila::ops {

// A -1 in `shape` is inferred from the other sizes.
NodePtr reshape(const char* name, const NodePtr& x, std::vector<int64_t> shape);
NodePtr flatten(const char* name, const NodePtr& x, int64_t start, int64_t end);
// `dims`: each dim of x once, in the new order (see check_permute_count).
NodePtr permute(const char* name, const NodePtr& x, const std::vector<int64_t>& dims);
NodePtr transpose(const char* name, const NodePtr& x, int64_t d0, int64_t d1);
// A dim that is not of size 1 stays (the result is an alias of x).
NodePtr squeeze(const char* name, const NodePtr& x, int64_t dim);
NodePtr unsqueeze(const char* name, const NodePtr& x, int64_t dim);
// `ts`: at least one tensor.
NodePtr cat(const char* name, const std::vector<NodePtr>& ts, int64_t dim);
NodePtr stack(const char* name, const std::vector<NodePtr>& ts, int64_t dim);
// A negative `start` counts from the end of the dim.
NodePtr narrow(const char* name, const NodePtr& x, int64_t dim, int64_t start, int64_t length);
// `index`: a 1-D int64 or int32 tensor.
NodePtr index_select(const char* name, const NodePtr& x, int64_t dim, const NodePtr& index);

// permute's first check: `ndim` dims, one per dim of x. Its C entry makes it before it
// decodes the dims, so that a call with two bad arguments reports the one it always did.
void check_permute_count(const NodePtr& x, size_t ndim);

}  // namespace koila::ops
