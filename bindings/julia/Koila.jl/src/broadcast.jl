# Broadcasting: a fused expression such as `relu.(x .* w .+ 1)` is evaluated node by node
# into koila ops (lazy when an input is lazy). Shapes follow PyTorch's broadcasting (align
# at the last dim), since that is what koila computes.
#
#   a .+ b, a .- b, -a          -> add, sub, neg  (numbers allowed on either side)
#   a .* b, a ./ b, a .^ b      -> elementwise mul, div, pow (never the matrix product)
#   a .== b, .!=, .<, .<=, .>, .>=  -> Bool tensors
#   max.(a, b), min.(a, b)      -> elementwise maximum, minimum
#   f.(x) for any other f       -> f(x) applied to whole tensors: exp.(x), relu.(x),
#                                  clamp.(x, 0, 1), (v -> 2v + 1).(x); inside such an f,
#                                  `*` of two tensors is the matrix product.
#
# Julia arrays appearing in a broadcast with tensors are copied into tensors first. In-place
# broadcasting into a Tensor (`t .= ...`) is not supported: tensors are values.

struct TensorStyle <: Base.Broadcast.BroadcastStyle end

Base.Broadcast.BroadcastStyle(::Type{Tensor}) = TensorStyle()
Base.Broadcast.BroadcastStyle(s::TensorStyle, ::Base.Broadcast.AbstractArrayStyle) = s
Base.Broadcast.broadcastable(t::Tensor) = t
# koila checks the shapes when it builds each op; Julia's axes do not apply.
Base.Broadcast.instantiate(bc::Base.Broadcast.Broadcasted{TensorStyle}) = bc
Base.copy(bc::Base.Broadcast.Broadcasted{TensorStyle}) = _broadcast_eval(bc)

function _broadcast_eval(bc::Base.Broadcast.Broadcasted)
    temps = Tensor[]   # tensors made here for the arguments, closed once used
    result = nothing
    try
        args = map(x -> _bcarg(x, temps), bc.args)
        result = _bcapply(bc.f, args...)
    finally
        for t in temps
            t === result || close(t)
        end
    end
    result isa Tensor || throw(KoilaError(KOILA_ERROR_UNSUPPORTED,
                                          "broadcasting $(bc.f) over tensors gave a $(typeof(result)), not a Tensor"))
    return result
end

function _bcarg(x::Base.Broadcast.Broadcasted, temps::Vector{Tensor})
    v = Base.Broadcast.materialize(x)
    v isa Tensor && push!(temps, v)
    return v
end
_bcarg(x::Base.RefValue, temps::Vector{Tensor}) = x[]
function _bcarg(x::AbstractArray, temps::Vector{Tensor})
    v = Tensor(x)
    push!(temps, v)
    return v
end
_bcarg(x, temps::Vector{Tensor}) = x

# Functions whose meaning on whole tensors is not the elementwise one.
_bcapply(f::F, args...) where {F} = f(args...)
_bcapply(::typeof(*), a, b) = _bcbinary(mul, *, a, b)
# (*).(a, b, c) or broadcast(*, a, b, c): elementwise, left to right (never *(a, b, c),
# which would be matrix products).
function _bcapply(::typeof(*), a, b, c, rest...)
    ab = _bcapply(*, a, b)
    try
        return _bcapply(*, ab, c, rest...)
    finally
        ab isa Tensor && ab !== a && ab !== b && close(ab)
    end
end
_bcapply(::typeof(/), a, b) = _bcbinary(div, /, a, b)
_bcapply(::typeof(^), a, b) = _bcbinary(pow, ^, a, b)
_bcapply(::typeof(Base.literal_pow), ::typeof(^), x, ::Val{p}) where {p} = _bcbinary(pow, ^, x, p)
_bcapply(::typeof(==), a, b) = _bcbinary(eq, ==, a, b)
_bcapply(::typeof(!=), a, b) = _bcbinary(ne, !=, a, b)
_bcapply(::typeof(<), a, b) = _bcbinary(lt, <, a, b)
_bcapply(::typeof(<=), a, b) = _bcbinary(le, <=, a, b)
_bcapply(::typeof(>), a, b) = _bcbinary(gt, >, a, b)
_bcapply(::typeof(>=), a, b) = _bcbinary(ge, >=, a, b)
_bcapply(::typeof(max), a, b) = _bcbinary(_max, max, a, b)
_bcapply(::typeof(min), a, b) = _bcbinary(_min, min, a, b)

# A tensor op when a tensor is involved, else the plain Julia function on numbers.
_bcbinary(op, f, a::Tensor, b::Tensor) = op(a, b)
_bcbinary(op, f, a::Tensor, b::Real) = op(a, b)
_bcbinary(op, f, a::Real, b::Tensor) = op(a, b)
_bcbinary(op, f, a, b) = f(a, b)
