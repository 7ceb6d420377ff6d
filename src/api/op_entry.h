// The wrapper every operator entry point (api/op_entries.cpp) shares: checks `out`, decodes
// nothing itself, calls the engine's op (ops/) with the entry's own name, so that the name
// is written once (the C function's) and reaches the node and the status alike, and hands
// back a new handle.
#pragma once

#include <utility>

#include "api/args.h"
#include "api/tensor_handle.h"

namespace koila {

// `make(name)` decodes the arguments, builds the node and returns it.
template <class Make>
koila_status* op_entry(const char* name, koila_tensor** out, Make&& make) noexcept {
  return guard(name, [&] {
    arg::out(out);
    NodePtr node = make(name);
    *out = new_handle(std::move(node));
  });
}

}  // namespace koila
