// The C entry points for tensors, metadata, reads and autograd.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstring>
#include <sstream>

#include "api/args.h"
#include "api/convert.h"
#include "api/tensor_handle.h"
#include "base/dims.h"
#include "base/error.h"
#include "base/text.h"
#include "graph/graph.h"
#include "memory/machine_memory.h"
#include "plan/planner.h"
#include "run/zeroed_grads.h"

using namespace koila;

namespace {

void set_out(koila_tensor** out, NodePtr node) { *out = new_handle(std::move(node)); }

at::TensorOptions options_for(const koila_dtype& dtype, const char* device) {
  const at::ScalarType type = to_scalar_type(dtype);
  return at::TensorOptions().dtype(type).device(parse_device(device));
}

using Factory = at::Tensor (*)(at::IntArrayRef, at::TensorOptions);

// Validates the arguments of a filled factory and makes the tensor. `floating_only` for
// factories that draw floating-point samples.
void make_filled(koila_tensor** out, const int64_t* shape, size_t ndim, const koila_dtype& dtype, const char* device,
                 Factory factory, bool floating_only = false) {
  arg::out(out);
  const auto dims = checked_shape(shape, ndim, "shape");
  const auto options = options_for(dtype, device);
  const at::ScalarType type = options.dtype().toScalarType();
  if (floating_only && !at::isFloatingType(type))
    fail(Code::Dtype, std::string("randn needs a floating dtype, got ") + dtype_name(type));
  check_allocation(checked_numel(dims) * c10::elementSize(type), options.device());
  set_out(out, make_constant(factory(dims, options)));
}

// The value of t, evaluated without recording gradients.
at::Tensor value_of(const NodePtr& node) { return run_forward(node); }

}  // namespace

extern "C" {

KOILA_API koila_status* koila_manual_seed(uint64_t seed) {
  return guard(__func__, [&] { at::manual_seed(seed); });
}

KOILA_API koila_status* koila_tensor_from_data(koila_tensor** out, const void* data, size_t nbytes, koila_dtype dtype,
                                               const int64_t* shape, size_t ndim, const char* device) {
  return guard(__func__, [&] {
    arg::out(out);
    const auto dims = checked_shape(shape, ndim, "shape");
    const auto options = options_for(dtype, device);
    const uint64_t numel = checked_numel(dims);
    const uint64_t expected = numel * c10::elementSize(options.dtype().toScalarType());
    if (nbytes != expected)
      fail(Code::InvalidArgument, "nbytes is " + std::to_string(nbytes) + " but shape " + shape_string(dims) + " of " +
                                      dtype_name(options.dtype().toScalarType()) + " needs " +
                                      std::to_string(expected));
    if (nbytes > 0) arg::not_null(data, "data");
    check_allocation(expected, options.device());
    at::Tensor host = at::empty(dims, options.device(at::kCPU));
    if (nbytes > 0) std::memcpy(host.data_ptr(), data, nbytes);
    set_out(out, make_constant(options.device().is_cpu() ? host : host.to(options.device())));
  });
}

KOILA_API koila_status* koila_tensor_zeros(koila_tensor** out, const int64_t* shape, size_t ndim, koila_dtype dtype,
                                           const char* device) {
  return guard(__func__, [&] {
    make_filled(out, shape, ndim, dtype, device,
                [](at::IntArrayRef s, at::TensorOptions o) { return at::zeros(s, o); });
  });
}

KOILA_API koila_status* koila_tensor_ones(koila_tensor** out, const int64_t* shape, size_t ndim, koila_dtype dtype,
                                          const char* device) {
  return guard(__func__, [&] {
    make_filled(out, shape, ndim, dtype, device, [](at::IntArrayRef s, at::TensorOptions o) { return at::ones(s, o); });
  });
}

KOILA_API koila_status* koila_tensor_randn(koila_tensor** out, const int64_t* shape, size_t ndim, koila_dtype dtype,
                                           const char* device) {
  return guard(__func__, [&] {
    make_filled(
        out, shape, ndim, dtype, device, [](at::IntArrayRef s, at::TensorOptions o) { return at::randn(s, o); }, true);
  });
}

KOILA_API void koila_tensor_free(koila_tensor* t) { delete t; }

KOILA_API koila_status* koila_lazy(koila_tensor** out, const koila_tensor* t, int64_t batch_dim) {
  return guard(__func__, [&] {
    arg::out(out);
    const NodePtr& node = node_of(t, "t");
    const int64_t rank = static_cast<int64_t>(node->meta.shape.size());
    int64_t dim = -1;
    if (batch_dim != KOILA_NO_BATCH) {
      if (rank == 0) fail(Code::InvalidArgument, "a scalar (rank 0) tensor has no dim to be the batch");
      dim = normalize_dim(batch_dim, rank, "batch_dim");
    }
    if (node->lazy()) {
      if (node->meta.batch_dim != dim)
        fail(Code::InvalidArgument, "t is already lazy with batch dim " + std::to_string(node->meta.batch_dim) +
                                        "; it cannot be given batch dim " + std::to_string(dim));
      set_out(out, node);
      return;
    }
    set_out(out, make_input(node->value, dim));
  });
}

KOILA_API koila_status* koila_tensor_shape(const koila_tensor* t, int64_t* dims, size_t capacity, size_t* ndim) {
  return guard(__func__, [&] {
    const NodePtr& node = node_of(t, "t");
    arg::not_null(ndim, "ndim");
    if (capacity > 0) arg::not_null(dims, "dims");
    const auto& shape = node->meta.shape;
    *ndim = shape.size();
    for (size_t i = 0; i < std::min(capacity, shape.size()); ++i) dims[i] = shape[i];
  });
}

KOILA_API koila_status* koila_tensor_dtype(const koila_tensor* t, koila_dtype* out) {
  return guard(__func__, [&] {
    const NodePtr& node = node_of(t, "t");
    arg::not_null(out, "out");
    *out = to_koila_dtype(node->meta.dtype);
  });
}

KOILA_API koila_status* koila_tensor_batch_dim(const koila_tensor* t, int64_t* out) {
  return guard(__func__, [&] {
    const NodePtr& node = node_of(t, "t");
    arg::not_null(out, "out");
    *out = node->meta.batch_dim;
  });
}

KOILA_API koila_status* koila_tensor_is_lazy(const koila_tensor* t, int* out) {
  return guard(__func__, [&] {
    const NodePtr& node = node_of(t, "t");
    arg::not_null(out, "out");
    *out = node->lazy() ? 1 : 0;
  });
}

KOILA_API koila_status* koila_tensor_to_host(const koila_tensor* t, void* data, size_t nbytes) {
  return guard(__func__, [&] {
    const NodePtr& node = node_of(t, "t");
    const uint64_t expected = checked_numel(node->meta.shape) * c10::elementSize(node->meta.dtype);
    if (nbytes != expected)
      fail(Code::InvalidArgument, "nbytes is " + std::to_string(nbytes) + " but the tensor (" +
                                      shape_string(node->meta.shape) + " " + dtype_name(node->meta.dtype) + ") has " +
                                      std::to_string(expected));
    if (nbytes > 0) arg::not_null(data, "data");
    if (nbytes == 0) return;
    // Straight into the caller's buffer, whatever the result's strides or device: no copy
    // beyond what the planned evaluation counted.
    c10::NoGradGuard no_grad;
    at::from_blob(data, node->meta.shape, at::TensorOptions().dtype(node->meta.dtype)).copy_(value_of(node));
  });
}

KOILA_API koila_status* koila_tensor_item(const koila_tensor* t, double* out) {
  return guard(__func__, [&] {
    const NodePtr& node = node_of(t, "t");
    arg::not_null(out, "out");
    const uint64_t numel = checked_numel(node->meta.shape);
    if (numel != 1)
      fail(Code::InvalidArgument, "item needs a tensor with exactly one element, but this one has shape " +
                                      shape_string(node->meta.shape) + " (" + std::to_string(numel) + " elements)");
    *out = value_of(node).item<double>();
  });
}

KOILA_API koila_status* koila_tensor_to_string(const koila_tensor* t, char* buf, size_t capacity, size_t* needed) {
  return guard(__func__, [&] {
    const NodePtr& node = node_of(t, "t");
    arg::buffer(buf, capacity);
    std::ostringstream os;
    os << value_of(node).detach();
    write_text(os.str(), buf, capacity, needed);
  });
}

KOILA_API koila_status* koila_eval(koila_tensor** out, const koila_tensor* t) {
  return guard(__func__, [&] {
    arg::out(out);
    const NodePtr& node = node_of(t, "t");
    set_out(out, node->lazy() ? make_constant(run_forward(node)) : node);
  });
}

KOILA_API koila_status* koila_tensor_set_requires_grad(koila_tensor* t, int flag) {
  return guard(__func__, [&] {
    const NodePtr& node = node_of(t, "t");
    const bool wanted = arg::flag(flag, "flag");
    if (node->lazy())
      fail(Code::InvalidArgument,
           "t is lazy; requires_grad applies to concrete tensors (the gradients of a "
           "lazy graph flow to the concrete tensors it was built from)");
    if (wanted && !at::isFloatingType(node->meta.dtype))
      fail(Code::Dtype,
           std::string("only floating point tensors can require grad, t is ") + dtype_name(node->meta.dtype));
    if (!node->value.is_leaf())
      fail(Code::InvalidArgument,
           "t is the result of an operation on tensors that require grad; only "
           "leaves can change requires_grad");
    node->value.set_requires_grad(wanted);
  });
}

KOILA_API koila_status* koila_backward(const koila_tensor* loss) {
  return guard(__func__, [&] { run_backward(node_of(loss, "loss")); });
}

KOILA_API koila_status* koila_tensor_grad(koila_tensor** out, const koila_tensor* t) {
  return guard(__func__, [&] {
    arg::out(out);
    const NodePtr& node = node_of(t, "t");
    // Only leaves accumulate a .grad; asking a non-leaf makes LibTorch print a warning.
    if (node->kind == NodeKind::Op || !node->value.is_leaf()) return;
    const at::Tensor& grad = node->value.grad();
    if (grad.defined()) set_out(out, make_constant(grad));
  });
}

KOILA_API koila_status* koila_tensor_zero_grad(koila_tensor* t) {
  return guard(__func__, [&] {
    const NodePtr& node = node_of(t, "t");
    if (node->kind == NodeKind::Op || !node->value.is_leaf()) return;
    c10::NoGradGuard no_grad;
    const at::Tensor& grad = node->value.grad();
    if (grad.defined()) note_zeroed(grad.zero_());
  });
}

}  // extern "C"
