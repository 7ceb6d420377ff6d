// The handle of a lazy tensor, and the helpers that turn a tensor argument into the node the
// engine works with. Light on purpose: every operator entry includes it (api/handles.h has
// the other handles).
#pragma once

#include "graph/graph.h"

// A lazy tensor: shares the node, so a copy of the handle is the same tensor.
struct koila_tensor {
  koila::NodePtr node;
};

namespace koila {

koila_tensor* new_handle(NodePtr node);
// The node behind a handle; fails when the handle is NULL. `what` names the argument.
const NodePtr& node_of(const koila_tensor* t, const char* what);
// The node behind an optional handle (NULL gives NULL).
NodePtr optional_node(const koila_tensor* t);

}  // namespace koila
