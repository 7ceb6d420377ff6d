// Internal to module/ (only src/module/*.cpp include it): a module call or exported program run
// in segments of its own graph, each recomputed in the backward (issue 51). A TorchScript module
// or .pt2 program is one op of koila's graph, so recomputing koila's ops cannot free what the
// module keeps for its backward; where a plan asks (segmenting_programs(), run/recompute.h), the
// call's forward runs its graph in segments without autograd, keeping only the values that
// cross from one segment to the next, and one autograd node runs each segment again with
// autograd, last to first, to differentiate it. A whole-model call's backward then holds the
// boundaries and one segment's activations rather than the whole model's.
//
// The granularity is the module's forward graph after koila inlined it (op_routes.h): its
// top-level nodes, one TorchScript operator each (a loop or a branch is one node with what runs
// inside it, except a branch that tests a bool attribute of the module, such as a residual
// block's use_res_connect or a layer's training: the side the module takes is inlined first, as
// freezing would, and its operators are top-level nodes). A cut between two nodes is allowed
// where every value crossing it is a tensor that no later node writes in place, or a value
// holding no tensor (an int, a list of ints for a shape, a device); the module's attributes
// (parameters, buffers, submodules) and constants are read again in each segment rather than
// crossing. Tuples, lists of tensors and objects never cross.
//
// The cuts: the sizes of every value come from one run of the graph on meta tensors; of the
// allowed cuts, those with the least peak in a timeline model: while a segment's backward runs,
// the values kept at the cuts up to its start are held, with its own values made again and
// their gradients (twice what it makes), and the segments after it are done. A dynamic program
// over the cuts (the least kept at each, under a peak found by bisection) finds them; Chen et
// al.'s greedy (2016: segments of at most S bytes, S over a geometric series) is kept where it
// models lower. The planner simulates the result, as every plan.
//
// Exact as koila's recomputation (run/recompute.h): random generators replayed per segment,
// buffers the forward writes in place (batch norm's running statistics, counters) read by the
// second run from copies taken before the first, batch statistics not observed twice.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <optional>

#include "base/error.h"
#include "module/call.h"

namespace koila::module_detail {

// The call's results, flattened (results.h), run in segments with `target` (the module or the
// twin run_call chose) when a plan asks for it now, grad mode is on, some argument requires
// grad, and the graph has a cut; nullopt otherwise (the call runs whole). Failures are the
// call's (fail_forward with `fallback`).
std::optional<Tensors> run_segmented(const Call& call, const torch::jit::Module& target, const Tensors& args,
                                     Code fallback);

}  // namespace koila::module_detail
