# Chunking options: how planned runs split the batch (process-wide settings; thread-safe).
# Read when a plan is made; `describe(Plan(...))` says which applied.

_batch_stats(p::koila_batch_stats) = p
function _batch_stats(p::Symbol)
    p === :exact && return LibKoila.KOILA_BATCH_STATS_EXACT
    p === :per_chunk && return LibKoila.KOILA_BATCH_STATS_PER_CHUNK
    _argerror("batch statistics must be :exact or :per_chunk, got :$p")
end

_chunking(p::koila_chunking) = p
function _chunking(p::Symbol)
    p === :largest && return LibKoila.KOILA_CHUNK_LARGEST
    p === :fastest && return LibKoila.KOILA_CHUNK_FASTEST
    _argerror("chunking must be :largest or :fastest, got :$p")
end

_recompute(p::koila_recompute) = p
function _recompute(p::Symbol)
    p === :off && return LibKoila.KOILA_RECOMPUTE_OFF
    p === :as_needed && return LibKoila.KOILA_RECOMPUTE_AS_NEEDED
    p === :preferred && return LibKoila.KOILA_RECOMPUTE_PREFERRED
    _argerror("recompute must be :off, :as_needed or :preferred, got :$p")
end

"""
    set_recompute!(policy::Symbol)

Whether a backward that fits no chunk frees activations in its forward and recomputes them
in its backward, for plans made from now on:

  - `:as_needed` (the default): only where no chunk fits without it, as little as makes the
    run fit, then the largest chunk that fits with it. Gradients equal those of the same
    chunks without it; dropout replays its masks; batch norm's running statistics are
    updated once.
  - `:off`: never: such a backward throws a `KoilaError` (`KOILA_ERROR_OUT_OF_MEMORY`).
  - `:preferred`: rather than split: where the unsplit run does not fit, the largest chunk
    that fits recomputing (the whole batch first).

`recomputed_bytes(Plan(...))` says what a plan recomputes. `LibKoila.KOILA_RECOMPUTE_*`
values are accepted too. One setting for the process.
"""
function set_recompute!(policy::Union{Symbol,koila_recompute})
    @check LibKoila.koila_set_recompute(_recompute(policy))
    return nothing
end

"""
    set_batch_stats!(policy::Symbol)

How batch norm in training (`batch_norm(...; training = true)`, and BatchNorm layers of a
`TorchModule` in training) is chunked, for plans made from now on:

  - `:exact` (the default): it normalizes with the statistics of the whole batch, so it
    couples the batch: the run is unsplit or throws a `KoilaError` with
    `KOILA_ERROR_NOT_SPLITTABLE`, whose message names this option.
  - `:per_chunk`: when the batch is split, each chunk normalizes with its own mean and
    variance, as gradient accumulation does; results and gradients differ from the unsplit
    ones. The running statistics get one update with the whole batch's statistics per
    evaluation or backward. An unsplit run is unchanged.

`LibKoila.KOILA_BATCH_STATS_*` values are accepted too. One setting for the process.
"""
function set_batch_stats!(policy::Union{Symbol,koila_batch_stats})
    @check LibKoila.koila_set_batch_stats(_batch_stats(policy))
    return nothing
end

"""
    set_chunking!(policy::Symbol)

Which chunk size plans pick among those that fit the budget, for plans made from now on:

  - `:largest` (the default): the whole batch if it fits, else the largest power of two.
  - `:fastest`: among the chunk sizes that fit, the one measured fastest (the first runs of
    a graph structure time the candidates, later runs use the winner). Results stay equal
    to the unsplit ones up to float rounding.

`LibKoila.KOILA_CHUNK_*` values are accepted too. One setting for the process.
"""
function set_chunking!(policy::Union{Symbol,koila_chunking})
    @check LibKoila.koila_set_chunking(_chunking(policy))
    return nothing
end
