// Shape-only (Meta) kernels for the ATen ops that LibTorch lacks them for (in 1.13: relu,
// abs, hardtanh and hardswish (also in place), convolution, native_batch_norm,
// index_select, where, nll_loss2d). Each is
// registered only when a probe shows LibTorch cannot run the op on the meta device, so
// newer LibTorch versions keep their own kernels. The backward kernels autograd calls
// (convolution_backward, native_batch_norm_backward, native_layer_norm_backward, ...) are
// filled in the same way, so that the planner can simulate a backward pass on meta tensors;
// so is native_layer_norm, which 1.13 only decomposes on meta (into different tensors than
// its CPU and CUDA kernels allocate).
#pragma once

#include <string>
#include <vector>

namespace koila {

// Idempotent and thread-safe; called before any inference.
void ensure_meta_kernels();

// The ops koila filled in on this LibTorch (1.13: 22 of them; 2.14.1: see
// docs/BENCHMARKS.md), in the order they were registered.
std::vector<std::string> filled_in_meta_kernels();

}  // namespace koila
