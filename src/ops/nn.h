// Neural-network operators (ops/nn.cpp): each builds the node of one op call from decoded
// arguments, checks them (failing with koila::Error) and names the node `name`.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace koila::ops {

NodePtr matmul(const char* name, const NodePtr& a, const NodePtr& b);
// `bias` may be null.
NodePtr linear(const char* name, const NodePtr& x, const NodePtr& weight, const NodePtr& bias);
// `bias` may be null; stride, padding and dilation have one entry per spatial dim.
NodePtr conv1d(const char* name, const NodePtr& x, const NodePtr& w, const NodePtr& bias, std::vector<int64_t> stride,
               std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups);
NodePtr conv2d(const char* name, const NodePtr& x, const NodePtr& w, const NodePtr& bias, std::vector<int64_t> stride,
               std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups);
// kernel, stride and padding have two entries each.
NodePtr max_pool2d(const char* name, const NodePtr& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                   std::vector<int64_t> padding, bool ceil_mode);
NodePtr avg_pool2d(const char* name, const NodePtr& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                   std::vector<int64_t> padding, bool ceil_mode);
NodePtr adaptive_avg_pool2d(const char* name, const NodePtr& x, std::vector<int64_t> output_size);
// weight, bias, running_mean and running_var may be null (the running statistics only
// when training).
NodePtr batch_norm(const char* name, const NodePtr& x, const NodePtr& weight, const NodePtr& bias,
                   const NodePtr& running_mean, const NodePtr& running_var, bool training, double momentum, double eps);
// `weight` and `bias` may be null.
NodePtr layer_norm(const char* name, const NodePtr& x, std::vector<int64_t> normalized_shape, const NodePtr& weight,
                   const NodePtr& bias, double eps);
NodePtr embedding(const char* name, const NodePtr& weight, const NodePtr& indices);
// `attn_mask` may be null.
NodePtr scaled_dot_product_attention(const char* name, const NodePtr& q, const NodePtr& k, const NodePtr& v,
                                     const NodePtr& attn_mask, bool is_causal);

}  // namespace koila::ops
