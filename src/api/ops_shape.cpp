// The thin C entries of ops/shape.cpp: each decodes its C arguments and calls the engine.
#include "api/args.h"
#include "api/op_entry.h"
#include "api/tensor_handle.h"
#include "ops/shape.h"

using namespace koila;

// Arguments are decoded into locals, one after the other, in the order the checks have
// always run (a function's arguments are evaluated in no set order), so that a call with
// two bad arguments reports the same one as before.

extern "C" {

KOILA_API koila_status* koila_reshape(koila_tensor** out, const koila_tensor* x, const int64_t* shape, size_t ndim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    std::vector<int64_t> target = arg::ints(shape, ndim, "shape");
    return ops::reshape(name, input, std::move(target));
  });
}

KOILA_API koila_status* koila_flatten(koila_tensor** out, const koila_tensor* x, int64_t start, int64_t end) {
  return op_entry(__func__, out, [&](const char* name) { return ops::flatten(name, node_of(x, "x"), start, end); });
}

KOILA_API koila_status* koila_permute(koila_tensor** out, const koila_tensor* x, const int64_t* dims, size_t ndim) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    ops::check_permute_count(input, ndim);  // before dims are decoded, as it always was
    const std::vector<int64_t> given = arg::ints(dims, ndim, "dims");
    return ops::permute(name, input, given);
  });
}

KOILA_API koila_status* koila_transpose(koila_tensor** out, const koila_tensor* x, int64_t d0, int64_t d1) {
  return op_entry(__func__, out, [&](const char* name) { return ops::transpose(name, node_of(x, "x"), d0, d1); });
}

KOILA_API koila_status* koila_squeeze(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) { return ops::squeeze(name, node_of(x, "x"), dim); });
}

KOILA_API koila_status* koila_unsqueeze(koila_tensor** out, const koila_tensor* x, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) { return ops::unsqueeze(name, node_of(x, "x"), dim); });
}

KOILA_API koila_status* koila_cat(koila_tensor** out, koila_tensor* const* ts, size_t n, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) { return ops::cat(name, arg::tensors(ts, n, "ts"), dim); });
}

KOILA_API koila_status* koila_stack(koila_tensor** out, koila_tensor* const* ts, size_t n, int64_t dim) {
  return op_entry(__func__, out, [&](const char* name) { return ops::stack(name, arg::tensors(ts, n, "ts"), dim); });
}

KOILA_API koila_status* koila_narrow(koila_tensor** out, const koila_tensor* x, int64_t dim, int64_t start,
                                     int64_t length) {
  return op_entry(__func__, out,
                  [&](const char* name) { return ops::narrow(name, node_of(x, "x"), dim, start, length); });
}

KOILA_API koila_status* koila_index_select(koila_tensor** out, const koila_tensor* x, int64_t dim,
                                           const koila_tensor* index) {
  return op_entry(__func__, out, [&](const char* name) {
    const NodePtr& input = node_of(x, "x");
    const NodePtr& idx = node_of(index, "index");
    return ops::index_select(name, input, dim, idx);
  });
}

}  // extern "C"
