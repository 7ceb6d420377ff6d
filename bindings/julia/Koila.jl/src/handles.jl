# The four handle types. Each owns one C handle: a finalizer frees it when the object is
# garbage collected, `close` frees it at once (and is idempotent), and a closed handle
# passed to any function throws a KoilaError instead of reaching C.
#
# Handles are passed to ccall as the Julia objects themselves (through unsafe_convert), so
# ccall keeps them rooted for the duration of the call: a finalizer can never free a handle
# that C is using.

"""
    Tensor

A koila tensor: concrete (holding values) or lazy (a recipe evaluated, chunk by chunk if
need be, when its values are read or a backward runs through it). Made by `Tensor(A)`,
`Koila.zeros/ones/randn`, `lazy`, and every op. Not an `AbstractArray`: read values with
`Array(t)`, `t[i, j]`, `t[]` or `item(t)`.

Freed when garbage collected; `close(t)` frees it now. Freeing a tensor never invalidates
another one (a tensor keeps alive the graph it depends on).
"""
mutable struct Tensor
    ptr::Ptr{koila_tensor}
    # Takes ownership of a handle returned by the C API.
    function Tensor(ptr::Ptr{koila_tensor})
        ptr == C_NULL && throw(KoilaError(KOILA_ERROR_INTERNAL, "koila returned a NULL tensor"))
        t = new(ptr)
        finalizer(_release!, t)
        return t
    end
end

"""
    Plan(t::Tensor, mode = :forward)

What evaluating `t` (`:forward`) or a backward from `t` (`:training`) would do now under
the memory budget, without running it: `batch_size`, `chunk_size`, `num_chunks`,
`peak_bytes`, `full_peak_bytes`, `budget_bytes`, `describe`. Throws `KoilaError` with
`KOILA_ERROR_OUT_OF_MEMORY` or `KOILA_ERROR_NOT_SPLITTABLE` when the run would fail.
"""
mutable struct Plan
    ptr::Ptr{koila_plan}
    function Plan(ptr::Ptr{koila_plan})
        ptr == C_NULL && throw(KoilaError(KOILA_ERROR_INTERNAL, "koila returned a NULL plan"))
        p = new(ptr)
        finalizer(_release!, p)
        return p
    end
end

"""
    Timeline(plan; unsplit = false)

The memory timeline of a `Plan`: the bytes on the device operator by operator through the
forward and the backward, as koila simulated the run (the planned chunks, the first two; or
the whole batch with `unsplit = true`). See `events`, `peak_index`, `memory_part`. Throws
`KoilaError` with `KOILA_ERROR_UNSUPPORTED` when the plan's figures were not simulated.
"""
mutable struct Timeline
    ptr::Ptr{koila_timeline}
    function Timeline(ptr::Ptr{koila_timeline})
        ptr == C_NULL && throw(KoilaError(KOILA_ERROR_INTERNAL, "koila returned a NULL timeline"))
        t = new(ptr)
        finalizer(_release!, t)
        return t
    end
end

"""
    TorchModule(path; device = "cpu")

A TorchScript module (saved from Python with `torch.jit.script(model).save(path)`, or from
C++), loaded onto `device`. Call it like a function: `m(x)` is `forward(m, x)`, lazy when
`x` is. See `parameters`, `train!`, `Koila.save`.
"""
mutable struct TorchModule
    ptr::Ptr{koila_module}
    function TorchModule(ptr::Ptr{koila_module})
        ptr == C_NULL && throw(KoilaError(KOILA_ERROR_INTERNAL, "koila returned a NULL module"))
        m = new(ptr)
        finalizer(_release!, m)
        return m
    end
end

"""
    Optimizer

An optimizer over concrete parameters, made by `SGD(params; ...)`, `Adam(params; ...)` or
`AdamW(params; ...)`. `step!(opt)` updates the parameters from their gradients,
`zero_grad!(opt)` zeroes the gradients; `set_lr!`/`lr` change and read the learning rate,
`Koila.save(opt, path)`/`load!(opt, path)` its state.
"""
mutable struct Optimizer
    ptr::Ptr{koila_optimizer}
    kind::Symbol
    function Optimizer(ptr::Ptr{koila_optimizer}, kind::Symbol)
        ptr == C_NULL && throw(KoilaError(KOILA_ERROR_INTERNAL, "koila returned a NULL optimizer"))
        o = new(ptr, kind)
        finalizer(_release!, o)
        return o
    end
end

"""
    ProcessGroup

A group of processes training data-parallel, made by `ProcessGroup(backend, init; rank,
world_size, timeout)`. See `group_broadcast!` and `group_backward!`.
"""
mutable struct ProcessGroup
    ptr::Ptr{koila_group}
    function ProcessGroup(ptr::Ptr{koila_group})
        ptr == C_NULL && throw(KoilaError(KOILA_ERROR_INTERNAL, "koila returned a NULL group"))
        g = new(ptr)
        finalizer(_release!, g)
        return g
    end
end

const _Handle = Union{Tensor,Plan,TorchModule,Optimizer,ProcessGroup,Timeline}

_free(p::Ptr{koila_tensor}) = LibKoila.koila_tensor_free(p)
_free(p::Ptr{koila_plan}) = LibKoila.koila_plan_free(p)
_free(p::Ptr{koila_module}) = LibKoila.koila_module_free(p)
_free(p::Ptr{koila_optimizer}) = LibKoila.koila_optimizer_free(p)
_free(p::Ptr{koila_group}) = LibKoila.koila_group_free(p)
_free(p::Ptr{koila_timeline}) = LibKoila.koila_timeline_free(p)

# The finalizer, and close. Clears the field before freeing, so that nothing can free the
# handle twice.
function _release!(h::_Handle)
    p = h.ptr
    if p != C_NULL
        h.ptr = C_NULL
        _free(p)
    end
    return nothing
end

"""
    close(h)

Frees the C handle of a `Tensor`, `Plan`, `Timeline`, `TorchModule`, `Optimizer` or `ProcessGroup` now rather than at
garbage collection. Idempotent. Any later use of `h` throws a `KoilaError`; other handles
are unaffected (a lazy tensor built from `h` keeps what it needs).
"""
Base.close(h::_Handle) = _release!(h)

"""
    isopen(h)

False once `close(h)` was called.
"""
Base.isopen(h::_Handle) = h.ptr != C_NULL

@noinline function _closed(h)
    throw(KoilaError(KOILA_ERROR_INVALID_ARGUMENT,
                     "this $(nameof(typeof(h))) was closed (close was called on it); it cannot be used any more"))
end

@inline function _ptr(h::_Handle)
    p = h.ptr
    p == C_NULL && _closed(h)
    return p
end

Base.unsafe_convert(::Type{Ptr{koila_tensor}}, t::Tensor) = _ptr(t)
Base.unsafe_convert(::Type{Ptr{koila_plan}}, p::Plan) = _ptr(p)
Base.unsafe_convert(::Type{Ptr{koila_module}}, m::TorchModule) = _ptr(m)
Base.unsafe_convert(::Type{Ptr{koila_optimizer}}, o::Optimizer) = _ptr(o)
Base.unsafe_convert(::Type{Ptr{koila_group}}, g::ProcessGroup) = _ptr(g)
Base.unsafe_convert(::Type{Ptr{koila_timeline}}, t::Timeline) = _ptr(t)

# A C array of tensor handles. Keep `ts` alive (GC.@preserve) while C uses the array.
function _handles(ts, what::AbstractString)
    ps = Vector{Ptr{koila_tensor}}(undef, length(ts))
    for (k, t) in enumerate(ts)
        t isa Tensor || _argerror("$what: element $k is a $(typeof(t)), not a Tensor")
        ps[k] = _ptr(t)
    end
    return ps
end

# Calls f(out, args...) for a C function that returns a new tensor through `out`.
function _new(f::F, args...) where {F}
    out = Ref{Ptr{koila_tensor}}(C_NULL)
    @check f(out, args...)
    return Tensor(out[])
end

# Text out of the C API (koila_tensor_to_string and the like): f(buf, capacity, needed).
function _text(f::F) where {F}
    needed = Ref{Csize_t}(0)
    @check f(C_NULL, 0, needed)
    while true
        buf = Vector{UInt8}(undef, max(Int(needed[]), 1))
        @check f(buf, length(buf), needed)
        n = Int(needed[])
        n <= length(buf) && return String(buf[1:max(n - 1, 0)])
    end
end
