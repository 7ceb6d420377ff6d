// Batch norms inside TorchScript modules routed through koila: the graphs of a loaded
// module call koila::batch_norm (an operator with aten::batch_norm's schema whose kernel
// is observed_batch_norm, batch_stats.h) where they called aten::batch_norm, so that a
// chunked pass keeping batch statistics per chunk sees each call's arguments, without an
// observer of every op. Outside such a pass the operator is aten::batch_norm: same
// results, same autograd (it is composite), same kernels on meta tensors.
#pragma once

#include <torch/csrc/jit/api/module.h>

namespace koila {

// Rewrites every graph of the module's compilation unit (its methods, its submodules',
// and the functions they call, such as torch.nn.functional.batch_norm), before any of
// them runs. Returns how many calls it rerouted.
size_t route_batch_norms(const torch::jit::Module& module);

}  // namespace koila
