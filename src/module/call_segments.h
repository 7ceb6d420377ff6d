// Internal to module/ (only src/module/*.cpp include it): where a module's forward graph can be
// cut into segments, which cuts to take, and the segments made runnable (segmented_call.h says
// how they run and why).
#pragma once

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace koila::module_detail {

struct Call;

// One segment of the forward graph: a function of the module object and `inputs` (values of the
// forward graph, computed before the segment or the forward's own arguments) giving `outputs`
// (its values read after it, or among the results).
struct CallSegment {
  std::vector<torch::jit::Value*> inputs;
  std::vector<torch::jit::Value*> outputs;
  std::shared_ptr<torch::jit::GraphFunction> function;  // (self, inputs...) -> (outputs...)
  // Attribute paths from the module (names, outermost first) of the tensors it reads.
  std::vector<std::vector<std::string>> reads;
};

struct CallSegments {
  std::shared_ptr<torch::jit::Graph> graph;  // the forward's graph the values belong to (kept alive)
  std::vector<CallSegment> segments;         // in order
  // The values the forward's results flatten to (results.h), in order; nullptr for a None.
  std::vector<torch::jit::Value*> results;
  // Attribute paths from the module (names, outermost first) of tensors the forward writes in
  // place (batch norm's running statistics, counters): the second run reads copies.
  std::vector<std::vector<std::string>> written;
};

// The segments of `call`'s forward for arguments like `args` ([inputs..., state...]; the module
// `target` holds the state), of the forward's graph with each branch that tests a bool attribute
// of the module (use_res_connect, training) replaced by the side `target` takes, so that cuts may
// fall inside it; chosen once per graph, argument shapes and sides taken, and remembered; nullptr
// where the graph has no allowed cut, returns something other than tensors in tuples, lists and
// dicts, or cannot run on meta tensors.
std::shared_ptr<const CallSegments> call_segments(const Call& call, const torch::jit::Module& target,
                                                  const Tensors& args);

// The attribute at `path` (names, outermost first) of `module`; none where there is none.
c10::IValue attribute_value(const c10::IValue& module, const std::vector<std::string>& path);

// The forward's arguments after the module object ([inputs...] with the defaults of those not
// given), as the forward's schema takes them.
std::vector<c10::IValue> forward_arguments(const Call& call, const torch::jit::Module& target, const Tensors& args);

}  // namespace koila::module_detail
