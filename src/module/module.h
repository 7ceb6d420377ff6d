// TorchScript modules in the lazy graph. A module call is one node whose inputs are the
// caller's tensors followed by every tensor the module holds (parameters, buffers), so
// that the planner sees the module's state like any other leaf: its simulation swaps in
// meta stand-ins, and gradients reach the real parameters.
//
// When the call is built, koila learns what it cannot read off the module:
//   - the result's shape and dtype, by running the module on meta tensors (with the Meta
//     kernels LibTorch lacks filled in, see meta_kernels.h), or, when some op inside has
//     no Meta kernel at all, on a probe of a few real samples;
//   - where the batch goes, by running it on meta tensors of a second batch size: the one
//     output dim that follows the batch size carries the batch;
//   - that the module keeps samples apart, by a probe on a few real samples: changing one
//     sample must leave every other sample's output exactly as it was. A module that mixes
//     samples (batch norm in training, a reduction over the batch) couples the batch.
// Probes run without gradients, on copies of the module's buffers, with the random
// generators restored afterwards: building a call changes nothing the caller can see.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/structure_key.h"
#include "graph/graph.h"
#include "module/exported.h"

namespace koila {

namespace module_detail {
class InferenceMemo;  // module/inference_memo.h
}

// A module loaded by koila_module_load: a TorchScript module, or an exported program made
// into one (exported.h).
struct LoadedModule {
  torch::jit::Module module;
  c10::Device device = c10::Device(c10::kCPU);
  // The module koila runs: a clone with its own types and methods (and so its own graph
  // executors, which koila always runs unoptimized), sharing every tensor. Made at the
  // first call; the caller's module may meanwhile run optimized plans of its own.
  std::optional<torch::jit::Module> runnable = std::nullopt;
  // How many linear calls the runnable's forward makes, its submodules' inlined (route_ops),
  // for the fusion of weight gradients (OpSpec::linear_layers).
  size_t linear_calls = 0;
  // A fingerprint of the runnable's code (every method graph of it and its submodules), made
  // with it: calls of modules of one class name but other code are other structures to the
  // planner's records (plan/memo.h), which would otherwise estimate one by the other's figures.
  StructureKey code = {};
  // What the inference of its calls found, per structure of call (made at the first call).
  std::shared_ptr<module_detail::InferenceMemo> inference_memo = nullptr;
  // Set for an exported program (.pt2): what the module cannot say of itself.
  std::shared_ptr<const ExportedProgram> exported = nullptr;
  // The constant nodes of the last call's tensors (parameters and buffers, in the order
  // calls list them), taken again by the next call for each tensor that is still the same
  // (the same tensor, shape and dtype): a training loop's calls share them instead of
  // making and freeing a node per tensor per step, and the planner's walks over them find
  // them in the caches. They hold the tensors, as the module does; one the module replaced
  // (loading a state) is let go at its next call.
  std::vector<NodePtr> state_nodes = {};
};

// The node for `m.forward(inputs...)` (computed at once when no input is lazy). The call
// runs the module as it is now (training flags and other attributes are captured);
// parameters and buffers are shared, so later updates to them are seen.
NodePtr module_forward(LoadedModule& m, const std::vector<NodePtr>& inputs);

// The nodes for every result of `m.forward(inputs...)` when it returns several tensors (a
// tuple, a list or a dict, nested ones flattened depth-first; results.h), null for None.
// One call runs the module once for all of them: its node gives the first tensor result,
// result nodes the others, each with its own batch dim (a result that mixes samples mixes
// the call's). `*count` is the number of results as soon as it is known; more than
// `capacity` fails with Code::InvalidArgument before anything runs.
std::vector<NodePtr> module_forward_all(LoadedModule& m, const std::vector<NodePtr>& inputs, size_t capacity,
                                        size_t* count);

// Sets the `training` flag of the module and of every submodule that has one.
void set_training(const torch::jit::Module& module, bool on);

// Loads the module at `path` onto `device`: a .pt2 archive (the content decides, not the
// name) as an exported program, anything else as TorchScript. Fails with Code::Io
// (unreadable, corrupt) or Code::Unsupported (what koila cannot run, named).
void load_module(LoadedModule& m, const std::string& path, const c10::Device& device);

// Saves the module to `path` as it was loaded (TorchScript, or a .pt2 archive for an exported
// program), with its current parameters and buffers.
void save_module(const LoadedModule& m, const std::string& path);

// The module's parameters and buffers in the order of PyTorch's named_parameters() and
// named_buffers(), with their dotted names.
std::vector<std::pair<std::string, at::Tensor>> module_parameters(const LoadedModule& m);
std::vector<std::pair<std::string, at::Tensor>> module_buffers(const LoadedModule& m);

// Whether the module trains (koila_module_is_training), and switching it (an exported
// program only to the mode it was exported in: Code::Unsupported otherwise).
bool module_training(const LoadedModule& m);
void set_module_training(LoadedModule& m, bool on);

// The module's type name without TorchScript's "__torch__." prefix.
std::string module_name(const torch::jit::Module& module);

namespace testing {
// Module calls inferred so far (meta runs and the real-sample probe), all modules: a call
// whose structure the memo knew is not counted.
uint64_t module_inferences();
}  // namespace testing

}  // namespace koila
