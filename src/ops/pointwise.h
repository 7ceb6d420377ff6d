// Elementwise operators (ops/pointwise.cpp): each builds the node of one op call from
// decoded arguments, checks them (failing with koila::Error) and names the node `name`.
#pragma once

#include <cstdint>

#include "graph/graph.h"

namespace koila::ops {

// Binary, broadcasting.
NodePtr add(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr sub(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr mul(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr div(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr pow(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr maximum(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr minimum(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr eq(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr ne(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr lt(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr le(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr gt(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr ge(const char* name, const NodePtr& a, const NodePtr& b);

// With a scalar as the second operand.
NodePtr add_scalar(const char* name, const NodePtr& a, double s);
NodePtr sub_scalar(const char* name, const NodePtr& a, double s);
NodePtr mul_scalar(const char* name, const NodePtr& a, double s);
NodePtr div_scalar(const char* name, const NodePtr& a, double s);
NodePtr pow_scalar(const char* name, const NodePtr& a, double s);

// Unary; gelu and silu need a floating x.
NodePtr neg(const char* name, const NodePtr& x);
NodePtr abs(const char* name, const NodePtr& x);
NodePtr exp(const char* name, const NodePtr& x);
NodePtr log(const char* name, const NodePtr& x);
NodePtr sqrt(const char* name, const NodePtr& x);
NodePtr rsqrt(const char* name, const NodePtr& x);
NodePtr sin(const char* name, const NodePtr& x);
NodePtr cos(const char* name, const NodePtr& x);
NodePtr tanh(const char* name, const NodePtr& x);
NodePtr sigmoid(const char* name, const NodePtr& x);
NodePtr relu(const char* name, const NodePtr& x);
NodePtr gelu(const char* name, const NodePtr& x);
NodePtr silu(const char* name, const NodePtr& x);

NodePtr leaky_relu(const char* name, const NodePtr& x, double slope);
// Neither bound may be NaN (see check_clamp_bounds).
NodePtr clamp(const char* name, const NodePtr& x, double lo, double hi);
NodePtr softmax(const char* name, const NodePtr& x, int64_t dim);
NodePtr log_softmax(const char* name, const NodePtr& x, int64_t dim);
// `p` in [0, 1] (see check_dropout); `train` false: the identity.
NodePtr dropout(const char* name, const NodePtr& x, double p, bool train);

// The checks clamp and dropout make before their C entries decode what follows (x, or the
// train flag), so that a call with two bad arguments reports the one it always did.
void check_clamp_bounds(double lo, double hi);
void check_dropout(const NodePtr& x, double p);

}  // namespace koila::ops
