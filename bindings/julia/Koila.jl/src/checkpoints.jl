# Checkpoints: the learning rate, optimizer state files, gradient clipping.
#
# A run that stops and restarts from a `Koila.save(m, path)` and a `Koila.save(opt, path)`
# made between two steps continues exactly: load the module (`TorchModule(path)`), make the
# same kind of optimizer over its parameters and `load!` its state; the parameters after
# every later step are the same, bit for bit, as those of a run that never stopped. With
# dropout, save the random generators too (`rng_save`, loaded with `rng_load!`).

"""
    set_lr!(opt::Optimizer, lr) -> opt

Sets the learning rate of every later step (`lr >= 0` and finite; a schedule is the
caller's loop calling this). It is saved and loaded with the optimizer's state.
"""
function set_lr!(o::Optimizer, lr::Real)
    @check LibKoila.koila_optimizer_set_lr(o, Float64(lr))
    return o
end

"""
    lr(opt::Optimizer) -> Float64

The learning rate in force.
"""
function lr(o::Optimizer)
    r = Ref{Cdouble}(0.0)
    @check LibKoila.koila_optimizer_lr(o, r)
    return r[]
end

"""
    Koila.save(opt::Optimizer, path)

Saves the optimizer's whole state: its kind, hyperparameters (the learning rate in force
included) and, for each parameter, its step count and moment or momentum buffers. The file
is versioned and checksummed. Atomic, as saving a module: `path` holds afterwards the
complete old file or the complete new one; a failed write throws `KOILA_ERROR_IO` with the
old file as it was.
"""
function save(o::Optimizer, path::AbstractString)
    @check LibKoila.koila_optimizer_save(o, _cstr(path, "path"))
    return nothing
end

"""
    load!(opt::Optimizer, path) -> opt

Loads what `Koila.save(opt, path)` wrote into `opt`, which must be of the same kind over
parameters of the same number, element types and sizes, in the same order (the parameters'
values are the module's: load them with `TorchModule(path)`). The file's hyperparameters
replace the optimizer's. A mismatch throws `KOILA_ERROR_INVALID_ARGUMENT` naming the first
one; a missing, truncated or corrupt file, or one written by a newer koila,
`KOILA_ERROR_IO`. Either way the optimizer is unchanged.
"""
function load!(o::Optimizer, path::AbstractString)
    @check LibKoila.koila_optimizer_load(o, _cstr(path, "path"))
    return o
end

"""
    clip_grad_norm!(params, max_norm) -> Float64

Scales the gradients of `params` (a vector of tensors, or a `TorchModule`'s parameters) in
place so that their joint 2-norm is at most `max_norm` (>= 0 and finite), as
torch.nn.utils.clip_grad_norm_: every gradient is multiplied by
`min(1, max_norm / (norm + 1e-6))`. Returns the norm before clipping (0 when no parameter
has a gradient; those without one are skipped). The parameters are concrete leaves, each at
most once, as for the optimizers. After `backward!` the gradients are the whole batch's,
also when it ran in chunks. A norm that is not finite (an inf or NaN in a gradient) throws
`KOILA_ERROR_INVALID_ARGUMENT`, whose message states it, and changes no gradient: skip that
step.
"""
function clip_grad_norm!(params, max_norm::Real)
    ps = _param_list(params)
    handles = _handles(ps, "clip_grad_norm!")
    norm = Ref{Cdouble}(0.0)
    status = GC.@preserve ps LibKoila.koila_clip_grad_norm(norm, handles, length(handles), Float64(max_norm))
    @check status
    return norm[]
end

"""
    rng_save(path)

Saves the state of every random generator koila uses (the CPU's, and each CUDA device's),
which `manual_seed!` seeds. Atomic, as saving an optimizer: `path` holds afterwards the
complete old file or the complete new one; a failed write throws `KOILA_ERROR_IO`. With the
module and optimizer files, a run restarted from them continues bit for bit, dropout
included. Planning never draws from these generators.
"""
function rng_save(path::AbstractString)
    @check LibKoila.koila_rng_save(_cstr(path, "path"))
    return nothing
end

"""
    rng_load!(path)

Loads what `rng_save(path)` wrote: every generator the file holds takes its saved state. A
missing, truncated or corrupt file, or one written by a newer koila, throws
`KOILA_ERROR_IO`; a file holding a CUDA device this process lacks,
`KOILA_ERROR_INVALID_ARGUMENT`. Either way no generator changes.
"""
function rng_load!(path::AbstractString)
    @check LibKoila.koila_rng_load(_cstr(path, "path"))
    return nothing
end
