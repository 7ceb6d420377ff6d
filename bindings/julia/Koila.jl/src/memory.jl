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
    needed_bytes(p), full_needed_bytes(p) -> Int

The budget the planned run needs (bytes in use plus the estimate with koila's margin, a
tenth of the estimate, on top), and the same if the batch ran unsplit. A run fits when its
need is at most the budget: the batch is split exactly when the unsplit need exceeds it.
"""
needed_bytes(p::Plan) = Int(LibKoila.koila_plan_needed_bytes(p))
full_needed_bytes(p::Plan) = Int(LibKoila.koila_plan_full_needed_bytes(p))

"""
    recomputed_bytes(p::Plan) -> Int

Bytes of activations a chunk of the plan frees in its forward and recomputes in its backward
(see `set_recompute!`); 0 when nothing is recomputed. `describe(p)` names what and its cost.
"""
recomputed_bytes(p::Plan) = Int(LibKoila.koila_plan_recomputed_bytes(p))

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

function Timeline(p::Plan; unsplit::Bool = false)
    out = Ref{Ptr{koila_timeline}}(C_NULL)
    @check LibKoila.koila_plan_timeline(out, p, unsplit ? Cint(1) : Cint(0))
    return Timeline(out[])
end

"""
    events(t::Timeline) -> Vector{NamedTuple}

Every operator of the timeline in execution order: `(op, phase, chunk, live_bytes,
peak_bytes)`, `phase` `:forward` or `:backward`, `chunk` 0-based, bytes after the op and
the most during it (usage before the run included).
"""
function events(t::Timeline)
    n = Ref{Csize_t}(0)
    @check LibKoila.koila_timeline_length(t, n)
    return map(0:Int(n[])-1) do i
        k = Csize_t(i)
        op = _text((buf, cap, needed) -> LibKoila.koila_timeline_op(t, k, buf, cap, needed))
        phase = Ref{koila_phase}(LibKoila.KOILA_PHASE_FORWARD)
        chunk = Ref{Int64}(0)
        live = Ref{UInt64}(0)
        peak = Ref{UInt64}(0)
        @check LibKoila.koila_timeline_phase(t, k, phase)
        @check LibKoila.koila_timeline_chunk(t, k, chunk)
        @check LibKoila.koila_timeline_live_bytes(t, k, live)
        @check LibKoila.koila_timeline_peak_bytes(t, k, peak)
        (op = op, phase = phase[] == LibKoila.KOILA_PHASE_BACKWARD ? :backward : :forward,
         chunk = Int(chunk[]), live_bytes = Int(live[]), peak_bytes = Int(peak[]))
    end
end

"""
    peak_index(t::Timeline) -> Int

The 1-based index (into `events(t)`) of the event with the largest peak.
"""
function peak_index(t::Timeline)
    i = Ref{Csize_t}(0)
    @check LibKoila.koila_timeline_peak_index(t, i)
    return Int(i[]) + 1
end

const _MEMORY_PARTS = (in_use = LibKoila.KOILA_PART_IN_USE, activations = LibKoila.KOILA_PART_ACTIVATIONS,
                       gradients = LibKoila.KOILA_PART_GRADIENTS, temporaries = LibKoila.KOILA_PART_TEMPORARIES,
                       beyond_simulation = LibKoila.KOILA_PART_BEYOND_SIMULATION)

"""
    memory_part(t::Timeline, part::Symbol) -> Int

Bytes of one part of the peak: `:in_use`, `:activations`, `:gradients`, `:temporaries` or
`:beyond_simulation`; the parts add up to the plan's estimate of the run.
"""
function memory_part(t::Timeline, part::Symbol)
    haskey(_MEMORY_PARTS, part) || _argerror("unknown memory part :$part")
    out = Ref{UInt64}(0)
    @check LibKoila.koila_timeline_part(t, _MEMORY_PARTS[part], out)
    return Int(out[])
end
