# Process groups: data-parallel training across processes, on LibTorch's c10d (Gloo for CPU
# tensors, NCCL for CUDA ones when LibTorch has it).

"""
    ProcessGroup(backend, init; rank, world_size, timeout = 30.0) -> ProcessGroup

Joins a group of `world_size` processes as `rank` (0-based, as every process launcher
numbers them). `backend`: `"gloo"` or `"nccl"`; `init`: `"tcp://HOST:PORT"` (rank 0 listens
there) or `"file:///PATH"`. `timeout` (seconds) bounds the rendezvous and every later
collective: `KOILA_ERROR_IO` when the others do not come in time. Collectives are matched
by order: every rank makes the same calls in the same order. After a failed collective the
group is unusable: `close` it.
"""
function ProcessGroup(backend::AbstractString, init::AbstractString; rank::Integer, world_size::Integer,
                      timeout::Real = 30.0)
    (isfinite(timeout) && timeout > 0) || _argerror("timeout must be a positive number of seconds, got $timeout")
    out = Ref{Ptr{koila_group}}(C_NULL)
    @check LibKoila.koila_group_new(out, _cstr(backend, "backend"), _cstr(init, "init"), Cint(rank),
                                    Cint(world_size), round(Int64, timeout * 1000))
    return ProcessGroup(out[])
end

"""
    ProcessGroup(backend; timeout = 30.0) -> ProcessGroup

Joins the group a launcher describes in the environment, as torchrun
(`torchrun --nproc-per-node N --no-python julia script.jl`) sets it for each worker: `RANK`,
`WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`, and the launcher's own store where
`TORCHELASTIC_USE_AGENT_STORE` is `"True"`. A missing or malformed variable throws a
`KoilaError` (`KOILA_ERROR_INVALID_ARGUMENT`) naming it; timeouts and failures as the method
above. c10d's store has no authentication: keep `MASTER_ADDR` on a private network.
"""
function ProcessGroup(backend::AbstractString; timeout::Real = 30.0)
    (isfinite(timeout) && timeout > 0) || _argerror("timeout must be a positive number of seconds, got $timeout")
    out = Ref{Ptr{koila_group}}(C_NULL)
    @check LibKoila.koila_group_new_from_env(out, _cstr(backend, "backend"), round(Int64, timeout * 1000))
    return ProcessGroup(out[])
end

"""
    group_local_rank(g::ProcessGroup) -> Int

`LOCAL_RANK` for a group joined from the environment (the CUDA device of `"nccl"`); the rank
for one joined with an `init`.
"""
group_local_rank(g::ProcessGroup) = Int(LibKoila.koila_group_local_rank(g))

"""
    group_rank(g::ProcessGroup) -> Int

This process's rank, 0-based.
"""
group_rank(g::ProcessGroup) = Int(LibKoila.koila_group_rank(g))

"""
    group_size(g::ProcessGroup) -> Int

The number of processes in the group.
"""
group_size(g::ProcessGroup) = Int(LibKoila.koila_group_size(g))

"""
    group_broadcast!(g, tensors; root = 0) -> tensors

Every rank ends with `root`'s values of `tensors` (concrete, the same shapes on every rank;
a `TorchModule` stands for its parameters), e.g. the parameters before training.
"""
function group_broadcast!(g::ProcessGroup, tensors; root::Integer = 0)
    ts = _param_list(tensors)
    handles = _handles(ts, "group_broadcast!")
    GC.@preserve ts @check LibKoila.koila_group_broadcast(g, handles, length(handles), Cint(root))
    return tensors
end

"""
    group_backward!(g, loss, params) -> nothing

Backward from this rank's `loss` over its own shard of the batch (chunked under the local
budget); then, on every rank, the gradient of the loss over the union of the shards is added
into the gradients of `params` (every tensor the gradients reach, in the same order on every
rank; a `TorchModule` stands for its parameters). A MEAN loss weighs each rank by the count
it averaged over. When any rank fails, every rank throws a `KoilaError` naming it, and no
gradient changes.
"""
function group_backward!(g::ProcessGroup, loss::Tensor, params)
    ps = _param_list(params)
    handles = _handles(ps, "group_backward!")
    GC.@preserve ps @check LibKoila.koila_group_backward(g, loss, handles, length(handles))
    return nothing
end

Base.show(io::IO, g::ProcessGroup) =
    isopen(g) ? print(io, "ProcessGroup(rank ", group_rank(g), " of ", group_size(g), ")") :
                print(io, "ProcessGroup(<closed>)")
