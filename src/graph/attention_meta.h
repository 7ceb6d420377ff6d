// Attention simulated as the CPU runs it (issue 28). On LibTorch 2.x,
// scaled_dot_product_attention asks a per-device choice which kernel to take. On the CPU it
// takes flash attention for most inputs (4-D, no dropout): a kernel that holds the output
// and one logsumexp per query. On meta tensors the choice always answers "math", the
// composite that materialises the [batch, heads, queries, keys] attention weights and has
// autograd save them. A simulation of a CPU run therefore counted weights the CPU never
// holds: the corpus's transformer_encoder was estimated 31% over its measured training peak
// on 2.14.1, vit_small 23%.
//
// While a SimulatedDevice scope (rnn_meta.h) on this thread says the CPU, the attention of
// meta tensors asks the CPU's own choice (which reads only shapes, dtypes and flags) and,
// where it answers flash attention, runs the flash op as the CPU's composite does, with
// Meta kernels that allocate what the CPU's kernels allocate. Elsewhere, and for what the
// CPU's composite prepares differently (not 4-D, grouped heads), LibTorch's own composite
// runs, as before. LibTorch 1.13 has none of these ops: nothing is registered there.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

namespace koila {

// Meta kernels, registered by meta_kernels.cpp where LibTorch lacks them (its C++ library
// does: PyTorch registers their meta functions from Python):
//   _scaled_dot_product_flash_attention_for_cpu: the output, contiguous, and the
//     logsumexp in the accumulation dtype, made as [batch, queries, heads] and transposed;
//   _scaled_dot_product_flash_attention_for_cpu_backward: the three gradients, made as
//     [batch, length, heads, dim] and transposed, and, while it runs, a copy of a gradient
//     of the output not laid out that way.
// Both take, while they run, the per-thread blocks the CPU's kernels take (at 1024 positions,
// 0.6 MiB a thread forward and 1 MiB backward), with as many threads as the intra-op pool.
void flash_attention_for_cpu_meta(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);
void flash_attention_for_cpu_backward_meta(const c10::OperatorHandle& op, std::vector<c10::IValue>* stack);

// Registers the attention of meta tensors described above, where this LibTorch has the ops
// (called by ensure_meta_kernels, after the Meta kernels).
void register_attention_meta_kernels();

}  // namespace koila
