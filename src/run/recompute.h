// Recomputation (issue 51's mechanism; the planner does not choose segments yet): a segment of a
// lazy graph whose forward keeps nothing that autograd would save inside it, and whose backward
// runs the segment again, with autograd, from the inputs it kept, then differentiates that. What
// the segment's ops save for their backward (activations, masks) lives only while its backward
// runs, at the price of running its forward twice.
//
// Exact: the second run draws the same random numbers as the first (the generators its device
// can draw from are set to their states when the first began, and put back after), so dropout
// masks and stochastic depth replay; on the CPU, whose kernels are deterministic, the gradients
// equal those of the segment run once with autograd, bit for bit. Ops that change state in place
// (batch norm's running statistics) are refused inside a segment: they would change it again.
// The same code runs on meta tensors, for the planner's simulations (nothing is drawn there).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "graph/graph.h"
#include "run/executor.h"

namespace koila {

// A segment: `outputs` computed from the values of `inputs`, nodes outside it (every node that
// `outputs` reach and that is not computed inside the segment: the values it starts from, the
// parameters it uses, and its leaves). Every op node between them is the segment's.
struct RecomputeSegment {
  std::vector<const Node*> inputs;
  std::vector<const Node*> outputs;
};

// The nodes a segment computes (between `inputs` and `outputs`); fails with KOILA_ERROR_INVALID_ARGUMENT
// where `outputs` reach a leaf that is not among `inputs`, or KOILA_ERROR_UNSUPPORTED where an op
// inside changes state in place.
std::vector<const Node*> segment_ops(const RecomputeSegment& segment);

// The values of the segment's outputs from `input_values` (one for each input, in order). Under
// grad mode, where some input requires grad, each output's history is one autograd node that
// keeps the inputs and the random generators' states and, in the backward, runs the segment again
// to differentiate it; nothing else of the segment is kept. `options`: as the evaluation around
// it (its chunk, its leaves); `given` and `reached_leaves` are the segment's own. The backward
// runs with the same options: what their functions refer to (a simulation's stand-ins, an
// observer) must outlive it, as they do in a chunk whose backward follows its forward.
Tensors run_recomputed(const RecomputeSegment& segment, const Tensors& input_values, const EvalOptions& options);

}  // namespace koila
