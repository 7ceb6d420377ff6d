// Running a graph: evaluation of a lazy tensor and backward from a lazy loss.
#pragma once

#include <ATen/ATen.h>

#include "graph.h"

namespace koila {

// What an evaluation did, for tests and the planner.
struct EvalStats {
  size_t ops_run = 0;
  size_t peak_live_values = 0;  // most intermediate results held at once
};

struct EvalOptions {
  bool grad = false;         // record autograd (for backward)
  int64_t chunk_start = 0;   // with chunk_length >= 0: evaluate only these samples of the batch
  int64_t chunk_length = -1;
  EvalStats* stats = nullptr;  // filled in when given
};

// Evaluates `root` against the current values of its inputs. Each intermediate is released
// as soon as its last user has run.
at::Tensor evaluate(const NodePtr& root, const EvalOptions& options = {});

// Backward from a one-element loss: gradients add into the .grad of every leaf that
// requires grad, only once all of them have been computed.
void backward(const NodePtr& loss);

}  // namespace koila
