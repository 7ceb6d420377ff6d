// Every handle a C caller holds (koila.h declares them opaque) but the tensor's
// (tensor_handle.h, which entries that only take tensors include alone: this header pulls in
// TorchScript, the optimizers and c10d). Only api/ sees these structs.
#pragma once

#include <memory>

#include "api/tensor_handle.h"
#include "dist/group.h"
#include "module/module.h"
#include "plan/planner.h"
#include "plan/timeline.h"
#include "train/optimizer.h"

// A TorchScript module (koila_module_load).
struct koila_module : koila::LoadedModule {};

// An optimizer over a module's parameters (koila_optimizer_*).
struct koila_optimizer : koila::Optimizer {};

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
