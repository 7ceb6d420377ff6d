// The thin C entries of ops/nn.cpp: each decodes its C arguments and calls the engine.
#include "api/args.h"
#include "api/convert.h"
#include "api/op_entry.h"
#include "api/tensor_handle.h"
#include "ops/common.h"
#include "ops/nn.h"

using namespace koila;

// Arguments are decoded into locals, one after the other, in the order the checks have
// always run (a function's arguments are evaluated in no set order), so that a call with
// two bad arguments reports the same one as before.

namespace {

using Convolution = NodePtr (*)(const char*, const NodePtr&, const NodePtr&, const NodePtr&, std::vector<int64_t>,
                                std::vector<int64_t>, std::vector<int64_t>, int64_t);

// koila_conv1d and koila_conv2d: `spatial` dims of stride, padding and dilation (NULL: 1, 0, 1).
koila_status* convolution(const char* entry, Convolution op, size_t spatial, koila_tensor** out, const koila_tensor* x,
                          const koila_tensor* w, const koila_tensor* bias, const int64_t* stride,
                          const int64_t* padding, const int64_t* dilation, int64_t groups) {
  return op_entry(entry, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    const NodePtr& weight = node_of(w, "w");
    return op(name, input, weight, optional_node(bias), arg::ints_or(stride, spatial, 1),
              arg::ints_or(padding, spatial, 0), arg::ints_or(dilation, spatial, 1), groups);
  });
}

using Pool = NodePtr (*)(const char*, const NodePtr&, std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                         bool);

// koila_max_pool2d and koila_avg_pool2d: stride NULL is the kernel, padding NULL is 0.
koila_status* pool(const char* entry, Pool op, koila_tensor** out, const koila_tensor* x, const int64_t* kernel,
                   const int64_t* stride, const int64_t* padding, int ceil_mode) {
  return op_entry(entry, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    std::vector<int64_t> k = arg::ints(kernel, 2, "kernel");
    const bool ceil = arg::flag(ceil_mode, "ceil_mode");
    std::vector<int64_t> s = stride ? arg::ints(stride, 2, "stride") : k;
    return op(name, input, std::move(k), std::move(s), arg::ints_or(padding, 2, 0), ceil);
  });
}

}  // namespace

extern "C" {

KOILA_API koila_status* koila_matmul(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& lhs = node_of(a, "a");
    const NodePtr& rhs = node_of(b, "b");
    return ops::matmul(name, lhs, rhs);
  });
}

KOILA_API koila_status* koila_linear(koila_tensor** out, const koila_tensor* x, const koila_tensor* weight,
                                     const koila_tensor* bias) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    const NodePtr& w = node_of(weight, "weight");
    return ops::linear(name, input, w, optional_node(bias));
  });
}

KOILA_API koila_status* koila_conv1d(koila_tensor** out, const koila_tensor* x, const koila_tensor* w,
                                     const koila_tensor* bias, const int64_t* stride, const int64_t* padding,
                                     const int64_t* dilation, int64_t groups) {
  return convolution(__func__, ops::conv1d, 1, out, x, w, bias, stride, padding, dilation, groups);
}

KOILA_API koila_status* koila_conv2d(koila_tensor** out, const koila_tensor* x, const koila_tensor* w,
                                     const koila_tensor* bias, const int64_t* stride, const int64_t* padding,
                                     const int64_t* dilation, int64_t groups) {
  return convolution(__func__, ops::conv2d, 2, out, x, w, bias, stride, padding, dilation, groups);
}

KOILA_API koila_status* koila_max_pool2d(koila_tensor** out, const koila_tensor* x, const int64_t* kernel,
                                         const int64_t* stride, const int64_t* padding, int ceil_mode) {
  return pool(__func__, ops::max_pool2d, out, x, kernel, stride, padding, ceil_mode);
}

KOILA_API koila_status* koila_avg_pool2d(koila_tensor** out, const koila_tensor* x, const int64_t* kernel,
                                         const int64_t* stride, const int64_t* padding, int ceil_mode) {
  return pool(__func__, ops::avg_pool2d, out, x, kernel, stride, padding, ceil_mode);
}

KOILA_API koila_status* koila_adaptive_avg_pool2d(koila_tensor** out, const koila_tensor* x,
                                                  const int64_t* output_size) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    return ops::adaptive_avg_pool2d(name, input, arg::ints(output_size, 2, "output_size"));
  });
}

KOILA_API koila_status* koila_batch_norm(koila_tensor** out, const koila_tensor* x, const koila_tensor* weight,
                                         const koila_tensor* bias, const koila_tensor* running_mean,
                                         const koila_tensor* running_var, int training, double momentum, double eps) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    require_floating(input, "x");  // before `training` is decoded, as it always was
    const bool train = arg::flag(training, "training");
    return ops::batch_norm(name, input, optional_node(weight), optional_node(bias), optional_node(running_mean),
                           optional_node(running_var), train, momentum, eps);
  });
}

KOILA_API koila_status* koila_layer_norm(koila_tensor** out, const koila_tensor* x, const int64_t* normalized_shape,
                                         size_t n, const koila_tensor* weight, const koila_tensor* bias, double eps) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    require_floating(input, "x");  // before `normalized_shape` is decoded, as it always was
    std::vector<int64_t> shape = checked_shape(normalized_shape, n, "normalized_shape");
    return ops::layer_norm(name, input, std::move(shape), optional_node(weight), optional_node(bias), eps);
  });
}

KOILA_API koila_status* koila_embedding(koila_tensor** out, const koila_tensor* weight, const koila_tensor* indices) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& w = node_of(weight, "weight");
    const NodePtr& idx = node_of(indices, "indices");
    return ops::embedding(name, w, idx);
  });
}

KOILA_API koila_status* koila_scaled_dot_product_attention(koila_tensor** out, const koila_tensor* q,
                                                           const koila_tensor* k, const koila_tensor* v,
                                                           const koila_tensor* attn_mask, int is_causal) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& query = node_of(q, "q");
    const NodePtr& key = node_of(k, "k");
    const NodePtr& value = node_of(v, "v");
    NodePtr mask = optional_node(attn_mask);
    const bool causal = arg::flag(is_causal, "is_causal");
    return ops::scaled_dot_product_attention(name, query, key, value, mask, causal);
  });
}

}  // extern "C"
