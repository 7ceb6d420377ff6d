# Tensors: made from Julia arrays, metadata, values back, autograd.

# Julia (column-major) <-> koila (row-major). The koila tensor has the same logical shape
# as the Julia array: size(t) == size(A) and t[i, j, ...] == A[i, j, ...]. In memory a
# row-major array of size (n1, ..., nk) is laid out like a column-major array of size
# (nk, ..., n1) whose indices are reversed, which is what permutedims(A, (k, ..., 1)) makes.
_reversed_perm(N::Int) = ntuple(k -> N + 1 - k, N)

"""
    Tensor(A::AbstractArray; device = "cpu", requires_grad = false)
    Tensor(A::AbstractArray, T::Type; device = "cpu", requires_grad = false)
    Tensor(x::Number; ...)

A concrete tensor holding a copy of `A` (converted to element type `T` when given), with
the same size and the same logical index: `Tensor(A)[i, j] == A[i, j]`. Element types:
Float32, Float64, Float16, `BFloat16`, Int64, Int32, Int8, UInt8, Bool (note that Julia's
default float literal is Float64: `Tensor(rand(Float32, 3, 4))` or `Tensor(A, Float32)`
for float32). A number gives a 0-dimensional tensor.
"""
function Tensor(A::AbstractArray{T,N}; device::AbstractString = "cpu",
                requires_grad::Bool = false) where {T,N}
    dtype = _dtype(T)
    data = N <= 1 ? convert(Array{T}, A) : convert(Array{T}, permutedims(A, _reversed_perm(N)))
    shape = Int64[size(A, k) for k in 1:N]
    out = Ref{Ptr{koila_tensor}}(C_NULL)
    @check LibKoila.koila_tensor_from_data(out, data, sizeof(T) * length(data), dtype, shape,
                                           length(shape), _dev(device))
    t = Tensor(out[])
    requires_grad && requires_grad!(t)
    return t
end

Tensor(A::AbstractArray, ::Type{T}; kwargs...) where {T} = Tensor(convert(AbstractArray{T}, A); kwargs...)
Tensor(x::Number; kwargs...) = Tensor(fill(x); kwargs...)
Tensor(x::Number, ::Type{T}; kwargs...) where {T} = Tensor(fill(convert(T, x)); kwargs...)
Tensor(t::Tensor) = t

function _filled(f::F, ::Type{T}, dims, device::AbstractString) where {F,T}
    shape = Int64[d for d in dims]
    any(<(0), shape) && _argerror("negative size in $(Tuple(dims))")
    out = Ref{Ptr{koila_tensor}}(C_NULL)
    @check f(out, shape, length(shape), _dtype(T), _dev(device))
    return Tensor(out[])
end

"""
    Koila.zeros([T = Float32,] dims...; device = "cpu")

A concrete tensor of zeros. The default element type is Float32 (as in LibTorch), not
Julia's Float64.
"""
zeros(::Type{T}, dims::Integer...; device::AbstractString = "cpu") where {T} =
    _filled(LibKoila.koila_tensor_zeros, T, dims, device)
zeros(::Type{T}, dims::Tuple{Vararg{Integer}}; device::AbstractString = "cpu") where {T} =
    _filled(LibKoila.koila_tensor_zeros, T, dims, device)
zeros(dims::Integer...; device::AbstractString = "cpu") = zeros(Float32, dims; device = device)
zeros(dims::Tuple{Vararg{Integer}}; device::AbstractString = "cpu") = zeros(Float32, dims; device = device)

"""
    Koila.ones([T = Float32,] dims...; device = "cpu")

A concrete tensor of ones (Float32 unless `T` is given).
"""
ones(::Type{T}, dims::Integer...; device::AbstractString = "cpu") where {T} =
    _filled(LibKoila.koila_tensor_ones, T, dims, device)
ones(::Type{T}, dims::Tuple{Vararg{Integer}}; device::AbstractString = "cpu") where {T} =
    _filled(LibKoila.koila_tensor_ones, T, dims, device)
ones(dims::Integer...; device::AbstractString = "cpu") = ones(Float32, dims; device = device)
ones(dims::Tuple{Vararg{Integer}}; device::AbstractString = "cpu") = ones(Float32, dims; device = device)

"""
    Koila.randn([T = Float32,] dims...; device = "cpu")

Standard normal samples from koila's generator (seed it with `manual_seed!`). Floating
element types only (`KOILA_ERROR_DTYPE` otherwise).
"""
randn(::Type{T}, dims::Integer...; device::AbstractString = "cpu") where {T} =
    _filled(LibKoila.koila_tensor_randn, T, dims, device)
randn(::Type{T}, dims::Tuple{Vararg{Integer}}; device::AbstractString = "cpu") where {T} =
    _filled(LibKoila.koila_tensor_randn, T, dims, device)
randn(dims::Integer...; device::AbstractString = "cpu") = randn(Float32, dims; device = device)
randn(dims::Tuple{Vararg{Integer}}; device::AbstractString = "cpu") = randn(Float32, dims; device = device)

"""
    lazy(t::Tensor, batchdim = 1)
    lazy(A::AbstractArray, batchdim = 1; device = "cpu")

The one line: a lazy tensor reading `t`, so that everything computed from it is deferred
and dimension `batchdim` (1-based; negative counts from the end) is the batch that koila
may split into chunks to fit the memory budget. `batchdim = nothing`: lazy, but with no
batch dimension (nothing is split). The lazy tensor reads the current values of `t`
each time it is evaluated. Wrapping a lazy tensor again is allowed only with the same
batch dim.
"""
function lazy(t::Tensor, batchdim::Union{Integer,Nothing} = 1)
    bd = batchdim === nothing ? LibKoila.KOILA_NO_BATCH : _cdim(batchdim)
    return _new(LibKoila.koila_lazy, t, bd)
end
function lazy(A::AbstractArray, batchdim::Union{Integer,Nothing} = 1; device::AbstractString = "cpu")
    t = Tensor(A; device = device)
    try
        return lazy(t, batchdim)
    finally
        close(t)   # the lazy tensor keeps what it reads alive
    end
end

# ------------------------------------------------------------------------------------------
# Metadata: never evaluates
# ------------------------------------------------------------------------------------------

"""
    size(t::Tensor) -> NTuple{N,Int}

The shape (same order as LibTorch's, and as the Julia array `Array(t)`). Never evaluates.
"""
function Base.size(t::Tensor)
    dims = Vector{Int64}(undef, 8)
    n = Ref{Csize_t}(0)
    @check LibKoila.koila_tensor_shape(t, dims, length(dims), n)
    if Int(n[]) > length(dims)
        resize!(dims, Int(n[]))
        @check LibKoila.koila_tensor_shape(t, dims, length(dims), n)
    end
    return ntuple(k -> Int(dims[k]), Int(n[]))
end

function Base.size(t::Tensor, d::Integer)
    d >= 1 || _argerror("size(t, $d): dimensions are numbered from 1")
    s = size(t)
    return d <= length(s) ? s[d] : 1
end

Base.ndims(t::Tensor) = length(size(t))
Base.length(t::Tensor) = prod(size(t))

"""
    eltype(t::Tensor)

The Julia element type of the tensor's dtype (Float32, ..., `BFloat16`, Bool).
"""
function Base.eltype(t::Tensor)
    d = Ref{koila_dtype}(LibKoila.KOILA_FLOAT32)
    @check LibKoila.koila_tensor_dtype(t, d)
    return _eltype(d[])
end

"""
    batchdim(t::Tensor) -> Union{Int,Nothing}

The dimension (1-based) that carries the lazy batch, or `nothing` when there is none.
"""
function batchdim(t::Tensor)
    r = Ref{Int64}(0)
    @check LibKoila.koila_tensor_batch_dim(t, r)
    return r[] < 0 ? nothing : Int(r[]) + 1
end

"""
    islazy(t::Tensor) -> Bool
"""
function islazy(t::Tensor)
    r = Ref{Cint}(0)
    @check LibKoila.koila_tensor_is_lazy(t, r)
    return r[] != 0
end

# ------------------------------------------------------------------------------------------
# Values: evaluate (in chunks when the budget requires it); never record gradients
# ------------------------------------------------------------------------------------------

"""
    Array(t::Tensor) -> Array{eltype(t), ndims(t)}
    Array{T}(t::Tensor)
    collect(t::Tensor)

The values of `t` (evaluated if lazy), as a Julia array of the same size and logical
index.
"""
Base.Array(t::Tensor) = _toarray(t, eltype(t), size(t))
(::Type{Array{T}})(t::Tensor) where {T} = convert(Array{T}, Array(t))
Base.collect(t::Tensor) = Array(t)

function _toarray(t::Tensor, ::Type{T}, s::NTuple{N,Int}) where {T,N}
    buf = Array{T,N}(undef, ntuple(k -> s[N + 1 - k], N))
    @check LibKoila.koila_tensor_to_host(t, buf, sizeof(T) * length(buf))
    return N <= 1 ? buf : permutedims(buf, _reversed_perm(N))
end

"""
    item(t::Tensor) -> Float64

The value of a one-element tensor (any dtype) as a Float64. `t[]` gives it with the
tensor's own element type.
"""
function item(t::Tensor)
    r = Ref{Cdouble}(0.0)
    @check LibKoila.koila_tensor_item(t, r)
    return r[]
end

"""
    t[]            # the value of a one-element tensor, of type eltype(t)
    t[i, j, ...]   # one element (1-based indices); the tensor is narrowed, then read
    t[i, :, a:b]   # a Tensor: integers drop their dim, ranges and `:` keep it

Indexing reads values (evaluating a lazy tensor); ranges and `:` give a new tensor without
reading anything. There is one index per dimension. An integer index may be negative,
counting from the end (-1 is the last); `end` works too (`t[end, 1:end-1]`).
"""
function Base.getindex(t::Tensor)
    s = size(t)
    prod(s) == 1 || _argerror("t[] needs a tensor of exactly one element; this one has size $s")
    return _scalar(t, eltype(t))
end

# For `end` in indexing (one index per dimension).
Base.firstindex(t::Tensor, d::Integer) = 1
Base.lastindex(t::Tensor, d::Integer) = size(t, d)
Base.firstindex(t::Tensor) = 1
Base.lastindex(t::Tensor) = length(t)

function _scalar(t::Tensor, ::Type{T}) where {T}
    buf = Vector{T}(undef, 1)
    @check LibKoila.koila_tensor_to_host(t, buf, sizeof(T))
    return buf[1]
end

function Base.getindex(t::Tensor, I::Union{Integer,AbstractUnitRange{<:Integer},Colon}...)
    s = size(t)
    length(I) == length(s) ||
        _argerror("a tensor of size $s takes $(length(s)) indices, got $(length(I))")
    cur = t
    dropped = Int[]
    try
        for (d, i) in enumerate(I)
            i isa Colon && continue
            if i isa Integer
                k = i < 0 ? s[d] + 1 + Int(i) : Int(i)    # negative counts from the end
                1 <= k <= s[d] || _argerror("index $i is out of bounds for dimension $d of size $(s[d])")
                start, len = k, 1
                push!(dropped, d)
            else
                (isempty(i) || (1 <= first(i) && last(i) <= s[d])) ||
                    _argerror("range $i is out of bounds for dimension $d of size $(s[d])")
                start, len = isempty(i) ? 1 : Int(first(i)), length(i)
            end
            next = narrow(cur, d, start, len)
            cur === t || close(cur)
            cur = next
        end
        if length(dropped) == length(s)
            return cur[]
        end
        for d in Iterators.reverse(dropped)
            next = squeeze(cur, d)
            cur === t || close(cur)
            cur = next
        end
        # All colons: a new handle to the same tensor, so closing it leaves `t` open.
        result = cur === t ? _share(t) : cur
        cur = t        # do not close the result below
        return result
    finally
        cur === t || close(cur)
    end
end

# A second handle to the same tensor (values shared, nothing evaluated): a concrete
# tensor through koila_eval, a lazy one wrapped again with its batch dim (the same recipe).
_share(t::Tensor) = islazy(t) ? lazy(t, batchdim(t)) : evaluate(t)

"""
    evaluate(t::Tensor) -> Tensor

A concrete tensor with the value of `t` (`t` itself, shared, when it is already
concrete). The result of evaluating a lazy tensor does not require grad: train through
`backward!` on the lazy loss.
"""
evaluate(t::Tensor) = _new(LibKoila.koila_eval, t)

"""
    to_string(t::Tensor) -> String

The tensor printed as LibTorch prints it (evaluates a lazy tensor). `show` in the REPL
uses it.
"""
to_string(t::Tensor) = _text((buf, cap, needed) -> LibKoila.koila_tensor_to_string(t, buf, cap, needed))

function Base.show(io::IO, t::Tensor)
    if !isopen(t)
        print(io, "Tensor(<closed>)")
        return
    end
    try
        s = size(t)
        print(io, "Tensor{", eltype(t), "}(", isempty(s) ? "scalar" : join(s, "×"))
        if islazy(t)
            bd = batchdim(t)
            print(io, ", lazy", bd === nothing ? "" : ", batch dim $bd")
        end
        print(io, ")")
    catch e
        e isa KoilaError || rethrow()
        print(io, "Tensor(<", e.msg, ">)")
    end
end

function Base.show(io::IO, ::MIME"text/plain", t::Tensor)
    show(io, t)
    isopen(t) || return
    text = try
        to_string(t)
    catch e
        e isa KoilaError || rethrow()
        "<cannot evaluate: " * e.msg * ">"
    end
    print(io, ":\n", text)
end

# ------------------------------------------------------------------------------------------
# Autograd
# ------------------------------------------------------------------------------------------

"""
    requires_grad!(t::Tensor, flag = true) -> t

Marks a concrete floating-point leaf (a parameter) as requiring gradients. Lazy tensors
are refused: gradients of a lazy graph flow to the concrete leaves it was built from.
"""
function requires_grad!(t::Tensor, flag::Bool = true)
    @check LibKoila.koila_tensor_set_requires_grad(t, flag)
    return t
end

"""
    backward!(loss::Tensor)

Backward from a scalar loss; gradients add into the leaves' `grad`, as in PyTorch. With a
lazy batch it runs forward and backward chunk by chunk under the memory budget, and the
gradients equal those of the whole batch. A failed call leaves every gradient as it was.
"""
function backward!(loss::Tensor)
    @check LibKoila.koila_backward(loss)
    return nothing
end

"""
    grad(t::Tensor) -> Union{Tensor,Nothing}

The gradient of a concrete leaf (or of the tensor a lazy input wraps), `nothing` when it
has none. The result aliases the gradient: it sees later updates and `zero_grad!`.
"""
function grad(t::Tensor)
    out = Ref{Ptr{koila_tensor}}(C_NULL)
    @check LibKoila.koila_tensor_grad(out, t)
    return out[] == C_NULL ? nothing : Tensor(out[])
end

"""
    zero_grad!(t::Tensor) -> t
    zero_grad!(opt::Optimizer) -> opt

Sets existing gradients to zero in place. An optimizer also gives each of its parameters
without a gradient a zero one: every step's backward then starts alike, which a run resumed
from a checkpoint needs to continue bit for bit.
"""
function zero_grad!(t::Tensor)
    @check LibKoila.koila_tensor_zero_grad(t)
    return t
end
