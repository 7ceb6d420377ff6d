// Generated from src/ops/ops.toml by scripts/gen_ops.py; edit the table, not this file.
//
// The engine's operators: ops::<name> builds the node of one call from decoded arguments,
// checks them (failing with koila::Error) and names the node `name`. Their semantics are
// written by hand, group by group, in ops/<group>.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace koila::ops {

// Elementwise, broadcasting. (ops/pointwise.cpp)
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

// With a scalar. (ops/pointwise.cpp)
NodePtr add_scalar(const char* name, const NodePtr& a, double s);
NodePtr sub_scalar(const char* name, const NodePtr& a, double s);
NodePtr mul_scalar(const char* name, const NodePtr& a, double s);
NodePtr div_scalar(const char* name, const NodePtr& a, double s);
NodePtr pow_scalar(const char* name, const NodePtr& a, double s);

// Unary. gelu, silu and hardswish need a floating x (KOILA_ERROR_DTYPE otherwise). (ops/pointwise.cpp)
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
NodePtr erf(const char* name, const NodePtr& x);
NodePtr hardswish(const char* name, const NodePtr& x);
NodePtr leaky_relu(const char* name, const NodePtr& x, double slope);
NodePtr clamp(const char* name, const NodePtr& x, double lo, double hi);
NodePtr softmax(const char* name, const NodePtr& x, int64_t dim);
NodePtr log_softmax(const char* name, const NodePtr& x, int64_t dim);
NodePtr dropout(const char* name, const NodePtr& x, double p, bool train);

// Linear algebra. matmul follows torch.matmul (1-D, 2-D and broadcast batched cases); (ops/nn.cpp)
NodePtr matmul(const char* name, const NodePtr& a, const NodePtr& b);
NodePtr linear(const char* name, const NodePtr& x, const NodePtr& weight, const NodePtr& bias);

// Convolution, pooling and upsampling: 2-element arrays for 2d, 1-element for 1d. A NULL (ops/nn.cpp)
NodePtr conv1d(const char* name, const NodePtr& x, const NodePtr& w, const NodePtr& bias, std::vector<int64_t> stride,
               std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups);
NodePtr conv2d(const char* name, const NodePtr& x, const NodePtr& w, const NodePtr& bias, std::vector<int64_t> stride,
               std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups);
NodePtr max_pool2d(const char* name, const NodePtr& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                   std::vector<int64_t> padding, bool ceil_mode);
NodePtr avg_pool2d(const char* name, const NodePtr& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                   std::vector<int64_t> padding, bool ceil_mode);
NodePtr adaptive_avg_pool2d(const char* name, const NodePtr& x, std::vector<int64_t> output_size);
NodePtr upsample_nearest2d(const char* name, const NodePtr& x, std::vector<int64_t> scale);

// Normalization and embedding. batch_norm normalizes over every dim but dim 1; in training (ops/nn.cpp)
NodePtr batch_norm(const char* name, const NodePtr& x, const NodePtr& weight, const NodePtr& bias,
                   const NodePtr& running_mean, const NodePtr& running_var, bool training, double momentum, double eps);
NodePtr layer_norm(const char* name, const NodePtr& x, std::vector<int64_t> normalized_shape, const NodePtr& weight,
                   const NodePtr& bias, double eps);
NodePtr embedding(const char* name, const NodePtr& weight, const NodePtr& indices);

// Reductions. dims NULL or ndims 0 = all dims. (ops/reduce.cpp)
NodePtr sum(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim);
NodePtr mean(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim);
NodePtr amax(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim);
NodePtr amin(const char* name, const NodePtr& x, std::vector<int64_t> dims, bool keepdim);
NodePtr argmax(const char* name, const NodePtr& x, int64_t dim, bool keepdim);

// Shape. reshape accepts one -1. (ops/shape.cpp)
NodePtr reshape(const char* name, const NodePtr& x, std::vector<int64_t> shape);
NodePtr permute(const char* name, const NodePtr& x, std::vector<int64_t> dims);
NodePtr transpose(const char* name, const NodePtr& x, int64_t d0, int64_t d1);
NodePtr flatten(const char* name, const NodePtr& x, int64_t start, int64_t end);
NodePtr squeeze(const char* name, const NodePtr& x, int64_t dim);
NodePtr unsqueeze(const char* name, const NodePtr& x, int64_t dim);
NodePtr cat(const char* name, const std::vector<NodePtr>& ts, int64_t dim);
NodePtr stack(const char* name, const std::vector<NodePtr>& ts, int64_t dim);
NodePtr narrow(const char* name, const NodePtr& x, int64_t dim, int64_t start, int64_t length);
NodePtr index_select(const char* name, const NodePtr& x, int64_t dim, const NodePtr& index);

// Losses. cross_entropy takes logits [N, C, ...] and either class indices [N, ...] (ops/reduce.cpp)
NodePtr cross_entropy(const char* name, const NodePtr& logits, const NodePtr& target, at::Reduction::Reduction r);
NodePtr nll_loss(const char* name, const NodePtr& log_probs, const NodePtr& target, at::Reduction::Reduction r);
NodePtr mse_loss(const char* name, const NodePtr& a, const NodePtr& b, at::Reduction::Reduction r);
NodePtr l1_loss(const char* name, const NodePtr& a, const NodePtr& b, at::Reduction::Reduction r);
NodePtr binary_cross_entropy_with_logits(const char* name, const NodePtr& logits, const NodePtr& target,
                                         at::Reduction::Reduction r);

// Attention: softmax(q k^T / sqrt(E) + mask) v with q [..., L, E], k [..., S, E], (ops/nn.cpp)
NodePtr scaled_dot_product_attention(const char* name, const NodePtr& q, const NodePtr& k, const NodePtr& v,
                                     const NodePtr& attn_mask, bool is_causal);

// The checks some C entries make before decoding what follows, so that a call with two bad
// arguments reports the one it always did (the ops make them too).
void check_clamp_bounds(double lo, double hi);
void check_dropout(const NodePtr& x, double p);
void check_permute_count(const NodePtr& x, size_t ndim);

}  // namespace koila::ops
