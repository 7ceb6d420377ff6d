# Errors: every failure of the C API, and every bad argument caught on the Julia side,
# is thrown as a KoilaError carrying a koila_code.

using .LibKoila: KOILA_OK, KOILA_ERROR_INVALID_ARGUMENT, KOILA_ERROR_SHAPE, KOILA_ERROR_DTYPE,
                 KOILA_ERROR_DEVICE, KOILA_ERROR_OUT_OF_MEMORY, KOILA_ERROR_NOT_SPLITTABLE,
                 KOILA_ERROR_IO, KOILA_ERROR_UNSUPPORTED, KOILA_ERROR_INTERNAL

export KOILA_OK, KOILA_ERROR_INVALID_ARGUMENT, KOILA_ERROR_SHAPE, KOILA_ERROR_DTYPE,
       KOILA_ERROR_DEVICE, KOILA_ERROR_OUT_OF_MEMORY, KOILA_ERROR_NOT_SPLITTABLE,
       KOILA_ERROR_IO, KOILA_ERROR_UNSUPPORTED, KOILA_ERROR_INTERNAL

"""
    Koila.Code

The error codes of koila (`LibKoila.koila_code`): `KOILA_ERROR_INVALID_ARGUMENT`,
`KOILA_ERROR_SHAPE`, `KOILA_ERROR_DTYPE`, `KOILA_ERROR_DEVICE`, `KOILA_ERROR_OUT_OF_MEMORY`,
`KOILA_ERROR_NOT_SPLITTABLE`, `KOILA_ERROR_IO`, `KOILA_ERROR_UNSUPPORTED`,
`KOILA_ERROR_INTERNAL` (all exported).
"""
const Code = koila_code

"""
    KoilaError(code::Koila.Code, msg::String)

A failure reported by koila (or a bad argument caught before reaching it). `code` tells
the kind, `msg` says what went wrong.

```julia
try
    item(t)
catch e
    e isa KoilaError && e.code == KOILA_ERROR_INVALID_ARGUMENT || rethrow()
end
```
"""
struct KoilaError <: Exception
    code::Code
    msg::String
end

function Base.showerror(io::IO, e::KoilaError)
    print(io, "KoilaError(", e.code, "): ", e.msg)
end

# Reads a non-NULL status, frees it and throws.
@noinline function _throw_status(status::Ptr{koila_status})
    code = LibKoila.koila_status_code(status)
    msg = unsafe_string(LibKoila.koila_status_message(status))
    LibKoila.koila_status_free(status)
    throw(KoilaError(code, msg))
end

"""
    @check expr

Evaluates `expr`, a call of the C API returning a `Ptr{koila_status}`. A NULL status
(success) gives `nothing`; any other status is read, freed, and thrown as a `KoilaError`.

```julia
out = Ref{Ptr{LibKoila.koila_tensor}}(C_NULL)
@check LibKoila.koila_tensor_zeros(out, Int64[2, 3], 2, LibKoila.KOILA_FLOAT32, "cpu")
```
"""
macro check(expr)
    return quote
        local status = $(esc(expr))
        if status != C_NULL
            _throw_status(status)
        end
        nothing
    end
end

@noinline _argerror(msg::AbstractString) = throw(KoilaError(KOILA_ERROR_INVALID_ARGUMENT, String(msg)))

# A Julia dim (1-based; negative counts from the end) as koila's (0-based; negative
# counts from the end).
function _cdim(d::Integer)
    d == 0 && _argerror("dimension 0: dimensions are numbered from 1 (the first) or from " *
                        "-1 (the last)")
    return d > 0 ? Int64(d) - Int64(1) : Int64(d)
end

# A Julia position along a dim (1-based; negative counts from the end), as koila's.
function _cpos(i::Integer, what::AbstractString)
    i == 0 && _argerror("$what 0: positions are numbered from 1 (the first) or from -1 (the last)")
    return i > 0 ? Int64(i) - Int64(1) : Int64(i)
end

# A Julia string for a `const char *` parameter. Julia refuses to pass a string holding a NUL
# as a Cstring (ArgumentError); refuse it here instead, as a KoilaError like every other bad
# argument.
function _cstr(s::AbstractString, what::AbstractString)
    str = String(s)
    occursin('\0', str) && _argerror("$what $(repr(str)) contains a NUL character")
    return str
end

_dev(device::AbstractString) = _cstr(device, "device")
