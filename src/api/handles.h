// Every handle a C caller holds (koila.h declares them opaque), and the helpers that turn a
// handle argument into what the engine works with. Only api/ sees these structs.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>

#include "dist/group.h"
#include "graph/graph.h"
#include "module/module.h"
#include "plan/planner.h"
#include "plan/timeline.h"

// A lazy tensor: shares the node, so a copy of the handle is the same tensor.
struct koila_tensor {
  koila::NodePtr node;
};

// A TorchScript module (koila_module_load).
struct koila_module : koila::LoadedModule {};

// An optimizer over a module's parameters (koila_optimizer_*).
struct koila_optimizer {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  koila::Tensors params;
};

// A plan (koila_plan_new) and its memory timeline (koila_plan_timeline).
struct koila_plan {
  koila::Plan plan;
};
struct koila_timeline {
  koila::Timeline timeline;
};

// A process group (koila_group_new).
struct koila_group {
  std::unique_ptr<koila::Group> group;
};

namespace koila {

koila_tensor* new_handle(NodePtr node);
// The node behind a handle; fails when the handle is NULL. `what` names the argument.
const NodePtr& node_of(const koila_tensor* t, const char* what);
// The node behind an optional handle (NULL gives NULL).
NodePtr optional_node(const koila_tensor* t);

}  // namespace koila
