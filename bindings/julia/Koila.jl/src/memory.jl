# Memory budget, measurement and plans; the library version and the random seed.

"""
    Koila.version() -> VersionNumber

The version of the loaded koila library.
"""
version() = VersionNumber(unsafe_string(LibKoila.koila_version()))

"""
    manual_seed!(seed::Integer)

Seeds every random generator koila uses (randn, dropout) on every device.
"""
function manual_seed!(seed::Integer)
    seed >= 0 || _argerror("manual_seed!: the seed must be >= 0, got $seed")
    @check LibKoila.koila_manual_seed(UInt64(seed))
    return nothing
end

"""
    set_memory_budget!(bytes; device = "cpu")
    set_memory_budget!(device, bytes)

The bytes koila may use on a device ("cpu", "cuda", "cuda:N"). `0` restores the automatic
budget: what is in use plus the device's free memory, less a safety margin. Reads and
`backward!` split a lazy batch into chunks to stay within it. Thread-safe.
"""
function set_memory_budget!(device::AbstractString, bytes::Integer)
    bytes >= 0 || _argerror("set_memory_budget!: bytes must be >= 0, got $bytes")
    @check LibKoila.koila_set_memory_budget(_dev(device), UInt64(bytes))
    return nothing
end
set_memory_budget!(bytes::Integer; device::AbstractString = "cpu") = set_memory_budget!(device, bytes)

"""
    memory_budget(device = "cpu") -> Int

The budget in force, in bytes (the automatic one resolved now).
"""
function memory_budget(device::AbstractString = "cpu")
    r = Ref{UInt64}(0)
    @check LibKoila.koila_memory_budget(_dev(device), r)
    return Int(r[])
end

"""
    memory_stats(device = "cpu") -> (current = Int, peak = Int)

Bytes held by tensors on the device now, and the most held at once since the last
`memory_reset_peak!`.
"""
function memory_stats(device::AbstractString = "cpu")
    current = Ref{UInt64}(0)
    peak = Ref{UInt64}(0)
    @check LibKoila.koila_memory_stats(_dev(device), current, peak)
    return (current = Int(current[]), peak = Int(peak[]))
end

"""
    memory_reset_peak!(device = "cpu")

Makes the peak of `memory_stats` start again from what is held now.
"""
function memory_reset_peak!(device::AbstractString = "cpu")
    @check LibKoila.koila_memory_reset_peak(_dev(device))
    return nothing
end

_mode(m::koila_mode) = m
function _mode(m::Symbol)
    m === :forward && return LibKoila.KOILA_MODE_FORWARD
    m === :training && return LibKoila.KOILA_MODE_TRAINING
    _argerror("plan mode must be :forward or :training, got :$m")
end

function Plan(t::Tensor, mode::Union{Symbol,koila_mode} = :forward)
    out = Ref{Ptr{koila_plan}}(C_NULL)
    @check LibKoila.koila_plan_new(out, t, _mode(mode))
    return Plan(out[])
end

"""
    batch_size(p::Plan) -> Union{Int,Nothing}

The size of the lazy batch, `nothing` when the tensor has none.
"""
batch_size(p::Plan) = (v = LibKoila.koila_plan_batch_size(p); v < 0 ? nothing : Int(v))

"""
    chunk_size(p::Plan) -> Union{Int,Nothing}

The largest chunk: a power of two, or the whole batch when it fits (`nothing`: no batch).
"""
chunk_size(p::Plan) = (v = LibKoila.koila_plan_chunk_size(p); v < 0 ? nothing : Int(v))

"""
    num_chunks(p::Plan) -> Int

1 when the whole batch runs at once.
"""
num_chunks(p::Plan) = Int(LibKoila.koila_plan_num_chunks(p))

"""
    peak_bytes(p), full_peak_bytes(p), budget_bytes(p) -> Int

The estimated peak bytes on the device during the planned run (usage before it
included), the same if the batch ran unsplit, and the budget the plan was made under.
"""
peak_bytes(p::Plan) = Int(LibKoila.koila_plan_peak_bytes(p))
full_peak_bytes(p::Plan) = Int(LibKoila.koila_plan_full_peak_bytes(p))
budget_bytes(p::Plan) = Int(LibKoila.koila_plan_budget_bytes(p))

"""
    describe(p::Plan) -> String

A human-readable account: batch, chunk, chunks, estimated peak, budget, and why (for
instance which op prevents splitting).
"""
describe(p::Plan) = _text((buf, cap, needed) -> LibKoila.koila_plan_describe(p, buf, cap, needed))

function Base.show(io::IO, p::Plan)
    if !isopen(p)
        print(io, "Plan(<closed>)")
    else
        print(io, "Plan(", describe(p), ")")
    end
end
