#include "graph/meta_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/libtorch_compat.h"
#include "graph/attention_meta.h"
#include "graph/meta_stack.h"
#include "graph/rnn_meta.h"

namespace koila {
namespace {

using meta_stack::args;
using meta_stack::finish;
using meta_stack::Stack;

using compat::concrete_int;
using compat::concrete_ints;

at::Tensor optional_tensor(const c10::IValue& v) { return v.isNone() ? at::Tensor() : v.toTensor(); }

at::Tensor meta_like(at::IntArrayRef shape, const at::Tensor& like) {
  return at::empty(shape, like.options().device(at::kMeta));
}

// Ops of `N` arguments whose result is shaped like argument `Like` (elementwise ops and
// their backwards).
template <size_t N, size_t Like = 0>
void same_shape_meta(const c10::OperatorHandle&, Stack* stack) {
  const at::Tensor like = args(stack, N)[Like].toTensor();
  finish(stack, N, {meta_like(like.sizes(), like)});
}

// In-place ops of `N` arguments: nothing to compute or allocate; the result is `self`.
template <size_t N>
void in_place_meta(const c10::OperatorHandle&, Stack* stack) {
  const at::Tensor self = args(stack, N)[0].toTensor();
  finish(stack, N, {self});
}

// roll(self, shifts, dims): with several dims LibTorch rolls one dim at a time, holding each
// intermediate result while the next is made (Swin's shifted windows roll two).
void roll_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 3);
  const at::Tensor self = a[0].toTensor();
  at::Tensor intermediate;
  if (concrete_ints(a[2]).size() > 1) intermediate = meta_like(self.sizes(), self);
  const at::Tensor result = meta_like(self.sizes(), self);
  finish(stack, 3, {result});
}

// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
void convolution_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 9);
  const at::Tensor input = a[0].toTensor(), weight = a[1].toTensor(), bias = optional_tensor(a[2]);
  const auto stride = concrete_ints(a[3]), padding = concrete_ints(a[4]), dilation = concrete_ints(a[5]),
             output_padding = concrete_ints(a[7]);
  const bool transposed = a[6].toBool();
  const int64_t groups = concrete_int(a[8]);
  const int64_t dim = input.dim();
  const int64_t spatial = dim - 2;
  TORCH_CHECK(dim >= 3, "expected a batched input [N, C, ...] of rank 3 or more, but got input of size ",
              input.sizes());
  TORCH_CHECK(weight.dim() == dim, "expected weight to have rank ", dim, " like the input ", input.sizes(),
              ", but got weight of size ", weight.sizes());
  TORCH_CHECK(groups > 0, "non-positive groups is not supported");
  auto expand = [spatial](std::vector<int64_t> v, const char* what) {
    if (v.size() == 1 && spatial > 1) v.assign(static_cast<size_t>(spatial), v[0]);
    TORCH_CHECK(static_cast<int64_t>(v.size()) == spatial, what, " must have ", spatial, " elements, got ", v.size());
    return v;
  };
  const auto s = expand(stride, "stride"), p = expand(padding, "padding"), d = expand(dilation, "dilation");
  for (int64_t i = 0; i < spatial; ++i) {
    TORCH_CHECK(s[i] > 0, "non-positive stride is not supported");
    TORCH_CHECK(p[i] >= 0, "negative padding is not supported");
    TORCH_CHECK(d[i] > 0, "dilation should be greater than zero");
  }
  // What LibTorch's own kernels refuse for empty tensors, refused here too, so that a lazy
  // graph fails when it is built rather than when it runs. With 0 input channels the CPU
  // kernel of LibTorch 1.13 returns a result shaped [N, 0, ...] instead of [N, out, ...]
  // (found by the API fuzzer), so that case is refused rather than inferred differently.
  TORCH_CHECK(input.size(1) > 0, "convolution over an input with 0 channels is not supported (input of size ",
              input.sizes(), ")");
  TORCH_CHECK(transposed || weight.size(0) >= groups, "Given groups=", groups, ", expected weight to be at least ",
              groups, " at dimension 0, but got weight of size ", weight.sizes(), " instead");
  if (input.size(0) > 0)
    for (int64_t i = 0; i < spatial; ++i)
      TORCH_CHECK(input.size(i + 2) > 0,
                  "Only zero batch or zero channel inputs are supported, but got input shape: ", input.sizes());
  TORCH_CHECK_TYPE(input.scalar_type() == weight.scalar_type(), "input type (", input.scalar_type(),
                   ") and weight type (", weight.scalar_type(), ") should be the same");
  int64_t out_channels;
  if (!transposed) {
    TORCH_CHECK(input.size(1) == weight.size(1) * groups, "Given groups=", groups, ", weight of size ", weight.sizes(),
                ", expected input", input.sizes(), " to have ", weight.size(1) * groups, " channels, but got ",
                input.size(1), " channels instead");
    TORCH_CHECK(weight.size(0) % groups == 0, "Given groups=", groups, ", expected weight to be divisible by ", groups,
                " at dimension 0, but got weight of size ", weight.sizes(), " instead");
    out_channels = weight.size(0);
  } else {
    TORCH_CHECK(input.size(1) == weight.size(0), "Given transposed=1, weight of size ", weight.sizes(),
                ", expected input", input.sizes(), " to have ", weight.size(0), " channels, but got ", input.size(1),
                " channels instead");
    out_channels = weight.size(1) * groups;
  }
  if (bias.defined())
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, "Given weight of size ", weight.sizes(),
                ", expected bias to be 1-dimensional with ", out_channels, " elements, but got bias of size ",
                bias.sizes(), " instead");
  std::vector<int64_t> out{input.size(0), out_channels};
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t in = input.size(i + 2), k = weight.size(i + 2);
    int64_t o;
    if (!transposed) {
      const int64_t padded = in + 2 * p[i], effective = d[i] * (k - 1) + 1;
      TORCH_CHECK(padded >= effective, "Calculated padded input size per channel: (", padded, "). Kernel size: (",
                  effective, "). Kernel size can't be greater than actual input size");
      o = (padded - effective) / s[i] + 1;
    } else {
      const int64_t op = output_padding.empty() ? 0 : output_padding[output_padding.size() == 1 ? 0 : i];
      o = (in - 1) * s[i] - 2 * p[i] + d[i] * (k - 1) + op + 1;
      TORCH_CHECK(o > 0, "Given input size ", input.sizes(), ", calculated output size is too small");
    }
    out.push_back(o);
  }
  finish(stack, 9, {meta_like(out, input)});
}

// native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
void native_batch_norm_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 8);
  const at::Tensor input = a[0].toTensor();
  const bool training = a[5].toBool();
  TORCH_CHECK(input.dim() >= 2, "batch_norm expects an input of rank 2 or more, but got ", input.sizes());
  const int64_t channels = input.size(1);
  const char* names[] = {"weight", "bias", "running_mean", "running_var"};
  for (int i = 0; i < 4; ++i) {
    const at::Tensor t = optional_tensor(a[1 + i]);
    if (t.defined())
      TORCH_CHECK(t.numel() == channels, "batch_norm: expected ", names[i], " to have ", channels,
                  " elements (the size of input dim 1), but got ", t.sizes());
  }
  if (!training)
    TORCH_CHECK(!a[3].isNone() && !a[4].isNone(), "running_mean and running_var must be defined in evaluation mode");
  const int64_t stats = training ? channels : 0;
  finish(stack, 8, {meta_like(input.sizes(), input), meta_like({stats}, input), meta_like({stats}, input)});
}

// index_select(self, dim, index)
void index_select_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 3);
  const at::Tensor self = a[0].toTensor(), index = a[2].toTensor();
  TORCH_CHECK(index.dim() <= 1, "index_select(): Index is supposed to be a vector, but got index of size ",
              index.sizes());
  TORCH_CHECK_TYPE(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
                   "index_select(): Expected dtype int32 or int64 for index, but got ", index.scalar_type());
  std::vector<int64_t> out = self.sizes().vec();
  if (self.dim() > 0) {
    const int64_t dim = c10::maybe_wrap_dim(a[1].toInt(), self.dim());
    out[dim] = index.numel();
  }
  finish(stack, 3, {meta_like(out, self)});
}

// where.self(condition, self, other)
void where_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 3);
  const at::Tensor cond = a[0].toTensor(), self = a[1].toTensor(), other = a[2].toTensor();
  TORCH_CHECK_TYPE(cond.scalar_type() == at::kBool || cond.scalar_type() == at::kByte,
                   "where expected condition to be a boolean tensor, but got a tensor with dtype ", cond.scalar_type());
  const auto shape = at::infer_size(at::infer_size(cond.sizes(), self.sizes()), other.sizes());
  finish(stack, 3, {at::empty(shape, self.options().device(at::kMeta).dtype(at::result_type(self, other)))});
}

// where.self_out(condition, self, other, out): LibTorch 2.x routes where.self through its
// out variant, which has no meta kernel in C++ (Python registers one).
void where_out_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 4);
  const at::Tensor cond = a[0].toTensor(), self = a[1].toTensor(), other = a[2].toTensor();
  at::Tensor out = a[3].toTensor();
  TORCH_CHECK_TYPE(cond.scalar_type() == at::kBool || cond.scalar_type() == at::kByte,
                   "where expected condition to be a boolean tensor, but got a tensor with dtype ", cond.scalar_type());
  out.resize_(at::infer_size(at::infer_size(cond.sizes(), self.sizes()), other.sizes()));
  finish(stack, 4, {out});
}

// log_sigmoid_forward(self) -> (output, buffer): binary cross entropy with logits in 2.x.
// The CPU kernel fills a buffer shaped like the input; CUDA's is empty (the estimate errs
// high there by one input's size).
void log_sigmoid_forward_meta(const c10::OperatorHandle&, Stack* stack) {
  const at::Tensor self = args(stack, 1)[0].toTensor();
  finish(stack, 1, {meta_like(self.sizes(), self), meta_like(self.sizes(), self)});
}

// nll_loss2d_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight)
void nll_loss2d_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 5);
  const at::Tensor self = a[0].toTensor(), target = a[1].toTensor();
  TORCH_CHECK(self.dim() == 4,
              "only batches of spatial inputs supported (4D tensors), but got input of size: ", self.sizes());
  TORCH_CHECK(target.dim() == 3,
              "only batches of spatial targets supported (3D tensors) but got targets of size: ", target.sizes());
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "size mismatch (got input: ", self.sizes(), " , target: ", target.sizes(), ")");
  const int64_t reduction = a[3].toInt();
  std::vector<int64_t> out;
  if (reduction == at::Reduction::None) out = {self.size(0), self.size(2), self.size(3)};
  finish(stack, 5, {meta_like(out, self), meta_like({}, self)});
}

// _adaptive_avg_pool2d(self, output_size)
void adaptive_avg_pool2d_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 2);
  const at::Tensor self = a[0].toTensor();
  const auto size = concrete_ints(a[1]);
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got ",
              self.sizes());
  TORCH_CHECK(size.size() == 2, "adaptive_avg_pool2d: output_size must be 2");
  std::vector<int64_t> out = self.sizes().vec();
  out[out.size() - 2] = size[0];
  out[out.size() - 1] = size[1];
  finish(stack, 2, {meta_like(out, self)});
}

// logical_not.out(self, *, out): a bool result shaped like self.
void logical_not_out_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 2);
  const at::Tensor self = a[0].toTensor();
  at::Tensor out = a[1].toTensor();
  out.resize_(self.sizes());
  finish(stack, 2, {out});
}

// Backward kernels (and native_layer_norm, which LibTorch 1.13 only decomposes on meta):
// what they allocate on a real device, so that the planner's simulation of a backward
// pass on meta tensors follows the same tensors.

std::vector<bool> mask_of(const c10::IValue& v) {
  std::vector<bool> mask;
  for (const c10::IValue& e : v.toListRef()) mask.push_back(e.toBool());
  return mask;
}

at::Tensor if_set(bool set, const at::Tensor& like) {
  return set && like.defined() ? meta_like(like.sizes(), like) : at::Tensor();
}

template <size_t N, size_t I>
void like_arg_meta(const c10::OperatorHandle&, Stack* stack) {
  const at::Tensor like = args(stack, N)[I].toTensor();
  finish(stack, N, {meta_like(like.sizes(), like)});
}

// convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
//                      transposed, output_padding, groups, output_mask[3])
void convolution_backward_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 11);
  const at::Tensor input = a[1].toTensor(), weight = a[2].toTensor();
  const auto mask = mask_of(a[10]);
  const bool transposed = a[7].toBool();
  const int64_t groups = concrete_int(a[9]);
  at::Tensor bias;
  if (mask[2]) bias = meta_like({transposed ? weight.size(1) * groups : weight.size(0)}, weight);
  at::Tensor gi = if_set(mask[0], input), gw = if_set(mask[1], weight);
  finish(stack, 11, {gi, gw, bias});
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
//                            save_invstd?, train, eps, output_mask[3])
void native_batch_norm_backward_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 10);
  const at::Tensor input = a[1].toTensor();
  const auto mask = mask_of(a[9]);
  const int64_t channels = input.dim() > 1 ? input.size(1) : 1;
  at::Tensor gi = if_set(mask[0], input);
  at::Tensor gw = mask[1] ? meta_like({channels}, input) : at::Tensor();
  at::Tensor gb = mask[2] ? meta_like({channels}, input) : at::Tensor();
  finish(stack, 10, {gi, gw, gb});
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
void native_layer_norm_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 5);
  const at::Tensor input = a[0].toTensor(), weight = optional_tensor(a[2]), bias = optional_tensor(a[3]);
  const auto normalized = concrete_ints(a[1]);
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized.size());
  TORCH_CHECK(!normalized.empty(),
              "Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
              "least one element, but got normalized_shape = ",
              at::IntArrayRef(normalized));
  TORCH_CHECK(axis >= 0 && input.sizes().slice(static_cast<size_t>(axis)).equals(normalized),
              "Given normalized_shape=", at::IntArrayRef(normalized), ", expected input with shape [*, ",
              at::IntArrayRef(normalized), "], but got input of size", input.sizes());
  TORCH_CHECK(!weight.defined() || weight.sizes().equals(normalized),
              "Expected weight to be of same shape as "
              "normalized_shape, but got weight of shape ",
              weight.sizes(), " and normalized_shape = ", at::IntArrayRef(normalized));
  TORCH_CHECK(!bias.defined() || bias.sizes().equals(normalized),
              "Expected bias to be of same shape as "
              "normalized_shape, but got bias of shape ",
              bias.sizes(), " and normalized_shape = ", at::IntArrayRef(normalized));
  std::vector<int64_t> stats = input.sizes().vec();
  for (size_t d = static_cast<size_t>(axis); d < stats.size(); ++d) stats[d] = 1;
  finish(stack, 5, {meta_like(input.sizes(), input), meta_like(stats, input), meta_like(stats, input)});
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask[3])
void native_layer_norm_backward_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 8);
  const at::Tensor input = a[1].toTensor(), weight = optional_tensor(a[5]), bias = optional_tensor(a[6]);
  const auto mask = mask_of(a[7]);
  at::Tensor gi = if_set(mask[0], input), gw = if_set(mask[1], weight), gb = if_set(mask[2], bias);
  finish(stack, 8, {gi, gw, gb});
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd): what
// the CPU and CUDA kernels allocate. LibTorch 2.x runs its composite on meta tensors, whose
// var_mean has no meta kernel in C++ (Python registers one).
void native_group_norm_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 8);
  const at::Tensor input = a[0].toTensor(), weight = optional_tensor(a[1]), bias = optional_tensor(a[2]);
  const int64_t n = concrete_int(a[3]), channels = concrete_int(a[4]), group = concrete_int(a[6]);
  TORCH_CHECK(group > 0 && channels % group == 0, "Expected number of channels in input to be divisible by ",
              "num_groups, but got input of shape ", input.sizes(), " and num_groups=", group);
  TORCH_CHECK(!weight.defined() || weight.numel() == channels, "Expected weight to be a vector of size equal to ",
              "the number of channels in input, but got weight of shape ", weight.sizes(), " and input of shape ",
              input.sizes());
  TORCH_CHECK(!bias.defined() || bias.numel() == channels, "Expected bias to be a vector of size equal to ",
              "the number of channels in input, but got bias of shape ", bias.sizes(), " and input of shape ",
              input.sizes());
  finish(stack, 8, {meta_like(input.sizes(), input), meta_like({n, group}, input), meta_like({n, group}, input)});
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask[3])
// (LibTorch 1.13 has no meta kernel for it.) Beside its results, the CPU kernel holds two
// [N, C] buffers of per-channel sums while it runs (GroupNormKernel.cpp).
void native_group_norm_backward_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 10);
  const at::Tensor input = a[1].toTensor();
  const auto mask = mask_of(a[9]);
  const int64_t n = concrete_int(a[5]), channels = concrete_int(a[6]);
  at::Tensor gi = if_set(mask[0], input);
  at::Tensor gw = mask[1] ? meta_like({channels}, input) : at::Tensor();
  at::Tensor gb = mask[2] ? meta_like({channels}, input) : at::Tensor();
  const at::Tensor ds = meta_like({n, channels}, input), db = meta_like({n, channels}, input);
  finish(stack, 10, {gi, gw, gb});
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
void embedding_dense_backward_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 5);
  const at::Tensor grad = a[0].toTensor();
  finish(stack, 5, {meta_like({concrete_int(a[2]), grad.size(-1)}, grad)});
}

at::Tensor m(std::initializer_list<int64_t> shape, at::ScalarType type = at::kFloat) {
  return at::empty(shape, at::TensorOptions().dtype(type).device(at::kMeta));
}

// Whether LibTorch can already run `probe` on meta tensors.
bool runs_on_meta(const std::function<void()>& probe) {
  try {
    probe();
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

std::vector<std::string>& filled() {
  static std::vector<std::string> names;
  return names;
}

std::unique_ptr<torch::Library>& library() {
  static std::unique_ptr<torch::Library> lib;
  return lib;
}

// Registers `Kernel` as the Meta kernel of aten::`op` ("name" or "name.overload") and notes it.
template <void (*Kernel)(const c10::OperatorHandle&, Stack*)>
void register_meta(const char* op) {
  if (!library())
    library() =
        std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::Meta, __FILE__, __LINE__);
  library()->impl(op, torch::CppFunction::makeFromBoxedFunction<Kernel>());
  filled().push_back(op);
}

template <void (*Kernel)(const c10::OperatorHandle&, Stack*)>
void fill_in(const char* op, const std::function<void()>& probe) {
  if (!runs_on_meta(probe)) register_meta<Kernel>(op);
}

// Registers `Kernel` for an op that has no kernel of its own for the Meta key.
template <void (*Kernel)(const c10::OperatorHandle&, Stack*)>
void fill_in_missing(const char* name, const char* overload = "") {
  auto op = c10::Dispatcher::singleton().findSchema({std::string("aten::") + name, overload});
  if (op && !op->hasKernelForDispatchKey(c10::DispatchKey::Meta)) register_meta<Kernel>(name);
}

void register_all() {
  fill_in<same_shape_meta<1>>("relu", [] { at::relu(m({2})); });
  fill_in<same_shape_meta<1>>("abs", [] { at::abs(m({2})); });
  // ReLU6 (hardtanh) and Hardswish, the activations of MobileNet v2 and v3 (torchvision
  // applies them in place), and their backwards.
  fill_in<same_shape_meta<3>>("hardtanh", [] { at::hardtanh(m({2}), 0, 6); });
  fill_in<in_place_meta<3>>("hardtanh_", [] {
    at::Tensor t = m({2});
    at::hardtanh_(t, 0, 6);
  });
  fill_in<same_shape_meta<4>>("hardtanh_backward", [] { at::hardtanh_backward(m({2}), m({2}), 0, 6); });
  fill_in<same_shape_meta<1>>("hardswish", [] { at::hardswish(m({2})); });
  fill_in<in_place_meta<1>>("hardswish_", [] {
    at::Tensor t = m({2});
    at::hardswish_(t);
  });
  fill_in<same_shape_meta<2>>("hardswish_backward", [] { at::hardswish_backward(m({2}), m({2})); });
  fill_in<roll_meta>("roll", [] { at::roll(m({2, 3}), {1}, {1}); });
  fill_in<convolution_meta>("convolution", [] { at::conv1d(m({1, 1, 4}), m({1, 1, 2})); });
  fill_in<native_batch_norm_meta>("native_batch_norm", [] {
    at::native_batch_norm(m({2, 3}), m({3}), m({3}), m({3}), m({3}), false, 0.1, 1e-5);
  });
  fill_in<index_select_meta>("index_select", [] { at::index_select(m({3, 2}), 0, m({2}, at::kLong)); });
  fill_in<where_meta>("where.self", [] { at::where(m({2}, at::kBool), m({2}), m({2})); });
  fill_in<adaptive_avg_pool2d_meta>("_adaptive_avg_pool2d", [] { at::adaptive_avg_pool2d(m({1, 4, 4}), {2, 2}); });
  fill_in<where_out_meta>("where.self_out", [] {
    at::Tensor out = m({2});
    at::where_out(out, m({2}, at::kBool), m({2}), m({2}));
  });
  fill_in<logical_not_out_meta>("logical_not.out", [] { at::logical_not(m({2}, at::kBool)); });
  fill_in<log_sigmoid_forward_meta>("log_sigmoid_forward", [] { at::log_sigmoid_forward(m({2})); });
  fill_in<like_arg_meta<3, 1>>("log_sigmoid_backward", [] { at::log_sigmoid_backward(m({2}), m({2}), m({2})); });
  fill_in<nll_loss2d_meta>("nll_loss2d_forward", [] { at::nll_loss2d(m({1, 2, 2, 2}), m({1, 2, 2}, at::kLong)); });
  fill_in_missing<native_layer_norm_meta>("native_layer_norm");
  fill_in_missing<native_layer_norm_backward_meta>("native_layer_norm_backward");
  fill_in_missing<convolution_backward_meta>("convolution_backward");
  fill_in_missing<native_batch_norm_backward_meta>("native_batch_norm_backward");
  fill_in_missing<embedding_dense_backward_meta>("embedding_dense_backward");
  fill_in<native_group_norm_meta>("native_group_norm", [] {
    at::native_group_norm(m({2, 4, 3}), m({4}), m({4}), 2, 4, 3, 2, 1e-5);
  });
  fill_in<native_group_norm_backward_meta>("native_group_norm_backward", [] {
    at::native_group_norm_backward(m({2, 4, 3}), m({2, 4, 3}), m({2, 2}), m({2, 2}), m({4}), 2, 4, 3, 2,
                                   {true, true, true});
  });
  fill_in_missing<like_arg_meta<2, 1>>("_adaptive_avg_pool2d_backward");
  fill_in_missing<like_arg_meta<7, 1>>("nll_loss2d_backward");
  fill_in_missing<like_arg_meta<4, 1>>("mse_loss_backward");
  fill_in_missing<like_arg_meta<3, 0>>("threshold_backward");
  fill_in_missing<like_arg_meta<8, 1>>("max_pool2d_with_indices_backward");
  // Attention as the CPU runs it on LibTorch 2.x (attention_meta.h): its flash kernels first.
  fill_in_missing<flash_attention_for_cpu_meta>("_scaled_dot_product_flash_attention_for_cpu");
  fill_in_missing<flash_attention_for_cpu_backward_meta>("_scaled_dot_product_flash_attention_for_cpu_backward");
  register_rnn_meta_kernels();
  register_attention_meta_kernels();
}

}  // namespace

void ensure_meta_kernels() {
  static std::once_flag once;
  std::call_once(once, register_all);
}

std::vector<std::string> filled_in_meta_kernels() {
  ensure_meta_kernels();
  return filled();
}

at::Tensor mse_loss_as_allocated(const at::Tensor& x, const at::Tensor& t, int64_t reduction) {
  if (!x.is_meta() || reduction == at::Reduction::None) return at::mse_loss(x, t, reduction);
  const at::Tensor second_temporary = at::empty(at::infer_size(x.sizes(), t.sizes()), x.options());
  return at::mse_loss(x, t, reduction);
}

}  // namespace koila
