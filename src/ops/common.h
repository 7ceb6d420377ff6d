// What the operators (ops/*.cpp) share: the checks several of them make.
#pragma once

#include <string>

#include "base/dims.h"
#include "base/error.h"
#include "base/text.h"
#include "graph/batch_rules.h"
#include "graph/graph.h"

namespace koila {

inline int64_t rank_of(const NodePtr& node) { return static_cast<int64_t>(node->meta.shape.size()); }

inline void require_floating(const NodePtr& node, const char* what) {
  if (!at::isFloatingType(node->meta.dtype))
    fail(Code::Dtype, std::string(what) + " must be floating point, but is " + dtype_name(node->meta.dtype));
}

}  // namespace koila
