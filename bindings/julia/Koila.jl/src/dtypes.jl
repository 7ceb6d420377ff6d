# Element types: one Julia type per koila_dtype.

"""
    BFloat16

The bfloat16 element type of LibTorch (8 exponent bits, 7 mantissa bits), as stored: a
bits type to move data in and out of `KOILA_BFLOAT16` tensors. Convert with
`BFloat16(x::Real)` (round to nearest even) and `Float32(b)` / `Float64(b)`; it does no
arithmetic of its own.
"""
primitive type BFloat16 16 end

BFloat16(x::BFloat16) = x
function BFloat16(x::Float32)
    bits = reinterpret(UInt32, x)
    if isnan(x)   # a quiet NaN with the same sign
        return reinterpret(BFloat16, 0x7fc0 | ((bits >> 16) % UInt16 & 0x8000))
    end
    rounded = bits + 0x00007fff + ((bits >> 16) & 0x00000001)   # to nearest, ties to even
    return reinterpret(BFloat16, (rounded >> 16) % UInt16)
end
BFloat16(x::Real) = BFloat16(Float32(x))
Base.Float32(x::BFloat16) = reinterpret(Float32, UInt32(reinterpret(UInt16, x)) << 16)
Base.Float64(x::BFloat16) = Float64(Float32(x))
Base.convert(::Type{BFloat16}, x::Real) = BFloat16(x)
Base.convert(::Type{Float32}, x::BFloat16) = Float32(x)
Base.convert(::Type{Float64}, x::BFloat16) = Float64(x)
Base.show(io::IO, x::BFloat16) = print(io, "BFloat16(", Float32(x), ")")

# Indexed by koila_dtype + 1.
const _ELTYPES = (Float32, Float64, Float16, BFloat16, Int64, Int32, Int8, UInt8, Bool)

"""The Julia element types a Tensor may have."""
const ElType = Union{Float32,Float64,Float16,BFloat16,Int64,Int32,Int8,UInt8,Bool}

function _eltype(d::koila_dtype)
    k = Int(d) + 1
    1 <= k <= length(_ELTYPES) || throw(KoilaError(KOILA_ERROR_DTYPE, "unknown koila dtype $(Int(d))"))
    return _ELTYPES[k]
end

_dtype(::Type{Float32}) = LibKoila.KOILA_FLOAT32
_dtype(::Type{Float64}) = LibKoila.KOILA_FLOAT64
_dtype(::Type{Float16}) = LibKoila.KOILA_FLOAT16
_dtype(::Type{BFloat16}) = LibKoila.KOILA_BFLOAT16
_dtype(::Type{Int64}) = LibKoila.KOILA_INT64
_dtype(::Type{Int32}) = LibKoila.KOILA_INT32
_dtype(::Type{Int8}) = LibKoila.KOILA_INT8
_dtype(::Type{UInt8}) = LibKoila.KOILA_UINT8
_dtype(::Type{Bool}) = LibKoila.KOILA_BOOL
_dtype(::Type{T}) where {T} =
    throw(KoilaError(KOILA_ERROR_DTYPE, "element type $T has no koila dtype; use one of " *
                                        "Float32, Float64, Float16, BFloat16, Int64, Int32, " *
                                        "Int8, UInt8, Bool (or Tensor(A, T) to convert)"))
