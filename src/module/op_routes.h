// Ops inside TorchScript modules and exported programs routed through koila: the graphs a
// module call runs call koila's operators where they called aten::batch_norm, aten::linear
// and aten::conv1d, conv2d, conv3d:
//   - koila::batch_norm (aten::batch_norm's schema, kernel observed_batch_norm in
//     batch_stats.h), so that a chunked pass keeping batch statistics per chunk sees each
//     call's arguments, without an observer of every op;
//   - koila::linear and koila::conv1d, conv2d, conv3d (aten's schemas, kernels fused_linear
//     and fused_convolution in fused_grads.h), so that a chunked backward adds weight
//     gradients straight into .grad.
// Outside such passes each is its aten operator: same results, same kernels on meta tensors.
//
// Only the graphs of the module a call runs (koila's clone of the loaded one, see
// LoadedModule::runnable) are rewritten, after the functions they call are inlined into
// them; the loaded module and its compilation unit's free functions stay as loaded, so that
// koila_module_save writes what PyTorch loads.
#pragma once

#include <torch/csrc/jit/api/module.h>

namespace koila {

// Rewrites every method of `runnable` and of its submodules (inlining first), before any of
// them runs. Returns how many calls it rerouted; `linear_calls`, when given, gets how many
// of those in the module's own forward (its submodules' inlined) call koila::linear (as
// written: a loop that runs one several times counts it once).
size_t route_ops(const torch::jit::Module& runnable, size_t* linear_calls = nullptr);

}  // namespace koila
