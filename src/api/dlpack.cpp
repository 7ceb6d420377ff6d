// The C entry points for DLPack: tensors shared with other array libraries without a copy.
#include "base/dlpack.h"
#include "api/args.h"
#include "api/tensor_handle.h"
#include "base/error.h"
#include "graph/graph.h"
#include "plan/planner.h"

using namespace koila;

extern "C" {

KOILA_API koila_status* koila_tensor_from_dlpack(koila_tensor** out, void* managed, int versioned) {
  return guard(__func__, [&] {
    // Before anything can fail, the struct is owned: every failure below releases it.
    if (versioned != 0 && versioned != 1)
      fail(Code::InvalidArgument, "versioned must be 0 (DLManagedTensor) or 1 (DLManagedTensorVersioned), got " +
                                      std::to_string(versioned) + "; managed was not touched");
    at::Tensor t = dlpack::from_dlpack(managed, versioned == 1);
    arg::out(out);
    *out = new_handle(make_constant(std::move(t)));
  });
}

KOILA_API koila_status* koila_tensor_to_dlpack(void** out, const koila_tensor* t, int versioned) {
  return guard(__func__, [&] {
    arg::not_null(out, "out");
    const NodePtr& node = node_of(t, "t");
    const bool v = arg::flag(versioned, "versioned");
    *out = dlpack::to_dlpack(node->lazy() ? run_forward(node) : node->value, v);
  });
}

}  // extern "C"
