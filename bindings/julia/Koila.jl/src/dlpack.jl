# DLPack (https://dmlc.github.io/dlpack/): sharing memory with Julia arrays and other array
# libraries, without a copy.
#
# The index convention is the binding's: a tensor shared from a Julia array has the same
# size and logical index (`shared_tensor(A)[i, j] == A[i, j]`), which koila sees as a
# column-major layout (strides 1, size(A, 1), ...); `shared_array(t)` gives the tensor's
# elements with the same index as `Array(t)`, without copying them.

# The exchange structs as DLPack 1.1 lays them out (koila.h passes them as Ptr{Cvoid}).
"""
    Koila.DLDevice(device_type, device_id)

DLPack's device: `device_type` 1 is the CPU (`kDLCPU`), 2 CUDA, 3 pinned host memory.
"""
struct DLDevice
    device_type::Int32
    device_id::Int32
end

"""
    Koila.DLDataType(code, bits, lanes)

DLPack's element type: `code` 0 signed integer, 1 unsigned, 2 IEEE float, 4 bfloat, 6
bool; `lanes` 1.
"""
struct DLDataType
    code::UInt8
    bits::UInt8
    lanes::UInt16
end

"""
    Koila.DLTensor(data, device, ndim, dtype, shape, strides, byte_offset)

DLPack's array: element `(i1, ..., in)` (0-based) is at `data + byte_offset +
(i1 * strides[1] + ...) * element size`; `strides` NULL means compact and row-major.
"""
struct DLTensor
    data::Ptr{Cvoid}
    device::DLDevice
    ndim::Int32
    dtype::DLDataType
    shape::Ptr{Int64}
    strides::Ptr{Int64}
    byte_offset::UInt64
end

"""
    Koila.DLManagedTensor(dl_tensor, manager_ctx, deleter)

The exchange struct of every DLPack version (`versioned = false`); `deleter` is a C function
`void (*)(DLManagedTensor *)`, called once by the consumer.
"""
struct DLManagedTensor
    dl_tensor::DLTensor
    manager_ctx::Ptr{Cvoid}
    deleter::Ptr{Cvoid}
end

"""
    Koila.DLPackVersion(major, minor)
"""
struct DLPackVersion
    major::UInt32
    minor::UInt32
end

"""
    Koila.DLManagedTensorVersioned(version, manager_ctx, deleter, flags, dl_tensor)

The exchange struct of DLPack 1.x (`versioned = true`); `flags` holds
`Koila.DLPACK_FLAG_BITMASK_READ_ONLY` (which koila refuses) and the like.
"""
struct DLManagedTensorVersioned
    version::DLPackVersion
    manager_ctx::Ptr{Cvoid}
    deleter::Ptr{Cvoid}
    flags::UInt64
    dl_tensor::DLTensor
end

const kDLCPU = Int32(1)
const kDLCUDAHost = Int32(3)
const DLPACK_FLAG_BITMASK_READ_ONLY = UInt64(1) << 0

# DLPack's code and bits of each element type.
_dldtype(::Type{Float32}) = DLDataType(2, 32, 1)
_dldtype(::Type{Float64}) = DLDataType(2, 64, 1)
_dldtype(::Type{Float16}) = DLDataType(2, 16, 1)
_dldtype(::Type{BFloat16}) = DLDataType(4, 16, 1)
_dldtype(::Type{Int64}) = DLDataType(0, 64, 1)
_dldtype(::Type{Int32}) = DLDataType(0, 32, 1)
_dldtype(::Type{Int8}) = DLDataType(0, 8, 1)
_dldtype(::Type{UInt8}) = DLDataType(1, 8, 1)
_dldtype(::Type{Bool}) = DLDataType(6, 8, 1)
_dldtype(::Type{T}) where {T} = _dtype(T)   # throws: T is none of koila's element types

function _dleltype(d::DLDataType)
    for T in _ELTYPES
        _dldtype(T) == d && return T
    end
    throw(KoilaError(KOILA_ERROR_UNSUPPORTED, "DLPack dtype (code $(d.code), $(d.bits) bits, " *
                                              "$(d.lanes) lanes) is not one of koila's"))
end

# ------------------------------------------------------------------------------------------
# The raw exchange
# ------------------------------------------------------------------------------------------

"""
    unsafe_from_dlpack(managed::Ptr{Cvoid}; versioned = true) -> Tensor

A concrete tensor over the memory of a DLPack struct (a `DLManagedTensorVersioned` when
`versioned`, else a `DLManagedTensor`), without a copy: writes through koila (an optimizer
step) are seen by the producer. It has no batch dim (wrap it with `lazy`).

Unsafe: `managed` must point to a valid struct of that form; koila owns it from this call
on, **also when the call throws**, and calls its deleter exactly once (at once on failure, or
when the last koila tensor sharing the memory is freed, maybe from a finalizer), so the
caller must not use or delete it afterwards. The memory must stay valid and writable until
then. Refused with `KOILA_ERROR_UNSUPPORTED`: a major version other than 1, a device other than the
CPU (or pinned host memory), a dtype koila lacks or lanes != 1, the read-only flag, negative
strides, misaligned data; with `KOILA_ERROR_INVALID_ARGUMENT`: NULL, a negative ndim or size,
NULL shape or data where they are needed.
"""
unsafe_from_dlpack(managed::Ptr{Cvoid}; versioned::Bool = true) =
    _new(LibKoila.koila_tensor_from_dlpack, managed, Cint(versioned))

"""
    to_dlpack(t::Tensor; versioned = true) -> Ptr{Cvoid}

A new DLPack struct (`DLManagedTensorVersioned`, DLPack 1.1, when `versioned`, else
`DLManagedTensor`) sharing the memory of `t` (evaluated first when lazy), in LibTorch's
layout (row-major sizes and strides), without its autograd history. The caller owns it: hand
it to a consumer, or call `dlpack_delete` on it, exactly once. `shared_array` does this for
Julia.
"""
function to_dlpack(t::Tensor; versioned::Bool = true)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    @check LibKoila.koila_tensor_to_dlpack(out, t, Cint(versioned))
    return out[]
end

"""
    dlpack_delete(managed::Ptr{Cvoid}; versioned = true)

Calls the deleter of a DLPack struct (if it has one), as its consumer does once it is done
with it. Call it once per struct; `managed` and the memory are invalid afterwards.
"""
function dlpack_delete(managed::Ptr{Cvoid}; versioned::Bool = true)
    managed == C_NULL && return nothing
    deleter = versioned ? unsafe_load(Ptr{DLManagedTensorVersioned}(managed)).deleter :
                          unsafe_load(Ptr{DLManagedTensor}(managed)).deleter
    deleter == C_NULL || ccall(deleter, Cvoid, (Ptr{Cvoid},), managed)
    return nothing
end

# ------------------------------------------------------------------------------------------
# Julia arrays into koila
# ------------------------------------------------------------------------------------------

# The arrays koila shares, kept alive until koila calls the deleter, by the address of their
# struct. The deleter may run inside a finalizer (the GC freeing the last tensor), where it
# must not wait for a lock: when the lock is busy it marks the struct released instead, and
# the next sweep (at the next shared_tensor) frees it.
const _SHARED = Dict{Ptr{Cvoid},Any}()
const _SHARED_LOCK = Threads.SpinLock()

# A struct's block (Libc.malloc): the struct, the released mark, the sizes, the strides.
const _MARK_OFFSET = sizeof(DLManagedTensorVersioned)
_mark(managed::Ptr{Cvoid}) = Ptr{UInt64}(managed + _MARK_OFFSET)

function _free_shared!(managed::Ptr{Cvoid})   # with the lock held
    delete!(_SHARED, managed)
    Libc.free(managed)
    return nothing
end

function _shared_deleter(managed::Ptr{Cvoid})::Cvoid
    if trylock(_SHARED_LOCK)
        try
            _free_shared!(managed)
        finally
            unlock(_SHARED_LOCK)
        end
    else
        unsafe_store!(_mark(managed), UInt64(1))
        Threads.atomic_fence()
    end
    return nothing
end

# f() with the lock held, after freeing the structs marked released.
function _with_shared(f::F) where {F}
    lock(_SHARED_LOCK)
    try
        Threads.atomic_fence()
        for managed in collect(keys(_SHARED))
            unsafe_load(_mark(managed)) == 1 && _free_shared!(managed)
        end
        return f()
    finally
        unlock(_SHARED_LOCK)
    end
end

# How many arrays koila shares now (their deleter not yet called): for tests.
_shared_count() = _with_shared(() -> length(_SHARED))

"""
    shared_tensor(A::Array; requires_grad = false) -> Tensor

A concrete CPU tensor over the memory of `A` itself, without a copy (`Tensor(A)` copies):
the same size and logical index (`t[i, j] == A[i, j]`; koila sees a column-major layout, so
`Array(t)` and the ops are as for `Tensor(A)`), writes into `A` are seen by koila, and koila's
in-place updates (an optimizer step with `t` as a parameter) are seen in `A`. `A` is kept
alive until the last koila tensor sharing it is freed. Do not resize `A`, and do not write
into it while koila runs on another thread. Element types as for `Tensor`.
"""
function shared_tensor(A::Array{T,N}; requires_grad::Bool = false) where {T,N}
    dtype = _dldtype(T)
    managed = Libc.malloc(_MARK_OFFSET + 8 + 16 * N)
    managed == C_NULL && throw(OutOfMemoryError())
    shape = Ptr{Int64}(managed + _MARK_OFFSET + 8)
    strides = shape + 8 * N
    stride = 1
    for k in 1:N
        unsafe_store!(shape, Int64(size(A, k)), k)
        unsafe_store!(strides, Int64(stride), k)   # column-major, as Julia lays A out
        stride *= size(A, k)
    end
    unsafe_store!(_mark(managed), UInt64(0))
    deleter = @cfunction(_shared_deleter, Cvoid, (Ptr{Cvoid},))
    tensor = DLTensor(Ptr{Cvoid}(pointer(A)), DLDevice(kDLCPU, 0), Int32(N), dtype, shape, strides, UInt64(0))
    unsafe_store!(Ptr{DLManagedTensorVersioned}(managed),
                  DLManagedTensorVersioned(DLPackVersion(1, 1), managed, deleter, UInt64(0), tensor))
    _with_shared(() -> (_SHARED[managed] = A))
    # koila owns the struct now, also if it refuses it (then the deleter has run).
    t = unsafe_from_dlpack(managed; versioned = true)
    requires_grad && requires_grad!(t)
    return t
end

# ------------------------------------------------------------------------------------------
# koila's memory as a Julia array
# ------------------------------------------------------------------------------------------

"""
    TensorArray{T,N} <: AbstractArray{T,N}

An array over the memory of a koila tensor (made by `shared_array`): reads and writes go to
the tensor's elements. It keeps that memory alive (also after the tensor is closed) until it
is garbage collected, when a finalizer calls the DLPack deleter, once; views and reshapes of
it keep it alive.
"""
mutable struct TensorArray{T,N,A<:AbstractArray{T,N}} <: AbstractArray{T,N}
    data::A
    managed::Ptr{Cvoid}
    function TensorArray(data::A, managed::Ptr{Cvoid}) where {T,N,A<:AbstractArray{T,N}}
        s = new{T,N,A}(data, managed)
        finalizer(_release_export!, s)
        return s
    end
end

function _release_export!(s::TensorArray)
    managed = s.managed
    if managed != C_NULL
        s.managed = C_NULL
        dlpack_delete(managed; versioned = true)
    end
    return nothing
end

# Every access keeps the TensorArray (whose finalizer frees the memory) rooted.
Base.size(s::TensorArray) = size(s.data)
Base.IndexStyle(::Type{<:TensorArray{T,N,A}}) where {T,N,A} = IndexStyle(A)
Base.@propagate_inbounds Base.getindex(s::TensorArray, i::Int) = GC.@preserve s s.data[i]
Base.@propagate_inbounds Base.getindex(s::TensorArray{T,N}, I::Vararg{Int,N}) where {T,N} =
    GC.@preserve s s.data[I...]
Base.@propagate_inbounds function Base.setindex!(s::TensorArray, v, i::Int)
    GC.@preserve s (s.data[i] = v)
    return s
end
Base.@propagate_inbounds function Base.setindex!(s::TensorArray{T,N}, v, I::Vararg{Int,N}) where {T,N}
    GC.@preserve s (s.data[I...] = v)
    return s
end

# Whether sizes and strides are dense, the dims taken in `order` (fastest first).
function _dense(shape, strides, order)
    expected = 1
    for k in order
        shape[k] == 1 || strides[k] == expected || return false
        expected *= shape[k]
    end
    return true
end

"""
    shared_array(t::Tensor) -> TensorArray

The elements of `t` (evaluated first when lazy) as a Julia array, without a copy: the same
size and logical index as `Array(t)` (`shared_array(t)[i, j] == t[i, j]`), but writes go to
the tensor's memory and koila's in-place updates (an optimizer step) are seen in it. A tensor
in LibTorch's row-major layout comes as a `PermutedDimsArray` over the memory inside the
`TensorArray`, a column-major one (from `shared_tensor`) as an `Array`. The memory stays
alive as long as the result is reachable (see `TensorArray`). Throws
`KOILA_ERROR_UNSUPPORTED` for elements that are not dense (a transposed or narrowed view:
`Array(t)` copies them) or not in host memory.
"""
function shared_array(t::Tensor)
    managed = to_dlpack(t; versioned = true)
    try
        dl = unsafe_load(Ptr{DLManagedTensorVersioned}(managed)).dl_tensor
        (dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDAHost) ||
            throw(KoilaError(KOILA_ERROR_UNSUPPORTED, "shared_array: the tensor is not in host memory " *
                                                      "(DLPack device type $(dl.device.device_type))"))
        T = _dleltype(dl.dtype)
        N = Int(dl.ndim)
        shape = ntuple(k -> Int(unsafe_load(dl.shape, k)), N)
        strides = dl.strides == C_NULL ? ntuple(k -> prod(Int[shape[j] for j in k+1:N]), N) :   # row-major
                                         ntuple(k -> Int(unsafe_load(dl.strides, k)), N)
        if prod(shape) == 0   # nothing to share (data may be NULL)
            empty = TensorArray(Array{T,N}(undef, shape), C_NULL)
            dlpack_delete(managed)
            return empty
        end
        p = Ptr{T}(dl.data + dl.byte_offset)
        data = if _dense(shape, strides, 1:N)        # column-major, as Julia's arrays
            unsafe_wrap(Array, p, shape)
        elseif _dense(shape, strides, N:-1:1)    # row-major, LibTorch's: indices reversed
            PermutedDimsArray(unsafe_wrap(Array, p, reverse(shape)), _reversed_perm(N))
        else
            throw(KoilaError(KOILA_ERROR_UNSUPPORTED, "shared_array: the tensor's elements are not dense " *
                                                      "(size $shape, strides $strides); Array(t) copies them"))
        end
        return TensorArray(data, managed)
    catch
        dlpack_delete(managed)
        rethrow()
    end
end
