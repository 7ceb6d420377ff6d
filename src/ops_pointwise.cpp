// Elementwise operators: binary (broadcasting), with a scalar, unary, activations, softmax,
// dropout. All keep the batch where broadcasting puts it (batch::elementwise) unless noted.
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "ops_common.h"

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

koila_status* binary(const char* name, koila_tensor** out, const koila_tensor* a, const koila_tensor* b,
                     Binary fn) {
  return op_entry(name, out, [&] {
    return build({name, [fn](const Tensors& in, const Node&) { return fn(in[0], in[1]); }, {}, true},
                 {node_of(a, "a"), node_of(b, "b")});
  });
}

koila_status* with_scalar(const char* name, koila_tensor** out, const koila_tensor* a, double s, WithScalar fn) {
  return op_entry(name, out, [&] {
    return build({name, [fn, s](const Tensors& in, const Node&) { return fn(in[0], s); }, {}, true}, {node_of(a, "a")});
  });
}

koila_status* unary(const char* name, koila_tensor** out, const koila_tensor* x, Unary fn,
                    bool floating_only = false) {
  return op_entry(name, out, [&] {
    const NodePtr& input = node_of(x, "x");
    if (floating_only) require_floating(input, "x");
    OpSpec spec{name, [fn](const Tensors& in, const Node&) { return fn(in[0]); }, {}, true};
    if (at::isFloatingType(input->meta.dtype)) spec.infer = same_as_input;
    return build(std::move(spec), {input});
  });
}

// Softmax-like ops normalize along `dim`, which mixes samples when it is the batch dim.
koila_status* along_dim(const char* name, koila_tensor** out, const koila_tensor* x, int64_t dim,
                        at::Tensor (*fn)(const at::Tensor&, int64_t)) {
  return op_entry(name, out, [&] {
    const NodePtr& input = node_of(x, "x");
    require_floating(input, "x");
    const int64_t d = normalize_dim(dim, rank_of(input), "dim");
    return build({name, [fn, d](const Tensors& in, const Node&) { return fn(in[0], d); },
                  batch::same_dims_except({d}, "normalizes"), true},
                 {input});
  });
}

}  // namespace

#define KOILA_BINARY(NAME, EXPR)                                                                       \
  KOILA_API koila_status* koila_##NAME(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) { \
    return binary("koila_" #NAME, out, a, b, [](const at::Tensor& x, const at::Tensor& y) { return EXPR; }); \
  }

#define KOILA_WITH_SCALAR(NAME, EXPR)                                                            \
  KOILA_API koila_status* koila_##NAME(koila_tensor** out, const koila_tensor* a, double s) {   \
    return with_scalar("koila_" #NAME, out, a, s, [](const at::Tensor& x, double v) { return EXPR; }); \
  }

#define KOILA_UNARY(NAME, EXPR, FLOATING_ONLY)                                                   \
  KOILA_API koila_status* koila_##NAME(koila_tensor** out, const koila_tensor* x) {             \
    return unary("koila_" #NAME, out, x, [](const at::Tensor& t) { return EXPR; }, FLOATING_ONLY); \
  }

extern "C" {

KOILA_BINARY(add, at::add(x, y))
KOILA_BINARY(sub, at::sub(x, y))
KOILA_BINARY(mul, at::mul(x, y))
KOILA_BINARY(div, at::div(x, y))
KOILA_BINARY(pow, at::pow(x, y))
KOILA_BINARY(maximum, at::maximum(x, y))
KOILA_BINARY(minimum, at::minimum(x, y))
KOILA_BINARY(eq, at::eq(x, y))
KOILA_BINARY(ne, at::ne(x, y))
KOILA_BINARY(lt, at::lt(x, y))
KOILA_BINARY(le, at::le(x, y))
KOILA_BINARY(gt, at::gt(x, y))
KOILA_BINARY(ge, at::ge(x, y))

KOILA_WITH_SCALAR(add_scalar, at::add(x, v))
KOILA_WITH_SCALAR(sub_scalar, at::sub(x, v))
KOILA_WITH_SCALAR(mul_scalar, at::mul(x, v))
KOILA_WITH_SCALAR(div_scalar, at::div(x, v))
KOILA_WITH_SCALAR(pow_scalar, at::pow(x, v))

KOILA_UNARY(neg, at::neg(t), false)
KOILA_UNARY(abs, at::abs(t), false)
KOILA_UNARY(exp, at::exp(t), false)
KOILA_UNARY(log, at::log(t), false)
KOILA_UNARY(sqrt, at::sqrt(t), false)
KOILA_UNARY(rsqrt, at::rsqrt(t), false)
KOILA_UNARY(sin, at::sin(t), false)
KOILA_UNARY(cos, at::cos(t), false)
KOILA_UNARY(tanh, at::tanh(t), false)
KOILA_UNARY(sigmoid, at::sigmoid(t), false)
KOILA_UNARY(relu, at::relu(t), false)
KOILA_UNARY(gelu, gelu_with_contiguous_grad(t), true)
KOILA_UNARY(silu, at::silu(t), true)

KOILA_API koila_status* koila_leaky_relu(koila_tensor** out, const koila_tensor* x, double slope) {
  return op_entry(__func__, out, [&] {
    const NodePtr& input = node_of(x, "x");
    require_floating(input, "x");
    return build({"koila_leaky_relu", [slope](const Tensors& in, const Node&) { return at::leaky_relu(in[0], slope); },
                  {}, true},
                 {input});
  });
}

KOILA_API koila_status* koila_clamp(koila_tensor** out, const koila_tensor* x, double lo, double hi) {
  return op_entry(__func__, out, [&] {
    if (std::isnan(lo) || std::isnan(hi)) fail(KOILA_ERROR_INVALID_ARGUMENT, "lo and hi must not be NaN");
    return build({"koila_clamp", [lo, hi](const Tensors& in, const Node&) { return at::clamp(in[0], lo, hi); }, {}, true},
                 {node_of(x, "x")});
  });
}

KOILA_API koila_status* koila_softmax(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return along_dim("koila_softmax", out, x, dim, [](const at::Tensor& t, int64_t d) { return at::softmax(t, d); });
}

KOILA_API koila_status* koila_log_softmax(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return along_dim("koila_log_softmax", out, x, dim,
                   [](const at::Tensor& t, int64_t d) { return at::log_softmax(t, d); });
}

KOILA_API koila_status* koila_dropout(koila_tensor** out, const koila_tensor* x, double p, int train) {
  return op_entry(__func__, out, [&] {
    const NodePtr& input = node_of(x, "x");
    require_floating(input, "x");
    if (!(p >= 0.0 && p <= 1.0))
      fail(KOILA_ERROR_INVALID_ARGUMENT, "dropout probability must be between 0 and 1, got " + std::to_string(p));
    const bool on = arg::flag(train, "train");
    OpSpec spec{"koila_dropout", [p, on](const Tensors& in, const Node&) { return at::dropout(in[0], p, on); }, {}, true};
    spec.signature = on ? "train" : "eval";
    return build(std::move(spec), {input});
  });
}

}  // extern "C"
