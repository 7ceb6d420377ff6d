// Reductions and losses (ops/reduce.cpp): each builds the node of one op call from decoded
// arguments, checks them (failing with koila::Error) and names the node `name`.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace koila::ops {

// Over `dims` (negative counts from the end; none: all), each at most once. mean needs a
// floating x.
NodePtr sum(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim);
NodePtr mean(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim);
NodePtr amax(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim);
NodePtr amin(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim);
NodePtr argmax(const char* name, const NodePtr& x, int64_t dim, bool keepdim);

// Losses of a floating input against a target; cross_entropy and nll_loss take class
// indices (int64) or class probabilities, the others a target of the input's shape.
NodePtr cross_entropy(const char* name, const NodePtr& logits, const NodePtr& target, at::Reduction::Reduction r);
NodePtr nll_loss(const char* name, const NodePtr& log_probs, const NodePtr& target, at::Reduction::Reduction r);
NodePtr mse_loss(const char* name, const NodePtr& a, const NodePtr& b, at::Reduction::Reduction r);
NodePtr l1_loss(const char* name, const NodePtr& a, const NodePtr& b, at::Reduction::Reduction r);
NodePtr binary_cross_entropy_with_logits(const char* name, const NodePtr& logits, const NodePtr& target,
                                         at::Reduction::Reduction r);

}  // namespace koila::ops
