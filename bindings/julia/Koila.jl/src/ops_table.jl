# Generated from src/ops/ops.toml by scripts/gen_ops.py; edit the table, not this file.
#
# The operators whose Julia method follows from their C arguments: a Tensor, `nothing` for
# an optional tensor, numbers, 1-based dims. The others, and the operator syntax (a + b,
# max.(a, b), ...), are written by hand in ops.jl.

"""
    neg(x)

`-x`, elementwise (also `-x` in Julia).
"""
neg(x::Tensor) = _new(LibKoila.koila_neg, x)

"""
    abs(x)

`|x|`, elementwise.
"""
Base.abs(x::Tensor) = _new(LibKoila.koila_abs, x)

"""
    exp(x)

`e^x`, elementwise.
"""
Base.exp(x::Tensor) = _new(LibKoila.koila_exp, x)

"""
    log(x)

The natural logarithm, elementwise.
"""
Base.log(x::Tensor) = _new(LibKoila.koila_log, x)

"""
    sqrt(x)

The square root, elementwise.
"""
Base.sqrt(x::Tensor) = _new(LibKoila.koila_sqrt, x)

"""
    rsqrt(x)

`1 / sqrt(x)`, elementwise.
"""
rsqrt(x::Tensor) = _new(LibKoila.koila_rsqrt, x)

"""
    sin(x)

The sine, elementwise.
"""
Base.sin(x::Tensor) = _new(LibKoila.koila_sin, x)

"""
    cos(x)

The cosine, elementwise.
"""
Base.cos(x::Tensor) = _new(LibKoila.koila_cos, x)

"""
    tanh(x)

The hyperbolic tangent, elementwise.
"""
Base.tanh(x::Tensor) = _new(LibKoila.koila_tanh, x)

"""
    sigmoid(x)

The logistic sigmoid, elementwise.
"""
sigmoid(x::Tensor) = _new(LibKoila.koila_sigmoid, x)

"""
    relu(x)

`max(x, 0)`, elementwise.
"""
relu(x::Tensor) = _new(LibKoila.koila_relu, x)

"""
    gelu(x)

GELU (exact, erf form), elementwise; x must be floating.
"""
gelu(x::Tensor) = _new(LibKoila.koila_gelu, x)

"""
    silu(x)

SiLU (`x * sigmoid(x)`), elementwise; x must be floating.
"""
silu(x::Tensor) = _new(LibKoila.koila_silu, x)

"""
    erf(x)

The error function, elementwise (integer inputs give a floating result).
"""
erf(x::Tensor) = _new(LibKoila.koila_erf, x)

"""
    hardswish(x)

Hardswish (`x * relu6(x + 3) / 6`), elementwise; x must be floating.
"""
hardswish(x::Tensor) = _new(LibKoila.koila_hardswish, x)

"""
    leaky_relu(x, slope = 0.01)

`max(x, 0) + slope * min(x, 0)`, elementwise.
"""
leaky_relu(x::Tensor, slope::Real = 0.01) = _new(LibKoila.koila_leaky_relu, x, slope)

"""
    clamp(x, lo, hi)

Clamps into [lo, hi] (values end at hi when lo > hi, as in PyTorch); neither may be NaN.
"""
Base.clamp(x::Tensor, lo::Real, hi::Real) = _new(LibKoila.koila_clamp, x, lo, hi)

"""
    softmax(x, dim)

Softmax along `dim`. Dims are 1-based (-1: the last).
"""
softmax(x::Tensor, dim::Integer) = _new(LibKoila.koila_softmax, x, _cdim(dim))

"""
    log_softmax(x, dim)

Log-softmax along `dim`. Dims are 1-based (-1: the last).
"""
log_softmax(x::Tensor, dim::Integer) = _new(LibKoila.koila_log_softmax, x, _cdim(dim))

"""
    matmul(a, other)

The matrix product, as torch.matmul (1-D, 2-D and broadcast batched cases).
"""
matmul(a::Tensor, other::Tensor) = _new(LibKoila.koila_matmul, a, other)

"""
    linear(x, weight, bias = nothing)

`x @ weight^T + bias` with weight [out, in] and bias [out] (or none).
"""
linear(x::Tensor, weight::Tensor, bias::Union{Tensor,Nothing} = nothing) =
    _new(LibKoila.koila_linear, x, weight, _opt(bias))

"""
    embedding(weight, indices)

Rows of this weight [num, dim] picked by integer `indices` of any shape (0-based): the
result is `indices.shape + [dim]`.
"""
embedding(weight::Tensor, indices::Tensor) = _new(LibKoila.koila_embedding, weight, indices)

"""
    transpose(x, d0, d1)

Two dims swapped. Dims are 1-based (-1: the last).
"""
Base.transpose(x::Tensor, d0::Integer, d1::Integer) =
    _new(LibKoila.koila_transpose, x, _cdim(d0), _cdim(d1))

"""
    squeeze(x, dim)

Removes `dim` when its size is 1 (else the shape is unchanged, as PyTorch). Dims are 1-based
(-1: the last).
"""
squeeze(x::Tensor, dim::Integer) = _new(LibKoila.koila_squeeze, x, _cdim(dim))

"""
    unsqueeze(x, dim)

Inserts a dim of size 1 at `dim`. Dims are 1-based (-1: the last).
"""
unsqueeze(x::Tensor, dim::Integer) = _new(LibKoila.koila_unsqueeze, x, _cdim(dim))

"""
    index_select(x, dim, index)

The entries of `dim` picked by the 1-D integer tensor `index` (0-based values). Dims are
1-based (-1: the last).
"""
index_select(x::Tensor, dim::Integer, index::Tensor) =
    _new(LibKoila.koila_index_select, x, _cdim(dim), index)

export rsqrt, sigmoid, relu, gelu, silu, hardswish, leaky_relu, softmax, log_softmax, matmul,
       linear, embedding, squeeze, unsqueeze, index_select
