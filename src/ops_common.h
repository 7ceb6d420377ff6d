// What every operator entry point shares: the C-boundary wrapper and common checks.
#pragma once

#include <string>

#include "args.h"
#include "batch.h"
#include "error.h"
#include "graph.h"
#include "types.h"

namespace koila {

// Wraps an operator entry point: checks `out`, builds the node, hands back a new handle.
template <class Make>
koila_status* op_entry(const char* name, koila_tensor** out, Make&& make) noexcept {
  return guard(name, [&] {
    arg::out(out);
    NodePtr node = make();
    *out = new_handle(std::move(node));
  });
}

inline int64_t rank_of(const NodePtr& node) { return static_cast<int64_t>(node->meta.shape.size()); }

inline void require_floating(const NodePtr& node, const char* what) {
  if (!at::isFloatingType(node->meta.dtype))
    fail(KOILA_ERROR_DTYPE, std::string(what) + " must be floating point, but is " + dtype_name(node->meta.dtype));
}

}  // namespace koila
