# Modules (TorchScript files and torch.export programs) and optimizers.

function TorchModule(path::AbstractString; device::AbstractString = "cpu")
    out = Ref{Ptr{koila_module}}(C_NULL)
    @check LibKoila.koila_module_load(out, _cstr(path, "path"), _dev(device))
    return TorchModule(out[])
end

"""
    Koila.load(path; device = "cpu") -> TorchModule

Loads a TorchScript module or a torch.export program (a `.pt2` written by
`torch.export.save`; the content decides): `KOILA_ERROR_IO`, with the path in the message,
when the file is missing, unreadable or corrupt, `KOILA_ERROR_UNSUPPORTED` naming what koila
cannot run.
"""
load(path::AbstractString; device::AbstractString = "cpu") = TorchModule(path; device = device)

"""
    Koila.save(m::TorchModule, path)

Saves the module with its current parameters (`KOILA_ERROR_IO` when the file cannot be
written). Atomic: `path` holds afterwards the complete old file or the complete new one,
whatever happens to the process during the call.
"""
function save(m::TorchModule, path::AbstractString)
    @check LibKoila.koila_module_save(m, _cstr(path, "path"))
    return nothing
end

"""
    forward(m::TorchModule, inputs::Tensor...) -> Tensor
    m(inputs...)

The result of `m.forward(inputs...)`: lazy when any input is lazy (shape, dtype and batch
dim known at once; the planner splits it like any op), else computed at once, recording
gradients. The module must return one tensor. Inputs it rejects throw here, with the
module's complaint in the message.
"""
function forward(m::TorchModule, inputs::Tensor...)
    ts = Tensor[inputs...]
    handles = _handles(ts, "forward")
    out = Ref{Ptr{koila_tensor}}(C_NULL)
    status = GC.@preserve ts LibKoila.koila_module_forward(out, m, handles, length(handles))
    @check status
    return Tensor(out[])
end
(m::TorchModule)(inputs::Tensor...) = forward(m, inputs...)

"""
    forward_all(m::TorchModule, inputs::Tensor...) -> Vector{Union{Tensor,Nothing}}

Every result of `m.forward(inputs...)` when it returns several tensors: a tuple, a list or a
dict, nested ones flattened depth-first (dict entries in the order the module returns
them), `nothing` for a None entry. Each is lazy when any input is, with its own batch dim or
none; one call runs the module once for all of them. A module that returns one tensor gives
one. A result that is not a tensor, None, or a tuple, list or dict of those throws
`KOILA_ERROR_UNSUPPORTED`.
"""
function forward_all(m::TorchModule, inputs::Tensor...)
    ts = Tensor[inputs...]
    handles = _handles(ts, "forward_all")
    count = Ref{Csize_t}(0)
    # The count first: with no room koila writes it and answers INVALID_ARGUMENT.
    status = GC.@preserve ts LibKoila.koila_module_forward_all(C_NULL, 0, count, m, handles, length(handles))
    if status != C_NULL
        count[] == 0 && _throw_status(status)
        LibKoila.koila_status_free(status)
    end
    out = fill(Ptr{koila_tensor}(C_NULL), Int(count[]))
    @check GC.@preserve ts LibKoila.koila_module_forward_all(out, length(out), count, m, handles, length(handles))
    return Union{Tensor,Nothing}[p == C_NULL ? nothing : Tensor(p) for p in out]
end

"""
    train!(m::TorchModule, on = true) -> m

Sets the training flag of the module and its submodules (`train!(m, false)` for
evaluation); it applies to calls built afterwards.
"""
function train!(m::TorchModule, on::Bool = true)
    @check LibKoila.koila_module_train(m, on)
    return m
end

"""
    istraining(m::TorchModule) -> Bool
"""
function istraining(m::TorchModule)
    r = Ref{Cint}(0)
    @check LibKoila.koila_module_is_training(m, r)
    return r[] != 0
end

"""
    num_parameters(m::TorchModule) -> Int

The number of parameters of the module and its submodules.
"""
function num_parameters(m::TorchModule)
    r = Ref{Csize_t}(0)
    @check LibKoila.koila_module_num_parameters(m, r)
    return Int(r[])
end

# A Julia position (1-based; negative counts from the end) among `n` parameters or buffers
# (`what`) as koila's index.
function _check_index(n::Integer, i::Integer, what::AbstractString)
    k = i < 0 ? n + 1 + Int(i) : Int(i)
    1 <= k <= n || _argerror("$what index $i: the module has $n $(what)s (numbered from 1, " *
                             "or from -1 for the last)")
    return Csize_t(k - 1)
end
_check_index(m::TorchModule, i::Integer) = _check_index(num_parameters(m), i, "parameter")

"""
    parameter(m::TorchModule, i) -> Tensor

The i-th parameter (1-based, negative counts from the end; in the order of
named_parameters()). It aliases the module's parameter: gradients from `backward!` and
optimizer updates are seen by the module.
"""
function parameter(m::TorchModule, i::Integer)
    out = Ref{Ptr{koila_tensor}}(C_NULL)
    @check LibKoila.koila_module_parameter(out, m, _check_index(m, i))
    return Tensor(out[])
end

"""
    parameters(m::TorchModule) -> Vector{Tensor}

All parameters, aliasing the module's (see `parameter`).
"""
parameters(m::TorchModule) = Tensor[parameter(m, i) for i in 1:num_parameters(m)]

"""
    parameter_name(m::TorchModule, i) -> String

The dotted name of the i-th parameter (1-based, negative counts from the end), such as
"fc1.weight".
"""
function parameter_name(m::TorchModule, i::Integer)
    k = _check_index(m, i)
    return _text((buf, cap, needed) -> LibKoila.koila_module_parameter_name(m, k, buf, cap, needed))
end

"""
    parameter_names(m::TorchModule) -> Vector{String}
"""
parameter_names(m::TorchModule) = String[parameter_name(m, i) for i in 1:num_parameters(m)]

"""
    module_kind(m::TorchModule) -> Symbol

What the module was loaded from: `:torchscript`, or `:exported` for a torch.export program
(which keeps the mode and the static shapes it was exported with).
"""
function module_kind(m::TorchModule)
    r = Ref{LibKoila.koila_module_kind}(LibKoila.KOILA_MODULE_TORCHSCRIPT)
    @check LibKoila.koila_module_kind_of(m, r)
    return r[] == LibKoila.KOILA_MODULE_EXPORTED ? :exported : :torchscript
end

"""
    num_buffers(m::TorchModule) -> Int

The number of buffers (batch norm's running statistics, ...) of the module and its
submodules.
"""
function num_buffers(m::TorchModule)
    r = Ref{Csize_t}(0)
    @check LibKoila.koila_module_num_buffers(m, r)
    return Int(r[])
end

"""
    buffer(m::TorchModule, i) -> Tensor

The i-th buffer (1-based, negative counts from the end; in the order of named_buffers()).
It aliases the module's buffer: updates koila makes (running statistics after a training
step) are seen through it.
"""
function buffer(m::TorchModule, i::Integer)
    out = Ref{Ptr{koila_tensor}}(C_NULL)
    @check LibKoila.koila_module_buffer(out, m, _check_index(num_buffers(m), i, "buffer"))
    return Tensor(out[])
end

"""
    buffers(m::TorchModule) -> Vector{Tensor}
"""
buffers(m::TorchModule) = Tensor[buffer(m, i) for i in 1:num_buffers(m)]

"""
    buffer_name(m::TorchModule, i) -> String

The dotted name of the i-th buffer, such as "bn1.running_mean".
"""
function buffer_name(m::TorchModule, i::Integer)
    k = _check_index(num_buffers(m), i, "buffer")
    return _text((buf, cap, needed) -> LibKoila.koila_module_buffer_name(m, k, buf, cap, needed))
end

"""
    buffer_names(m::TorchModule) -> Vector{String}
"""
buffer_names(m::TorchModule) = String[buffer_name(m, i) for i in 1:num_buffers(m)]

function Base.show(io::IO, m::TorchModule)
    if !isopen(m)
        print(io, "TorchModule(<closed>)")
        return
    end
    print(io, "TorchModule(", num_parameters(m), " parameters, ",
          istraining(m) ? "training" : "evaluation", " mode)")
end

# ------------------------------------------------------------------------------------------
# Optimizers
# ------------------------------------------------------------------------------------------

_param_list(m::TorchModule) = parameters(m)
_param_list(t::Tensor) = Tensor[t]
_param_list(ps) = collect(ps)

function _optimizer(f::F, kind::Symbol, params, args...) where {F}
    ps = _param_list(params)
    handles = _handles(ps, string(kind))
    out = Ref{Ptr{koila_optimizer}}(C_NULL)
    status = GC.@preserve ps f(out, handles, length(handles), args...)
    @check status
    return Optimizer(out[], kind)
end

_nonneg(x::Real, what) = (isfinite(x) && x >= 0) ? Float64(x) :
    _argerror("$what must be >= 0 and finite, got $x")

"""
    SGD(params; lr, momentum = 0, weight_decay = 0) -> Optimizer

Stochastic gradient descent as torch.optim.SGD (weight decay is L2, added to the
gradient). `params`: a vector of concrete floating-point tensors that require grad (each
at most once), or a `TorchModule` (all its parameters).
"""
SGD(params; lr::Real, momentum::Real = 0.0, weight_decay::Real = 0.0) =
    _optimizer(LibKoila.koila_optimizer_sgd, :SGD, params, _nonneg(lr, "lr"),
               _nonneg(momentum, "momentum"), _nonneg(weight_decay, "weight_decay"))

"""
    Adam(params; lr = 1e-3, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 0) -> Optimizer

Adam as torch.optim.Adam (weight decay is L2, added to the gradient; `AdamW` decouples it).
`params` as for `SGD`.
"""
Adam(params; lr::Real = 1e-3, betas::Tuple{Real,Real} = (0.9, 0.999), eps::Real = 1e-8,
     weight_decay::Real = 0.0) =
    _adam_like(LibKoila.koila_optimizer_adam, :Adam, params, lr, betas, eps, weight_decay)

"""
    AdamW(params; lr = 1e-3, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 1e-2) -> Optimizer

AdamW as torch.optim.AdamW (with its defaults): each step first shrinks the parameters by
`lr * weight_decay` (decoupled weight decay), then makes Adam's update; the gradient is not
changed. `params` as for `SGD`.
"""
AdamW(params; lr::Real = 1e-3, betas::Tuple{Real,Real} = (0.9, 0.999), eps::Real = 1e-8,
      weight_decay::Real = 1e-2) =
    _adam_like(LibKoila.koila_optimizer_adamw, :AdamW, params, lr, betas, eps, weight_decay)

function _adam_like(f::F, kind::Symbol, params, lr, betas, eps, weight_decay) where {F}
    for b in betas
        (isfinite(b) && 0 <= b < 1) || _argerror("$kind: betas must be in [0, 1), got $betas")
    end
    return _optimizer(f, kind, params, _nonneg(lr, "lr"), Float64(betas[1]), Float64(betas[2]),
                      _nonneg(eps, "eps"), _nonneg(weight_decay, "weight_decay"))
end

"""
    step!(opt::Optimizer) -> opt

Updates the parameters in place from their gradients (parameters without a gradient are
skipped).
"""
function step!(o::Optimizer)
    @check LibKoila.koila_optimizer_step(o)
    return o
end

function zero_grad!(o::Optimizer)
    @check LibKoila.koila_optimizer_zero_grad(o)
    return o
end

Base.show(io::IO, o::Optimizer) = print(io, o.kind, "(", isopen(o) ? "" : "<closed>", ")")
