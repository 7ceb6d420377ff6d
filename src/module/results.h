// Internal to module/ (only src/module/*.cpp include it; not part of koila's interface): a
// module's results when its forward returns several tensors (koila_module_forward_all): a
// tuple, a list or a dict, nested ones flattened depth-first, dict entries in the order the
// module returns them, None kept as an undefined tensor.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>

#include <string>

#include "graph/graph.h"

namespace koila::module_detail {

// Whether a forward declared to return `type` can give only tensors and None (Tensor,
// Optional[Tensor], and tuples, lists and dicts of those, nested); otherwise `*why` names
// the first part that cannot.
bool returns_tensors(const c10::TypePtr& type, std::string* why);

// Appends `result`'s tensors to `out` in that order (undefined for None); a part that is
// neither a tensor, None nor a tuple, list or dict of those fails with
// Code::Unsupported, naming it, in a message that begins with `who`.
void flatten_results(const c10::IValue& result, Tensors& out, const std::string& who);

}  // namespace koila::module_detail
