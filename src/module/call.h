// Internal to module/ (only src/module/*.cpp include it; not part of koila's interface): one
// call of a TorchScript module in the lazy graph, everything its node's functions share, and
// how it runs. module_forward.cpp builds it; batch_inference.cpp and probe.cpp run it.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "graph/graph.h"
#include "module/exported.h"

namespace koila::module_detail {

// Everything one module call needs, shared by its node's functions.
struct Call {
  torch::jit::Module module;  // a twin of the caller's module taken when the call was built (same tensors)
  std::string name;
  size_t n_inputs = 0;
  Tensors state;                                             // every tensor the module holds, once each
  std::unordered_map<const c10::TensorImpl*, size_t> index;  // state tensor -> position
  std::vector<NodePtr> inputs;                               // the caller's inputs, for messages (input_text)
  size_t batch_norms = 0;                                    // batch norm layers that train (names: twin.h)
  Tensors batch_norm_counters;                               // their num_batches_tracked
  Tensors batch_norm_buffers;                                // their running_mean and running_var
  std::shared_ptr<const ExportedProgram> exported;           // set for an exported program
  // -1: the forward returns one tensor, the call's result; k >= 0: the call's result is the
  // k-th of the forward's results, flattened (results.h; koila_module_forward_all).
  int64_t result = -1;
};

// The caller's inputs as messages describe them ("none" for a call without inputs).
std::string input_text(const Call& call);

// Runs the module's forward on args = [inputs..., state...]. When the state given is the
// module's own, the module itself runs; otherwise (meta stand-ins, probe copies) a twin
// holding the given tensors does; `batch_norm_eval` switches its training batch norm
// layers to evaluation. What LibTorch throws becomes a koila::Error with code `fallback`
// (Code::OutOfMemory when memory ran out).
// The result is the one `call.result` says.
at::Tensor run_call(const Call& call, const Tensors& args, Code fallback = Code::InvalidArgument,
                    bool batch_norm_eval = false);
// The same run, giving every result of the forward, flattened (results.h).
Tensors run_call_all(const Call& call, const Tensors& args, Code fallback = Code::InvalidArgument,
                     bool batch_norm_eval = false);

}  // namespace koila::module_detail
