// The thin C entries of ops/pointwise.cpp: each decodes its C arguments and calls the engine.
#include "api/args.h"
#include "api/op_entry.h"
#include "api/tensor_handle.h"
#include "ops/pointwise.h"

using namespace koila;

// Arguments are decoded into locals, one after the other, in the order the checks have
// always run (a function's arguments are evaluated in no set order), so that a call with
// two bad arguments reports the same one as before.

#define KOILA_BINARY(NAME)                                                                                 \
  KOILA_API koila_status* koila_##NAME(koila_tensor** out, const koila_tensor* a, const koila_tensor* b) { \
    return op_entry(__func__, out, [&](const char* name) {                                                 \
      const NodePtr& lhs = node_of(a, "a");                                                                \
      const NodePtr& rhs = node_of(b, "b");                                                                \
      return ops::NAME(name, lhs, rhs);                                                                    \
    });                                                                                                    \
  }

#define KOILA_WITH_SCALAR(NAME)                                                                            \
  KOILA_API koila_status* koila_##NAME(koila_tensor** out, const koila_tensor* a, double s) {              \
    return op_entry(__func__, out, [&](const char* name) { return ops::NAME(name, node_of(a, "a"), s); }); \
  }

#define KOILA_UNARY(NAME)                                                                               \
  KOILA_API koila_status* koila_##NAME(koila_tensor** out, const koila_tensor* x) {                     \
    return op_entry(__func__, out, [&](const char* name) { return ops::NAME(name, node_of(x, "x")); }); \
  }

extern "C" {

KOILA_BINARY(add)
KOILA_BINARY(sub)
KOILA_BINARY(mul)
KOILA_BINARY(div)
KOILA_BINARY(pow)
KOILA_BINARY(maximum)
KOILA_BINARY(minimum)
KOILA_BINARY(eq)
KOILA_BINARY(ne)
KOILA_BINARY(lt)
KOILA_BINARY(le)
KOILA_BINARY(gt)
KOILA_BINARY(ge)

KOILA_WITH_SCALAR(add_scalar)
KOILA_WITH_SCALAR(sub_scalar)
KOILA_WITH_SCALAR(mul_scalar)
KOILA_WITH_SCALAR(div_scalar)
KOILA_WITH_SCALAR(pow_scalar)

KOILA_UNARY(neg)
KOILA_UNARY(abs)
KOILA_UNARY(exp)
KOILA_UNARY(log)
KOILA_UNARY(sqrt)
KOILA_UNARY(rsqrt)
KOILA_UNARY(sin)
KOILA_UNARY(cos)
KOILA_UNARY(tanh)
KOILA_UNARY(sigmoid)
KOILA_UNARY(relu)
KOILA_UNARY(gelu)
KOILA_UNARY(silu)

KOILA_API koila_status* koila_leaky_relu(koila_tensor** out, const koila_tensor* x, double slope) {
  return op_entry(__func__, out, [&](const char* name) { return ops::leaky_relu(name, node_of(x, "x"), slope); });
}

KOILA_API koila_status* koila_clamp(koila_tensor** out, const koila_tensor* x, double lo, double hi) {
  return op_entry(__func__, out, [&](const char* name) {
    ops::check_clamp_bounds(lo, hi);  // before x is decoded, as it always was
    return ops::clamp(name, node_of(x, "x"), lo, hi);
  });
}

KOILA_API koila_status* koila_softmax(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) { return ops::softmax(name, node_of(x, "x"), dim); });
}

KOILA_API koila_status* koila_log_softmax(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) { return ops::log_softmax(name, node_of(x, "x"), dim); });
}

KOILA_API koila_status* koila_dropout(koila_tensor** out, const koila_tensor* x, double p, int train) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    ops::check_dropout(input, p);  // before `train` is decoded, as it always was
    const bool on = arg::flag(train, "train");
    return ops::dropout(name, input, p, on);
  });
}

}  // extern "C"

#undef KOILA_BINARY
#undef KOILA_WITH_SCALAR
#undef KOILA_UNARY
