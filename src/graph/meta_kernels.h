// Shape-only (Meta) kernels for the ATen ops that LibTorch lacks them for (in 1.13 and
// 2.14.1 alike: relu, abs, hardtanh and hardswish (also in place), convolution,
// native_batch_norm, index_select, where (and where.self_out), log_sigmoid_forward,
// nll_loss2d). Each is
// registered only when a probe shows LibTorch cannot run the op on the meta device, so
// newer LibTorch versions keep their own kernels. The backward kernels autograd calls
// (convolution_backward, native_batch_norm_backward, native_layer_norm_backward, ...) are
// filled in the same way, so that the planner can simulate a backward pass on meta tensors;
// so is native_layer_norm, which 1.13 only decomposes on meta (into different tensors than
// its CPU and CUDA kernels allocate).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace koila {

// Idempotent and thread-safe; called before any inference.
void ensure_meta_kernels();

// The ops koila filled in on this LibTorch, in the order they were registered: 26 on 1.13
// and 27 of the same on 2.14.1 (native_group_norm too), whose C++ library has no more meta
// kernels for them (PyTorch 2.x registers most of its meta implementations from Python,
// which LibTorch alone lacks), and on 2.x the CPU's two flash attention kernels
// (attention_meta.h).
std::vector<std::string> filled_in_meta_kernels();

// at::mse_loss, which on meta tensors also holds what its real kernel allocates and its meta
// kernel does not: LibTorch 1.13's mse_loss with a reduction holds two temporaries the size
// of its (broadcast) input while it computes the loss (measured on CPU with koila's
// allocator: 196,608 bytes for a 98,304-byte input), but on meta tensors only one. On meta
// tensors this holds one more such buffer during the call, so that the planner's simulation
// counts it (the differential fuzzer measured estimates 1.5 times short without it);
// autograd's saved tensors stay those of the real call. The op runs this (ops/reduce.cpp).
at::Tensor mse_loss_as_allocated(const at::Tensor& x, const at::Tensor& t, int64_t reduction);

}  // namespace koila
