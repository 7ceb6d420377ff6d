# Operators: the forms written by hand (operator syntax, keywords, Julia collections); the
# methods that follow from the C arguments alone are generated into ops_table.jl. Every op returns a new Tensor, lazy when any input is lazy, else computed at
# once. Shape and dtype errors are thrown by the call that builds the op.

const _NULL_TENSOR = Ptr{koila_tensor}(0)
const _NULL_INTS = Ptr{Int64}(0)

_opt(x::Nothing) = _NULL_TENSOR
_opt(x::Tensor) = x

# Optional int arrays (stride, padding, ...): nothing -> NULL (LibTorch's default).
_ints(x::Nothing, n::Int, what) = _NULL_INTS
_ints(x::Integer, n::Int, what) = fill(Int64(x), n)
function _ints(x::Union{Tuple,AbstractVector}, n::Int, what)
    length(x) == n || _argerror("$what: expected $n value(s), got $(length(x))")
    return Int64[v for v in x]
end

function _reduction(r::Symbol)
    r === :mean && return LibKoila.KOILA_REDUCTION_MEAN
    r === :sum && return LibKoila.KOILA_REDUCTION_SUM
    r === :none && return LibKoila.KOILA_REDUCTION_NONE
    _argerror("reduction must be :mean, :sum or :none, got :$r")
end
_reduction(r::koila_reduction) = r

# A 0-dimensional CPU tensor for a Julia number in a binary op that has no scalar form in
# the C API. LibTorch combines 0-dim CPU tensors with tensors on any device, and promotes
# dtypes as for a Python scalar of the same kind (a Float32 tensor stays Float32).
_scalar_tensor(s::Bool) = Tensor(fill(s))
_scalar_tensor(s::Integer) = Tensor(fill(Int64(s)))
_scalar_tensor(s::Real) = Tensor(fill(Float64(s)))

function _with_scalar(f::F, a::Tensor, s::Real, scalar_first::Bool) where {F}
    st = _scalar_tensor(s)
    try
        return scalar_first ? _new(f, st, a) : _new(f, a, st)
    finally
        close(st)
    end
end

# ------------------------------------------------------------------------------------------
# Elementwise, broadcasting (PyTorch rules: shapes align at the last dim)
# ------------------------------------------------------------------------------------------

"""
    Koila.add(a, b), Koila.sub(a, b), Koila.mul(a, b), Koila.div(a, b), Koila.pow(a, b)

Elementwise arithmetic with PyTorch broadcasting; either argument may be a number. `div`
is true division (integer inputs give a floating result). The same as `a .+ b`, `a .- b`,
`a .* b`, `a ./ b`, `a .^ b`.
"""
add(a::Tensor, b::Tensor) = _new(LibKoila.koila_add, a, b)
add(a::Tensor, s::Real) = _new(LibKoila.koila_add_scalar, a, s)
add(s::Real, a::Tensor) = _new(LibKoila.koila_add_scalar, a, s)
sub(a::Tensor, b::Tensor) = _new(LibKoila.koila_sub, a, b)
sub(a::Tensor, s::Real) = _new(LibKoila.koila_sub_scalar, a, s)
function sub(s::Real, a::Tensor)
    n = neg(a)
    try
        return _new(LibKoila.koila_add_scalar, n, s)
    finally
        close(n)
    end
end
mul(a::Tensor, b::Tensor) = _new(LibKoila.koila_mul, a, b)
mul(a::Tensor, s::Real) = _new(LibKoila.koila_mul_scalar, a, s)
mul(s::Real, a::Tensor) = _new(LibKoila.koila_mul_scalar, a, s)
div(a::Tensor, b::Tensor) = _new(LibKoila.koila_div, a, b)
div(a::Tensor, s::Real) = _new(LibKoila.koila_div_scalar, a, s)
div(s::Real, a::Tensor) = _with_scalar(LibKoila.koila_div, a, s, true)
pow(a::Tensor, b::Tensor) = _new(LibKoila.koila_pow, a, b)
pow(a::Tensor, s::Real) = _new(LibKoila.koila_pow_scalar, a, s)
pow(s::Real, a::Tensor) = _with_scalar(LibKoila.koila_pow, a, s, true)

# Elementwise maximum / minimum (koila_maximum, koila_minimum): max(a, b), min(a, b), and
# with broadcasting max.(a, 0).
_max(a::Tensor, b::Tensor) = _new(LibKoila.koila_maximum, a, b)
_max(a::Tensor, s::Real) = _with_scalar(LibKoila.koila_maximum, a, s, false)
_max(s::Real, a::Tensor) = _with_scalar(LibKoila.koila_maximum, a, s, true)
_min(a::Tensor, b::Tensor) = _new(LibKoila.koila_minimum, a, b)
_min(a::Tensor, s::Real) = _with_scalar(LibKoila.koila_minimum, a, s, false)
_min(s::Real, a::Tensor) = _with_scalar(LibKoila.koila_minimum, a, s, true)

"""
    Koila.eq(a, b), Koila.ne, Koila.lt, Koila.le, Koila.gt, Koila.ge

Elementwise comparisons giving a Bool tensor; also written `a .== b`, `a .!= b`, `a .< b`,
`a .<= b`, `a .> b`, `a .>= b`. (`a == b` on tensors is identity, as for any Julia
object.)
"""
eq(a::Tensor, b::Tensor) = _new(LibKoila.koila_eq, a, b)
ne(a::Tensor, b::Tensor) = _new(LibKoila.koila_ne, a, b)
lt(a::Tensor, b::Tensor) = _new(LibKoila.koila_lt, a, b)
le(a::Tensor, b::Tensor) = _new(LibKoila.koila_le, a, b)
gt(a::Tensor, b::Tensor) = _new(LibKoila.koila_gt, a, b)
ge(a::Tensor, b::Tensor) = _new(LibKoila.koila_ge, a, b)
for (name, c, flipped) in ((:eq, :koila_eq, :koila_eq), (:ne, :koila_ne, :koila_ne),
                           (:lt, :koila_lt, :koila_gt), (:le, :koila_le, :koila_ge),
                           (:gt, :koila_gt, :koila_lt), (:ge, :koila_ge, :koila_le))
    @eval $name(a::Tensor, s::Real) = _with_scalar(LibKoila.$c, a, s, false)
    @eval $name(s::Real, a::Tensor) = _with_scalar(LibKoila.$flipped, a, s, false)
end

# Base operators. `*` of two tensors is the matrix product (torch.matmul), as for Julia
# matrices; elementwise products are written a .* b.
Base.:+(a::Tensor) = a
Base.:+(a::Tensor, b::Tensor) = add(a, b)
Base.:+(a::Tensor, s::Real) = add(a, s)
Base.:+(s::Real, a::Tensor) = add(s, a)
Base.:-(a::Tensor) = neg(a)
Base.:-(a::Tensor, b::Tensor) = sub(a, b)
Base.:-(a::Tensor, s::Real) = sub(a, s)
Base.:-(s::Real, a::Tensor) = sub(s, a)
Base.:*(a::Tensor, b::Tensor) = matmul(a, b)
Base.:*(a::Tensor, s::Real) = mul(a, s)
Base.:*(s::Real, a::Tensor) = mul(s, a)
Base.:/(a::Tensor, s::Real) = div(a, s)
"""
    max(a::Tensor, b), min(a::Tensor, b)

Elementwise maximum / minimum with broadcasting; either argument may be a number. Also
max.(a, b).
"""
Base.max(a::Tensor, b::Tensor) = _max(a, b)
Base.max(a::Tensor, s::Real) = _max(a, s)
Base.max(s::Real, a::Tensor) = _max(s, a)
Base.min(a::Tensor, b::Tensor) = _min(a, b)
Base.min(a::Tensor, s::Real) = _min(a, s)
Base.min(s::Real, a::Tensor) = _min(s, a)

# ------------------------------------------------------------------------------------------
# Unary
# ------------------------------------------------------------------------------------------

"""
    softmax(x; dims = -1)      log_softmax(x; dims = -1)

Along dimension `dims` (1-based; -1 is the last); the same as softmax(x, dims).
"""
softmax(x::Tensor; dims::Integer = -1) = softmax(x, dims)
log_softmax(x::Tensor; dims::Integer = -1) = log_softmax(x, dims)

"""
    dropout(x, p = 0.5; train = true)

Zeroes elements with probability `p` (0 <= p <= 1) and scales the rest by 1/(1-p); with
`train = false` the input passes through unchanged.
"""
dropout(x::Tensor, p::Real = 0.5; train::Bool = true) = _new(LibKoila.koila_dropout, x, p, train)

# ------------------------------------------------------------------------------------------
# Convolution and pooling. Sizes (stride, padding, ...) are sizes, not dims: an integer
# or one value per spatial dim, in the tensor's order. `nothing` takes PyTorch's default.
# ------------------------------------------------------------------------------------------

"""
    conv1d(x, w, bias = nothing; stride = nothing, padding = nothing, dilation = nothing, groups = 1)
    conv2d(x, w, bias = nothing; stride = nothing, padding = nothing, dilation = nothing, groups = 1)

As torch.nn.functional.conv1d/conv2d: `x` is (N, C, L) / (N, C, H, W) or unbatched,
`w` is (out, C/groups, k...). `stride`, `padding`, `dilation`: an integer or one value per
spatial dim; `nothing` means 1, 0, 1.
"""
conv1d(x::Tensor, w::Tensor, bias::Union{Tensor,Nothing} = nothing; stride = nothing,
       padding = nothing, dilation = nothing, groups::Integer = 1) =
    _new(LibKoila.koila_conv1d, x, w, _opt(bias), _ints(stride, 1, "stride"),
         _ints(padding, 1, "padding"), _ints(dilation, 1, "dilation"), groups)
conv2d(x::Tensor, w::Tensor, bias::Union{Tensor,Nothing} = nothing; stride = nothing,
       padding = nothing, dilation = nothing, groups::Integer = 1) =
    _new(LibKoila.koila_conv2d, x, w, _opt(bias), _ints(stride, 2, "stride"),
         _ints(padding, 2, "padding"), _ints(dilation, 2, "dilation"), groups)

"""
    max_pool2d(x, kernel; stride = kernel, padding = 0, ceil_mode = false)
    avg_pool2d(x, kernel; stride = kernel, padding = 0, ceil_mode = false)
    adaptive_avg_pool2d(x, output_size)
    upsample_nearest2d(x, scale)

Sizes (and upsample_nearest2d's whole scale factors) are an integer or a pair (H, W).
"""
max_pool2d(x::Tensor, kernel; stride = nothing, padding = nothing, ceil_mode::Bool = false) =
    _new(LibKoila.koila_max_pool2d, x, _ints(_required(kernel, "kernel"), 2, "kernel"),
         _ints(stride, 2, "stride"), _ints(padding, 2, "padding"), ceil_mode)
avg_pool2d(x::Tensor, kernel; stride = nothing, padding = nothing, ceil_mode::Bool = false) =
    _new(LibKoila.koila_avg_pool2d, x, _ints(_required(kernel, "kernel"), 2, "kernel"),
         _ints(stride, 2, "stride"), _ints(padding, 2, "padding"), ceil_mode)
adaptive_avg_pool2d(x::Tensor, output_size) =
    _new(LibKoila.koila_adaptive_avg_pool2d, x, _ints(_required(output_size, "output_size"), 2, "output_size"))
upsample_nearest2d(x::Tensor, scale) =
    _new(LibKoila.koila_upsample_nearest2d, x, _ints(_required(scale, "scale"), 2, "scale"))

_required(x::Nothing, what) = _argerror("$what is required")
_required(x, what) = x

# ------------------------------------------------------------------------------------------
# Normalization and embedding
# ------------------------------------------------------------------------------------------

"""
    batch_norm(x; weight = nothing, bias = nothing, running_mean = nothing,
               running_var = nothing, training = false, momentum = 0.1, eps = 1e-5)

Normalizes over every dim but dim 2 (the channels; PyTorch's dim 1). In training it uses
the batch statistics (and updates the running statistics, when given, each time it is
evaluated), which mixes samples across the batch: koila does not split it unless
`set_batch_stats!(:per_chunk)` allows statistics per chunk.
"""
batch_norm(x::Tensor; weight::Union{Tensor,Nothing} = nothing, bias::Union{Tensor,Nothing} = nothing,
           running_mean::Union{Tensor,Nothing} = nothing, running_var::Union{Tensor,Nothing} = nothing,
           training::Bool = false, momentum::Real = 0.1, eps::Real = 1e-5) =
    _new(LibKoila.koila_batch_norm, x, _opt(weight), _opt(bias), _opt(running_mean),
         _opt(running_var), training, momentum, eps)

"""
    layer_norm(x, normalized_shape; weight = nothing, bias = nothing, eps = 1e-5)

Normalizes over the trailing dims of sizes `normalized_shape` (an integer or a tuple).
"""
function layer_norm(x::Tensor, normalized_shape; weight::Union{Tensor,Nothing} = nothing,
                    bias::Union{Tensor,Nothing} = nothing, eps::Real = 1e-5)
    shape = normalized_shape isa Integer ? Int64[normalized_shape] : Int64[s for s in normalized_shape]
    return _new(LibKoila.koila_layer_norm, x, shape, length(shape), _opt(weight), _opt(bias), eps)
end

# ------------------------------------------------------------------------------------------
# Reductions: dims = : (all) or a dim or a collection of dims; keepdims = false drops the
# reduced dims (as PyTorch, unlike Julia's sum(A; dims) on arrays)
# ------------------------------------------------------------------------------------------

function _reduce(f::F, x::Tensor, dims, keepdims::Bool) where {F}
    d = dims isa Colon ? Int64[] :
        dims isa Integer ? Int64[_cdim(dims)] : Int64[_cdim(k) for k in dims]
    return _new(f, x, d, length(d), keepdims)
end

"""
    sum(x::Tensor; dims = :, keepdims = false)
    Koila.mean(x::Tensor; dims = :, keepdims = false)
    maximum(x::Tensor; dims = :, keepdims = false)    # also amax
    minimum(x::Tensor; dims = :, keepdims = false)    # also amin

Reductions over all dims (a 0-dimensional tensor) or over `dims` (an integer or a
collection, 1-based). The reduced dims are dropped unless `keepdims = true`: this follows
PyTorch, not Julia's `sum(A; dims)` on arrays, which keeps them.
"""
Base.sum(x::Tensor; dims = :, keepdims::Bool = false) = _reduce(LibKoila.koila_sum, x, dims, keepdims)
mean(x::Tensor; dims = :, keepdims::Bool = false) = _reduce(LibKoila.koila_mean, x, dims, keepdims)
amax(x::Tensor; dims = :, keepdims::Bool = false) = _reduce(LibKoila.koila_amax, x, dims, keepdims)
amin(x::Tensor; dims = :, keepdims::Bool = false) = _reduce(LibKoila.koila_amin, x, dims, keepdims)
Base.maximum(x::Tensor; dims = :, keepdims::Bool = false) = amax(x; dims = dims, keepdims = keepdims)
Base.minimum(x::Tensor; dims = :, keepdims::Bool = false) = amin(x; dims = dims, keepdims = keepdims)

"""
    argmax(x::Tensor; dims = nothing, keepdims = false) -> Tensor{Int64}

The position of the largest value along `dims` (one dim, 1-based), or over all elements of
the flattened tensor when `dims` is not given. The result is an Int64 tensor of **0-based**
positions, as torch.argmax gives, so that it compares directly with 0-based class labels.
"""
function Base.argmax(x::Tensor; dims::Union{Integer,Nothing} = nothing, keepdims::Bool = false)
    dims === nothing || return _new(LibKoila.koila_argmax, x, _cdim(dims), keepdims)
    flat = reshape(x, -1)
    try
        return _new(LibKoila.koila_argmax, flat, Int64(0), keepdims)
    finally
        close(flat)
    end
end

# ------------------------------------------------------------------------------------------
# Shape
# ------------------------------------------------------------------------------------------

"""
    reshape(x::Tensor, dims...)    # one of dims may be : (or -1)

A tensor of the same elements in **row-major** order (torch.reshape): the order of
`vec(permutedims(A, ndims(A):-1:1))`, not Julia's column-major `reshape(A, dims)`.
"""
Base.reshape(x::Tensor, dims::Union{Integer,Colon}...) = reshape(x, dims)
function Base.reshape(x::Tensor, dims::Tuple{Vararg{Union{Integer,Colon}}})
    shape = Int64[d isa Colon ? -1 : d for d in dims]
    return _new(LibKoila.koila_reshape, x, shape, length(shape))
end

"""
    permutedims(x::Tensor, perm)

As Julia's permutedims: dimension k of the result is dimension perm[k] of x (1-based).
"""
function Base.permutedims(x::Tensor, perm)
    p = Int64[_cdim(d) for d in perm]
    return _new(LibKoila.koila_permute, x, p, length(p))
end

"""
    transpose(x::Tensor)            # swaps the last two dims; also x'
"""
Base.transpose(x::Tensor) = transpose(x, -2, -1)
Base.adjoint(x::Tensor) = transpose(x, -2, -1)

"""
    flatten(x, first = 1, last = -1)

Merges dims `first` through `last` (inclusive, 1-based) into one, in row-major order (as
torch.flatten).
"""
flatten(x::Tensor, first::Integer = 1, last::Integer = -1) =
    _new(LibKoila.koila_flatten, x, _cdim(first), _cdim(last))

function _cat(f::F, ts, dim::Integer, what::AbstractString) where {F}
    v = collect(ts)   # a Vector roots its elements while C reads the handles
    isempty(v) && _argerror("$what: no tensors")
    handles = _handles(v, what)
    d = _cdim(dim)
    result = GC.@preserve v _new(f, handles, length(handles), d)
    return result
end

"""
    cat(ts::Tensor...; dims)     vcat(ts::Tensor...)  (dims = 1)     hcat(ts::Tensor...)  (dims = 2)

Concatenates along an existing dim.
"""
Base.cat(t::Tensor, ts::Tensor...; dims::Integer) = _cat(LibKoila.koila_cat, (t, ts...), dims, "cat")
Base.vcat(t::Tensor, ts::Tensor...) = _cat(LibKoila.koila_cat, (t, ts...), 1, "vcat")
Base.hcat(t::Tensor, ts::Tensor...) = _cat(LibKoila.koila_cat, (t, ts...), 2, "hcat")

"""
    stack(ts; dims)

Stacks tensors of one shape along a new dim, which becomes dim `dims` of the result
(`dims = 1`: the new first dim, as torch.stack(ts, 0)). `ts` is a vector or tuple of
Tensors.
"""
stack(ts::Union{AbstractVector{<:Tensor},Tuple{Tensor,Vararg{Tensor}}}; dims::Integer) =
    _cat(LibKoila.koila_stack, ts, dims, "stack")

"""
    narrow(x, dim, start, len)

The elements start, start+1, ..., start+len-1 (1-based; negative start counts from the
end) along `dim`, without copying.
"""
narrow(x::Tensor, dim::Integer, start::Integer, len::Integer) =
    _new(LibKoila.koila_narrow, x, _cdim(dim), _cpos(start, "start"), len)

"""
    index_select(x, dim, index::Tensor)                  # index: 1-D integer tensor, 0-based values
    index_select(x, dim, index::AbstractVector{<:Integer})  # Julia positions, 1-based

The slices of `x` along `dim` at the given positions.
"""
function index_select(x::Tensor, dim::Integer, index::AbstractVector{<:Integer})
    all(>=(1), index) || _argerror("index_select: Julia positions start at 1")
    idx = Tensor(Int64[i - 1 for i in index])
    try
        return index_select(x, dim, idx)
    finally
        close(idx)
    end
end

# ------------------------------------------------------------------------------------------
# Losses. reduction = :mean (default), :sum or :none.
# ------------------------------------------------------------------------------------------

"""
    cross_entropy(logits, target; reduction = :mean)

`logits` (N, C, ...) against either integer class indices (N, ...) with **0-based** values
(-100 is ignored), or class probabilities shaped like the logits.
"""
cross_entropy(logits::Tensor, target::Tensor; reduction = :mean) =
    _new(LibKoila.koila_cross_entropy, logits, target, _reduction(reduction))

"""
    nll_loss(log_probs, target; reduction = :mean)

Negative log likelihood of 0-based class indices.
"""
nll_loss(log_probs::Tensor, target::Tensor; reduction = :mean) =
    _new(LibKoila.koila_nll_loss, log_probs, target, _reduction(reduction))

"""
    mse_loss(a, b; reduction = :mean), l1_loss(a, b; reduction = :mean),
    binary_cross_entropy_with_logits(logits, target; reduction = :mean)
"""
mse_loss(a::Tensor, b::Tensor; reduction = :mean) = _new(LibKoila.koila_mse_loss, a, b, _reduction(reduction))
l1_loss(a::Tensor, b::Tensor; reduction = :mean) = _new(LibKoila.koila_l1_loss, a, b, _reduction(reduction))
binary_cross_entropy_with_logits(logits::Tensor, target::Tensor; reduction = :mean) =
    _new(LibKoila.koila_binary_cross_entropy_with_logits, logits, target, _reduction(reduction))

"""
    scaled_dot_product_attention(q, k, v; mask = nothing, causal = false)

softmax(q k' / sqrt(E) + mask) v with q (..., L, E), k (..., S, E), v (..., S, Ev). A Bool
`mask` (broadcasting to (..., L, S)) keeps the positions that are true; a floating mask is
added. `causal = true` masks the positions j > i, and may be combined with `mask`.
"""
scaled_dot_product_attention(q::Tensor, k::Tensor, v::Tensor; mask::Union{Tensor,Nothing} = nothing,
                             causal::Bool = false) =
    _new(LibKoila.koila_scaled_dot_product_attention, q, k, v, _opt(mask), causal)
