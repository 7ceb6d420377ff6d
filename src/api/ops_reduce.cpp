// The thin C entries of ops/reduce.cpp: each decodes its C arguments and calls the engine.
#include "api/args.h"
#include "api/op_entry.h"
#include "api/tensor_handle.h"
#include "ops/common.h"
#include "ops/reduce.h"

using namespace koila;

// Arguments are decoded into locals, one after the other, in the order the checks have
// always run (a function's arguments are evaluated in no set order), so that a call with
// two bad arguments reports the same one as before.

namespace {

using Reduction = NodePtr (*)(const char*, const NodePtr&, std::vector<int64_t>, bool);

koila_status* reduction(const char* entry, koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndims,
                        int keepdim, Reduction op, bool floating_only = false) {
  return op_entry(entry, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    if (floating_only) require_floating(input, "x");  // before keepdim is decoded, as it always was
    const bool keep = arg::flag(keepdim, "keepdim");
    std::vector<int64_t> given = arg::ints(dims, ndims, "dims");
    return op(name, input, std::move(given), keep);
  });
}

// By reference: an unknown value is refused before it is loaded as a koila_reduction.
at::Reduction::Reduction to_reduction(const koila_reduction& r) {
  switch (arg::enumeration(r, "r", "koila_reduction", KOILA_REDUCTION_NONE, KOILA_REDUCTION_SUM)) {
    case KOILA_REDUCTION_NONE: return at::Reduction::None;
    case KOILA_REDUCTION_MEAN: return at::Reduction::Mean;
    case KOILA_REDUCTION_SUM: return at::Reduction::Sum;
  }
  fail(KOILA_ERROR_INTERNAL, "koila_reduction without a LibTorch reduction");
}

using Loss = NodePtr (*)(const char*, const NodePtr&, const NodePtr&, at::Reduction::Reduction);

koila_status* loss(const char* entry, koila_tensor** out, const koila_tensor* input, const koila_tensor* target,
                   const koila_reduction& r, Loss op) {
  return op_entry(entry, out, [&](const char* name) {
    const NodePtr& x = node_of(input, "input");
    const NodePtr& t = node_of(target, "target");
    const at::Reduction::Reduction reduction = to_reduction(r);
    return op(name, x, t, reduction);
  });
}

}  // namespace

extern "C" {

KOILA_API koila_status* koila_sum(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndims,
                                  int keepdim) {
  return reduction(__func__, out, x, dims, ndims, keepdim, ops::sum);
}

KOILA_API koila_status* koila_mean(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndims,
                                   int keepdim) {
  return reduction(__func__, out, x, dims, ndims, keepdim, ops::mean, true);
}

KOILA_API koila_status* koila_amax(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndims,
                                   int keepdim) {
  return reduction(__func__, out, x, dims, ndims, keepdim, ops::amax);
}

KOILA_API koila_status* koila_amin(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndims,
                                   int keepdim) {
  return reduction(__func__, out, x, dims, ndims, keepdim, ops::amin);
}

KOILA_API koila_status* koila_argmax(koila_tensor** out, const koila_tensor* x, int64_t dim, int keepdim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    const bool keep = arg::flag(keepdim, "keepdim");
    return ops::argmax(name, input, dim, keep);
  });
}

KOILA_API koila_status* koila_cross_entropy(koila_tensor** out, const koila_tensor* logits, const koila_tensor* target,
                                            koila_reduction r) {
  return loss(__func__, out, logits, target, r, ops::cross_entropy);
}

KOILA_API koila_status* koila_nll_loss(koila_tensor** out, const koila_tensor* log_probs, const koila_tensor* target,
                                       koila_reduction r) {
  return loss(__func__, out, log_probs, target, r, ops::nll_loss);
}

KOILA_API koila_status* koila_mse_loss(koila_tensor** out, const koila_tensor* a, const koila_tensor* b,
                                       koila_reduction r) {
  return loss(__func__, out, a, b, r, ops::mse_loss);
}

KOILA_API koila_status* koila_l1_loss(koila_tensor** out, const koila_tensor* a, const koila_tensor* b,
                                      koila_reduction r) {
  return loss(__func__, out, a, b, r, ops::l1_loss);
}

KOILA_API koila_status* koila_binary_cross_entropy_with_logits(koila_tensor** out, const koila_tensor* logits,
                                                               const koila_tensor* target, koila_reduction r) {
  return loss(__func__, out, logits, target, r, ops::binary_cross_entropy_with_logits);
}

}  // extern "C"
