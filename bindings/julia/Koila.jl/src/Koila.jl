"""
    Koila

Lazy LibTorch tensors that never run out of memory, from Julia.

`Koila.LibKoila` is the raw C API (generated from koila.h); this module is the safe layer:
handles that free themselves, errors as `KoilaError`, Julia arrays in and out.

Conventions (see the README):

  - A `Tensor` has the shape and the semantics of the LibTorch tensor it wraps (PyTorch
    broadcasting, row-major `reshape`/`flatten`, reductions drop the reduced dims unless
    `keepdims=true`). `Tensor(A)` and `Array(t)` copy and keep the logical index: `t[i, j]
    == A[i, j]` and `size(t) == size(A)`; the element order in memory is converted
    (Julia is column-major, LibTorch row-major).
  - Dimension and position arguments are Julia-style: 1 is the first dim (or element),
    negative values count from the end (-1 is the last), 0 is an error. This holds for
    every `dim`/`dims` argument, `lazy(t, batchdim)`, `batchdim(t)`, `narrow`'s start,
    `parameter(m, i)` and indexing.
  - Index *values* held in tensors (class labels, embedding ids, `index_select` indices
    given as a Tensor, the result of `argmax`) are 0-based, as in PyTorch, because they are
    data passed through to LibTorch unchanged.
  - `a * b` on two tensors is `matmul` (as for Julia matrices); elementwise operations are
    written with broadcasting (`a .* b`, `exp.(x)`, `x .> 0`), which maps onto koila's
    elementwise ops.
"""
module Koila

include("LibKoila.jl")
using .LibKoila
using .LibKoila: koila_tensor, koila_status, koila_plan, koila_module, koila_optimizer, koila_group,
                 koila_code, koila_dtype, koila_reduction, koila_mode, koila_batch_stats,
                 koila_chunking, koila_recompute

# Functions named like Base's, kept in this module (use them qualified: Koila.zeros).
function zeros end
function ones end
function randn end
function mean end
function div end        # Koila.div: true division of tensors (not Base.div)
function load end
function save end

@static if isdefined(Base, :stack)
    import Base: stack   # Julia >= 1.9: add methods to Base.stack
end

include("errors.jl")
include("dtypes.jl")
include("handles.jl")
include("tensor.jl")
include("ops_table.jl")
include("ops.jl")
include("broadcast.jl")
include("memory.jl")
include("chunking.jl")
include("progress.jl")
include("modules.jl")
include("checkpoints.jl")
include("dlpack.jl")
include("groups.jl")

export KoilaError, @check, BFloat16
export Tensor, lazy, batchdim, islazy, item, evaluate, to_string
export requires_grad!, backward!, grad, zero_grad!
# The generated operators export themselves (ops_table.jl).
export dropout, conv1d, conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, upsample_nearest2d, batch_norm,
       layer_norm, amax, amin, flatten, narrow, stack, cross_entropy, nll_loss, mse_loss, l1_loss,
       binary_cross_entropy_with_logits, scaled_dot_product_attention
export Plan, batch_size, chunk_size, num_chunks, peak_bytes, full_peak_bytes, budget_bytes, needed_bytes, full_needed_bytes,
       recomputed_bytes, describe, set_memory_budget!, memory_budget, memory_stats, memory_reset_peak!,
       manual_seed!, set_batch_stats!, set_chunking!, set_recompute!, set_progress!, Timeline, events, peak_index,
       memory_part
export TorchModule, forward, forward_all, train!, istraining, num_parameters, parameter, parameters,
       parameter_name, parameter_names, module_kind, num_buffers, buffer, buffers, buffer_name,
       buffer_names, Optimizer, SGD, Adam, AdamW, step!
export set_lr!, lr, load!, clip_grad_norm!, rng_save, rng_load!
export shared_tensor, shared_array, TensorArray, unsafe_from_dlpack, to_dlpack, dlpack_delete
export ProcessGroup, group_rank, group_local_rank, group_size, group_broadcast!, group_backward!

end # module Koila
