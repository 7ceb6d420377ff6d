// Elementwise operators: binary (broadcasting), with a scalar, unary, activations, softmax,
// dropout. All keep the batch where broadcasting puts it (batch::elementwise) unless noted.
#include "ops/ops.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "ops/common.h"

using namespace koila;

namespace {

// GELU whose backward hands LibTorch a contiguous incoming gradient. LibTorch 1.13's CPU
// gelu_backward (the oneDNN path, float32) ignores the strides of that gradient, so a
// permute or transpose after a gelu gave wrong gradients, eagerly too (found by the
// differential graph fuzzer). It saves what the native op saves: the input.
struct Gelu : torch::autograd::Function<Gelu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return at::gelu(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    return {at::gelu_backward(grads[0].contiguous(), x)};
  }
};

at::Tensor gelu_with_contiguous_grad(const at::Tensor& x) { return Gelu::apply(x); }

using Binary = at::Tensor (*)(const at::Tensor&, const at::Tensor&);
using WithScalar = at::Tensor (*)(const at::Tensor&, double);
using Unary = at::Tensor (*)(const at::Tensor&);

// Every unary op here maps a floating tensor to one of the same shape and dtype: no need to
// run it on meta tensors to know.
Meta same_as_input(const std::vector<const Meta*>& in, const Node&) {
  Meta m;
  m.shape = in[0]->shape;
  m.dtype = in[0]->dtype;
  return m;
}

NodePtr binary(const char* name, const NodePtr& a, const NodePtr& b, Binary fn) {
  return build(
      OpSpec{
          .name = name, .run = [fn](const Tensors& in, const Node&) { return fn(in[0], in[1]); }, .probe_kernel = true},
      {a, b});
}

NodePtr with_scalar(const char* name, const NodePtr& a, double s, WithScalar fn) {
  return build(
      OpSpec{
          .name = name, .run = [fn, s](const Tensors& in, const Node&) { return fn(in[0], s); }, .probe_kernel = true},
      {a});
}

NodePtr unary(const char* name, const NodePtr& input, Unary fn, bool floating_only = false) {
  if (floating_only) require_floating(input, "x");
  OpSpec spec{.name = name, .run = [fn](const Tensors& in, const Node&) { return fn(in[0]); }, .probe_kernel = true};
  if (at::isFloatingType(input->meta.dtype)) spec.infer = same_as_input;
  return build(std::move(spec), {input});
}

// Softmax-like ops normalize along `dim`, which mixes samples when it is the batch dim.
NodePtr along_dim(const char* name, const NodePtr& input, int64_t dim, at::Tensor (*fn)(const at::Tensor&, int64_t)) {
  require_floating(input, "x");
  const int64_t d = normalize_dim(dim, rank_of(input), "dim");
  return build(OpSpec{.name = name,
                      .run = [fn, d](const Tensors& in, const Node&) { return fn(in[0], d); },
                      .batch = batch::same_dims_except({d}, "normalizes"),
                      .probe_kernel = true},
               {input});
}

}  // namespace

#define KOILA_BINARY_OP(NAME, EXPR)                                                           \
  NodePtr NAME(const char* name, const NodePtr& a, const NodePtr& b) {                        \
    return binary(name, a, b, [](const at::Tensor& x, const at::Tensor& y) { return EXPR; }); \
  }

#define KOILA_WITH_SCALAR_OP(NAME, EXPR)                                                \
  NodePtr NAME(const char* name, const NodePtr& a, double s) {                          \
    return with_scalar(name, a, s, [](const at::Tensor& x, double v) { return EXPR; }); \
  }

#define KOILA_UNARY_OP(NAME, EXPR, FLOATING_ONLY)                          \
  NodePtr NAME(const char* name, const NodePtr& x) {                       \
    return unary(                                                          \
        name, x, [](const at::Tensor& t) { return EXPR; }, FLOATING_ONLY); \
  }

namespace koila::ops {

KOILA_BINARY_OP(add, at::add(x, y))
KOILA_BINARY_OP(sub, at::sub(x, y))
KOILA_BINARY_OP(mul, at::mul(x, y))
KOILA_BINARY_OP(div, at::div(x, y))
KOILA_BINARY_OP(pow, at::pow(x, y))
KOILA_BINARY_OP(maximum, at::maximum(x, y))
KOILA_BINARY_OP(minimum, at::minimum(x, y))
KOILA_BINARY_OP(eq, at::eq(x, y))
KOILA_BINARY_OP(ne, at::ne(x, y))
KOILA_BINARY_OP(lt, at::lt(x, y))
KOILA_BINARY_OP(le, at::le(x, y))
KOILA_BINARY_OP(gt, at::gt(x, y))
KOILA_BINARY_OP(ge, at::ge(x, y))

KOILA_WITH_SCALAR_OP(add_scalar, at::add(x, v))
KOILA_WITH_SCALAR_OP(sub_scalar, at::sub(x, v))
KOILA_WITH_SCALAR_OP(mul_scalar, at::mul(x, v))
KOILA_WITH_SCALAR_OP(div_scalar, at::div(x, v))
KOILA_WITH_SCALAR_OP(pow_scalar, at::pow(x, v))

KOILA_UNARY_OP(neg, at::neg(t), false)
KOILA_UNARY_OP(abs, at::abs(t), false)
KOILA_UNARY_OP(exp, at::exp(t), false)
KOILA_UNARY_OP(log, at::log(t), false)
KOILA_UNARY_OP(sqrt, at::sqrt(t), false)
KOILA_UNARY_OP(rsqrt, at::rsqrt(t), false)
KOILA_UNARY_OP(sin, at::sin(t), false)
KOILA_UNARY_OP(cos, at::cos(t), false)
KOILA_UNARY_OP(tanh, at::tanh(t), false)
KOILA_UNARY_OP(sigmoid, at::sigmoid(t), false)
KOILA_UNARY_OP(relu, at::relu(t), false)
KOILA_UNARY_OP(gelu, gelu_with_contiguous_grad(t), true)
KOILA_UNARY_OP(silu, at::silu(t), true)
KOILA_UNARY_OP(erf, at::erf(t), false)
KOILA_UNARY_OP(hardswish, at::hardswish(t), true)

NodePtr leaky_relu(const char* name, const NodePtr& input, double slope) {
  require_floating(input, "x");
  return build(OpSpec{.name = name,
                      .run = [slope](const Tensors& in, const Node&) { return at::leaky_relu(in[0], slope); },
                      .probe_kernel = true},
               {input});
}

void check_clamp_bounds(double lo, double hi) {
  if (std::isnan(lo) || std::isnan(hi)) fail(Code::InvalidArgument, "lo and hi must not be NaN");
}

NodePtr clamp(const char* name, const NodePtr& x, double lo, double hi) {
  check_clamp_bounds(lo, hi);
  return build(OpSpec{.name = name,
                      .run = [lo, hi](const Tensors& in, const Node&) { return at::clamp(in[0], lo, hi); },
                      .probe_kernel = true},
               {x});
}

NodePtr softmax(const char* name, const NodePtr& x, int64_t dim) {
  return along_dim(name, x, dim, [](const at::Tensor& t, int64_t d) { return at::softmax(t, d); });
}

NodePtr log_softmax(const char* name, const NodePtr& x, int64_t dim) {
  return along_dim(name, x, dim, [](const at::Tensor& t, int64_t d) { return at::log_softmax(t, d); });
}

void check_dropout(const NodePtr& input, double p) {
  require_floating(input, "x");
  if (!(p >= 0.0 && p <= 1.0))
    fail(Code::InvalidArgument, "dropout probability must be between 0 and 1, got " + std::to_string(p));
}

NodePtr dropout(const char* name, const NodePtr& input, double p, bool on) {
  check_dropout(input, p);
  return build(OpSpec{.name = name,
                      .run = [p, on](const Tensors& in, const Node&) { return at::dropout(in[0], p, on); },
                      .probe_kernel = true,
                      // What it keeps: nothing at p = 0 (its input passes through), only its
                      // result at p = 1, a mask of its input's size in between.
                      .signature = !on      ? "eval"
                                   : p == 0 ? "train p=0"
                                   : p == 1 ? "train p=1"
                                            : "train"},
               {input});
}

}  // namespace koila::ops

#undef KOILA_BINARY_OP
#undef KOILA_WITH_SCALAR_OP
#undef KOILA_UNARY_OP
