// Generated from src/ops/ops.toml by scripts/gen_ops.py; edit the table, not this file.
//
// X-macro lists of the ops that generic tests and fuzzers take alike. Each X(...) row:
//   KOILA_BINARY_OPS   X(name, reference of a and b, positive inputs)
//   KOILA_SCALAR_OPS   X(name, reference of x and s)
//   KOILA_UNARY_OPS    X(name, reference of x, positive inputs)
//   KOILA_SMOOTH_UNARY_OPS, KOILA_FUZZ_BINARY_OPS, KOILA_FUZZ_SCALAR_OPS,
//   KOILA_FUZZ_UNARY_OPS, KOILA_FUZZ_WITH_DIM_OPS   X(name)
#pragma once

#define KOILA_BINARY_OPS(X)            \
  X(add, at::add(a, b), false)         \
  X(sub, at::sub(a, b), false)         \
  X(mul, at::mul(a, b), false)         \
  X(div, at::div(a, b), true)          \
  X(pow, at::pow(a, b), true)          \
  X(maximum, at::maximum(a, b), false) \
  X(minimum, at::minimum(a, b), false) \
  X(eq, at::eq(a, b), false)           \
  X(ne, at::ne(a, b), false)           \
  X(lt, at::lt(a, b), false)           \
  X(le, at::le(a, b), false)           \
  X(gt, at::gt(a, b), false)           \
  X(ge, at::ge(a, b), false)

#define KOILA_SCALAR_OPS(X)    \
  X(add_scalar, at::add(x, s)) \
  X(sub_scalar, at::sub(x, s)) \
  X(mul_scalar, at::mul(x, s)) \
  X(div_scalar, at::div(x, s)) \
  X(pow_scalar, at::pow(x, s))

#define KOILA_UNARY_OPS(X)              \
  X(neg, at::neg(x), false)             \
  X(abs, at::abs(x), false)             \
  X(exp, at::exp(x), false)             \
  X(log, at::log(x), true)              \
  X(sqrt, at::sqrt(x), true)            \
  X(rsqrt, at::rsqrt(x), true)          \
  X(sin, at::sin(x), false)             \
  X(cos, at::cos(x), false)             \
  X(tanh, at::tanh(x), false)           \
  X(sigmoid, at::sigmoid(x), false)     \
  X(relu, at::relu(x), false)           \
  X(gelu, at::gelu(x), false)           \
  X(silu, at::silu(x), false)           \
  X(erf, at::erf(x), false)             \
  X(hardswish, at::hardswish(x), false)

#define KOILA_SMOOTH_UNARY_OPS(X) \
  X(neg)                          \
  X(sin)                          \
  X(cos)                          \
  X(tanh)                         \
  X(sigmoid)                      \
  X(gelu)                         \
  X(silu)                         \
  X(erf)

#define KOILA_FUZZ_BINARY_OPS(X) \
  X(add)                         \
  X(sub)                         \
  X(mul)                         \
  X(div)                         \
  X(pow)                         \
  X(maximum)                     \
  X(minimum)                     \
  X(eq)                          \
  X(ne)                          \
  X(lt)                          \
  X(le)                          \
  X(gt)                          \
  X(ge)                          \
  X(matmul)

#define KOILA_FUZZ_SCALAR_OPS(X) \
  X(add_scalar)                  \
  X(sub_scalar)                  \
  X(mul_scalar)                  \
  X(div_scalar)                  \
  X(pow_scalar)                  \
  X(leaky_relu)

#define KOILA_FUZZ_UNARY_OPS(X) \
  X(neg)                        \
  X(abs)                        \
  X(exp)                        \
  X(log)                        \
  X(sqrt)                       \
  X(rsqrt)                      \
  X(sin)                        \
  X(cos)                        \
  X(tanh)                       \
  X(sigmoid)                    \
  X(relu)                       \
  X(gelu)                       \
  X(silu)                       \
  X(erf)                        \
  X(hardswish)

#define KOILA_FUZZ_WITH_DIM_OPS(X) \
  X(softmax)                       \
  X(log_softmax)
