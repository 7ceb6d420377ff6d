// Generated from src/ops/ops.toml by scripts/gen_ops.py; edit the table, not this file.
//
// The C entries of every operator: each checks `out`, decodes its C arguments in the
// order the table gives (so that a call with two bad arguments reports the one it always
// did), runs the checks the table places between them, and calls the engine's op (ops/ops.h).
#include "api/args.h"
#include "api/convert.h"
#include "api/op_entry.h"
#include "api/tensor_handle.h"
#include "ops/common.h"
#include "ops/ops.h"

using namespace koila;

extern "C" {

KOILA_API koila_status* koila_add(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::add(name, a_, b_);
  });
}

KOILA_API koila_status* koila_sub(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::sub(name, a_, b_);
  });
}

KOILA_API koila_status* koila_mul(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::mul(name, a_, b_);
  });
}

KOILA_API koila_status* koila_div(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::div(name, a_, b_);
  });
}

KOILA_API koila_status* koila_pow(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::pow(name, a_, b_);
  });
}

KOILA_API koila_status* koila_maximum(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::maximum(name, a_, b_);
  });
}

KOILA_API koila_status* koila_minimum(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::minimum(name, a_, b_);
  });
}

KOILA_API koila_status* koila_eq(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::eq(name, a_, b_);
  });
}

KOILA_API koila_status* koila_ne(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::ne(name, a_, b_);
  });
}

KOILA_API koila_status* koila_lt(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::lt(name, a_, b_);
  });
}

KOILA_API koila_status* koila_le(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::le(name, a_, b_);
  });
}

KOILA_API koila_status* koila_gt(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::gt(name, a_, b_);
  });
}

KOILA_API koila_status* koila_ge(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::ge(name, a_, b_);
  });
}

KOILA_API koila_status* koila_add_scalar(koila_tensor** out, const koila_tensor* a, double s) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    return ops::add_scalar(name, a_, s);
  });
}

KOILA_API koila_status* koila_sub_scalar(koila_tensor** out, const koila_tensor* a, double s) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    return ops::sub_scalar(name, a_, s);
  });
}

KOILA_API koila_status* koila_mul_scalar(koila_tensor** out, const koila_tensor* a, double s) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    return ops::mul_scalar(name, a_, s);
  });
}

KOILA_API koila_status* koila_div_scalar(koila_tensor** out, const koila_tensor* a, double s) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    return ops::div_scalar(name, a_, s);
  });
}

KOILA_API koila_status* koila_pow_scalar(koila_tensor** out, const koila_tensor* a, double s) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    return ops::pow_scalar(name, a_, s);
  });
}

KOILA_API koila_status* koila_neg(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::neg(name, x_);
  });
}

KOILA_API koila_status* koila_abs(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::abs(name, x_);
  });
}

KOILA_API koila_status* koila_exp(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::exp(name, x_);
  });
}

KOILA_API koila_status* koila_log(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::log(name, x_);
  });
}

KOILA_API koila_status* koila_sqrt(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::sqrt(name, x_);
  });
}

KOILA_API koila_status* koila_rsqrt(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::rsqrt(name, x_);
  });
}

KOILA_API koila_status* koila_sin(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::sin(name, x_);
  });
}

KOILA_API koila_status* koila_cos(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::cos(name, x_);
  });
}

KOILA_API koila_status* koila_tanh(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::tanh(name, x_);
  });
}

KOILA_API koila_status* koila_sigmoid(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::sigmoid(name, x_);
  });
}

KOILA_API koila_status* koila_relu(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::relu(name, x_);
  });
}

KOILA_API koila_status* koila_gelu(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::gelu(name, x_);
  });
}

KOILA_API koila_status* koila_silu(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::silu(name, x_);
  });
}

KOILA_API koila_status* koila_erf(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::erf(name, x_);
  });
}

KOILA_API koila_status* koila_hardswish(koila_tensor** out, const koila_tensor* x) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::hardswish(name, x_);
  });
}

KOILA_API koila_status* koila_leaky_relu(koila_tensor** out, const koila_tensor* x, double slope) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::leaky_relu(name, x_, slope);
  });
}

KOILA_API koila_status* koila_clamp(koila_tensor** out, const koila_tensor* x, double lo, double hi) {
  return op_entry(__func__, out, [&](const char* name) {
    ops::check_clamp_bounds(lo, hi);
    const NodePtr& x_ = node_of(x, "x");
    return ops::clamp(name, x_, lo, hi);
  });
}

KOILA_API koila_status* koila_softmax(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::softmax(name, x_, dim);
  });
}

KOILA_API koila_status* koila_log_softmax(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::log_softmax(name, x_, dim);
  });
}

KOILA_API koila_status* koila_dropout(koila_tensor** out, const koila_tensor* x, double p, int train) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    ops::check_dropout(x_, p);
    const bool train_ = arg::flag(train, "train");
    return ops::dropout(name, x_, p, train_);
  });
}

KOILA_API koila_status* koila_matmul(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "a");
    const NodePtr& b_ = node_of(b, "b");
    return ops::matmul(name, a_, b_);
  });
}

KOILA_API koila_status* koila_linear(koila_tensor** out, const koila_tensor* x, const koila_tensor* weight,
                                     const koila_tensor* bias) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    const NodePtr& weight_ = node_of(weight, "weight");
    NodePtr bias_ = optional_node(bias);
    return ops::linear(name, x_, weight_, bias_);
  });
}

KOILA_API koila_status* koila_conv1d(koila_tensor** out, const koila_tensor* x, const koila_tensor* w,
                                     const koila_tensor* bias, const int64_t* stride, const int64_t* padding,
                                     const int64_t* dilation, int64_t groups) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    const NodePtr& w_ = node_of(w, "w");
    NodePtr bias_ = optional_node(bias);
    std::vector<int64_t> stride_ = arg::ints_or(stride, 1, 1);
    std::vector<int64_t> padding_ = arg::ints_or(padding, 1, 0);
    std::vector<int64_t> dilation_ = arg::ints_or(dilation, 1, 1);
    return ops::conv1d(name, x_, w_, bias_, std::move(stride_), std::move(padding_), std::move(dilation_), groups);
  });
}

KOILA_API koila_status* koila_conv2d(koila_tensor** out, const koila_tensor* x, const koila_tensor* w,
                                     const koila_tensor* bias, const int64_t* stride, const int64_t* padding,
                                     const int64_t* dilation, int64_t groups) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    const NodePtr& w_ = node_of(w, "w");
    NodePtr bias_ = optional_node(bias);
    std::vector<int64_t> stride_ = arg::ints_or(stride, 2, 1);
    std::vector<int64_t> padding_ = arg::ints_or(padding, 2, 0);
    std::vector<int64_t> dilation_ = arg::ints_or(dilation, 2, 1);
    return ops::conv2d(name, x_, w_, bias_, std::move(stride_), std::move(padding_), std::move(dilation_), groups);
  });
}

KOILA_API koila_status* koila_max_pool2d(koila_tensor** out, const koila_tensor* x, const int64_t* kernel,
                                         const int64_t* stride, const int64_t* padding, int ceil_mode) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    std::vector<int64_t> kernel_ = arg::ints(kernel, 2, "kernel");
    const bool ceil_mode_ = arg::flag(ceil_mode, "ceil_mode");
    std::vector<int64_t> stride_ = stride ? arg::ints(stride, 2, "stride") : kernel_;
    std::vector<int64_t> padding_ = arg::ints_or(padding, 2, 0);
    return ops::max_pool2d(name, x_, std::move(kernel_), std::move(stride_), std::move(padding_), ceil_mode_);
  });
}

KOILA_API koila_status* koila_avg_pool2d(koila_tensor** out, const koila_tensor* x, const int64_t* kernel,
                                         const int64_t* stride, const int64_t* padding, int ceil_mode) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    std::vector<int64_t> kernel_ = arg::ints(kernel, 2, "kernel");
    const bool ceil_mode_ = arg::flag(ceil_mode, "ceil_mode");
    std::vector<int64_t> stride_ = stride ? arg::ints(stride, 2, "stride") : kernel_;
    std::vector<int64_t> padding_ = arg::ints_or(padding, 2, 0);
    return ops::avg_pool2d(name, x_, std::move(kernel_), std::move(stride_), std::move(padding_), ceil_mode_);
  });
}

KOILA_API koila_status* koila_adaptive_avg_pool2d(koila_tensor** out, const koila_tensor* x,
                                                  const int64_t* output_size) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    std::vector<int64_t> output_size_ = arg::ints(output_size, 2, "output_size");
    return ops::adaptive_avg_pool2d(name, x_, std::move(output_size_));
  });
}

KOILA_API koila_status* koila_upsample_nearest2d(koila_tensor** out, const koila_tensor* x, const int64_t* scale) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    std::vector<int64_t> scale_ = arg::ints(scale, 2, "scale");
    return ops::upsample_nearest2d(name, x_, std::move(scale_));
  });
}

KOILA_API koila_status* koila_batch_norm(koila_tensor** out, const koila_tensor* x, const koila_tensor* weight,
                                         const koila_tensor* bias, const koila_tensor* running_mean,
                                         const koila_tensor* running_var, int training, double momentum, double eps) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    require_floating(x_, "x");
    NodePtr weight_ = optional_node(weight);
    NodePtr bias_ = optional_node(bias);
    NodePtr running_mean_ = optional_node(running_mean);
    NodePtr running_var_ = optional_node(running_var);
    const bool training_ = arg::flag(training, "training");
    return ops::batch_norm(name, x_, weight_, bias_, running_mean_, running_var_, training_, momentum, eps);
  });
}

KOILA_API koila_status* koila_layer_norm(koila_tensor** out, const koila_tensor* x, const int64_t* normalized_shape,
                                         size_t n, const koila_tensor* weight, const koila_tensor* bias, double eps) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    require_floating(x_, "x");
    std::vector<int64_t> normalized_shape_ = checked_shape(normalized_shape, n, "normalized_shape");
    NodePtr weight_ = optional_node(weight);
    NodePtr bias_ = optional_node(bias);
    return ops::layer_norm(name, x_, std::move(normalized_shape_), weight_, bias_, eps);
  });
}

KOILA_API koila_status* koila_embedding(koila_tensor** out, const koila_tensor* weight, const koila_tensor* indices) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& weight_ = node_of(weight, "weight");
    const NodePtr& indices_ = node_of(indices, "indices");
    return ops::embedding(name, weight_, indices_);
  });
}

KOILA_API koila_status* koila_sum(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndims,
                                  int keepdim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    const bool keepdim_ = arg::flag(keepdim, "keepdim");
    std::vector<int64_t> dims_ = arg::ints(dims, ndims, "dims");
    return ops::sum(name, x_, std::move(dims_), keepdim_);
  });
}

KOILA_API koila_status* koila_mean(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndims,
                                   int keepdim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    require_floating(x_, "x");
    const bool keepdim_ = arg::flag(keepdim, "keepdim");
    std::vector<int64_t> dims_ = arg::ints(dims, ndims, "dims");
    return ops::mean(name, x_, std::move(dims_), keepdim_);
  });
}

KOILA_API koila_status* koila_amax(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndims,
                                   int keepdim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    const bool keepdim_ = arg::flag(keepdim, "keepdim");
    std::vector<int64_t> dims_ = arg::ints(dims, ndims, "dims");
    return ops::amax(name, x_, std::move(dims_), keepdim_);
  });
}

KOILA_API koila_status* koila_amin(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndims,
                                   int keepdim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    const bool keepdim_ = arg::flag(keepdim, "keepdim");
    std::vector<int64_t> dims_ = arg::ints(dims, ndims, "dims");
    return ops::amin(name, x_, std::move(dims_), keepdim_);
  });
}

KOILA_API koila_status* koila_argmax(koila_tensor** out, const koila_tensor* x, int64_t dim, int keepdim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    const bool keepdim_ = arg::flag(keepdim, "keepdim");
    return ops::argmax(name, x_, dim, keepdim_);
  });
}

KOILA_API koila_status* koila_reshape(koila_tensor** out, const koila_tensor* x, const int64_t* shape, size_t ndim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    std::vector<int64_t> shape_ = arg::ints(shape, ndim, "shape");
    return ops::reshape(name, x_, std::move(shape_));
  });
}

KOILA_API koila_status* koila_permute(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    ops::check_permute_count(x_, ndim);
    std::vector<int64_t> dims_ = arg::ints(dims, ndim, "dims");
    return ops::permute(name, x_, std::move(dims_));
  });
}

KOILA_API koila_status* koila_transpose(koila_tensor** out, const koila_tensor* x, int64_t d0, int64_t d1) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::transpose(name, x_, d0, d1);
  });
}

KOILA_API koila_status* koila_flatten(koila_tensor** out, const koila_tensor* x, int64_t start, int64_t end) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::flatten(name, x_, start, end);
  });
}

KOILA_API koila_status* koila_squeeze(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::squeeze(name, x_, dim);
  });
}

KOILA_API koila_status* koila_unsqueeze(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::unsqueeze(name, x_, dim);
  });
}

KOILA_API koila_status* koila_cat(koila_tensor** out, koila_tensor* const* ts, size_t n, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) {
    std::vector<NodePtr> ts_ = arg::tensors(ts, n, "ts");
    return ops::cat(name, ts_, dim);
  });
}

KOILA_API koila_status* koila_stack(koila_tensor** out, koila_tensor* const* ts, size_t n, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) {
    std::vector<NodePtr> ts_ = arg::tensors(ts, n, "ts");
    return ops::stack(name, ts_, dim);
  });
}

KOILA_API koila_status* koila_narrow(koila_tensor** out, const koila_tensor* x, int64_t dim, int64_t start,
                                     int64_t length) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    return ops::narrow(name, x_, dim, start, length);
  });
}

KOILA_API koila_status* koila_index_select(koila_tensor** out, const koila_tensor* x, int64_t dim,
                                           const koila_tensor* index) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& x_ = node_of(x, "x");
    const NodePtr& index_ = node_of(index, "index");
    return ops::index_select(name, x_, dim, index_);
  });
}

KOILA_API koila_status* koila_cross_entropy(koila_tensor** out, const koila_tensor* logits, const koila_tensor* target,
                                            koila_reduction r) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& logits_ = node_of(logits, "input");
    const NodePtr& target_ = node_of(target, "target");
    const at::Reduction::Reduction r_ = to_reduction(r);
    return ops::cross_entropy(name, logits_, target_, r_);
  });
}

KOILA_API koila_status* koila_nll_loss(koila_tensor** out, const koila_tensor* log_probs, const koila_tensor* target,
                                       koila_reduction r) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& log_probs_ = node_of(log_probs, "input");
    const NodePtr& target_ = node_of(target, "target");
    const at::Reduction::Reduction r_ = to_reduction(r);
    return ops::nll_loss(name, log_probs_, target_, r_);
  });
}

KOILA_API koila_status* koila_mse_loss(koila_tensor** out, const koila_tensor* a, const koila_tensor* b,
                                       koila_reduction r) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "input");
    const NodePtr& b_ = node_of(b, "target");
    const at::Reduction::Reduction r_ = to_reduction(r);
    return ops::mse_loss(name, a_, b_, r_);
  });
}

KOILA_API koila_status* koila_l1_loss(koila_tensor** out, const koila_tensor* a, const koila_tensor* b,
                                      koila_reduction r) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& a_ = node_of(a, "input");
    const NodePtr& b_ = node_of(b, "target");
    const at::Reduction::Reduction r_ = to_reduction(r);
    return ops::l1_loss(name, a_, b_, r_);
  });
}

KOILA_API koila_status* koila_binary_cross_entropy_with_logits(koila_tensor** out, const koila_tensor* logits,
                                                               const koila_tensor* target, koila_reduction r) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& logits_ = node_of(logits, "input");
    const NodePtr& target_ = node_of(target, "target");
    const at::Reduction::Reduction r_ = to_reduction(r);
    return ops::binary_cross_entropy_with_logits(name, logits_, target_, r_);
  });
}

KOILA_API koila_status* koila_scaled_dot_product_attention(koila_tensor** out, const koila_tensor* q,
                                                           const koila_tensor* k, const koila_tensor* v,
                                                           const koila_tensor* attn_mask, int is_causal) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& q_ = node_of(q, "q");
    const NodePtr& k_ = node_of(k, "k");
    const NodePtr& v_ = node_of(v, "v");
    NodePtr attn_mask_ = optional_node(attn_mask);
    const bool is_causal_ = arg::flag(is_causal, "is_causal");
    return ops::scaled_dot_product_attention(name, q_, k_, v_, attn_mask_, is_causal_);
  });
}

}  // extern "C"
