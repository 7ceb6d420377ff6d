# Progress of chunked runs: one Julia function, called through a C trampoline.

# The function in force (or nothing). The C library holds only the trampoline.
const _PROGRESS = Ref{Any}(nothing)

# Called by koila after each chunk, on the thread running it. A Julia exception cannot
# cross koila's C code: it is shown on stderr and dropped.
function _progress_trampoline(::Ptr{Cvoid}, what::Cstring, done::Int64, total::Int64)::Cvoid
    f = _PROGRESS[]
    f === nothing && return nothing
    try
        f(unsafe_string(what), done, total)
    catch err
        print(stderr, "Koila: the progress function threw: ")
        showerror(stderr, err)
        println(stderr)
    end
    return nothing
end

"""
    set_progress!(f)
    set_progress!(nothing)

Calls `f(what::String, done::Int64, total::Int64)` after each chunk of a planned
evaluation or backward, on the thread running it: `what` is `"forward"` or `"backward"`,
`done` counts 1..`total`, the number of chunks of that run (1 when it runs unsplit). A
backward whose loss is computed from values combined over the batch reports the combining
pass as `"forward"` first; a retry after running out of memory counts again from 1.
Planning (`Plan`) reports nothing. `nothing` turns reports off. One function for the
process. `f` must not read lazy tensors, plan or call `backward!` (those fail there with
`KOILA_ERROR_UNSUPPORTED`); an exception it throws is shown on stderr and dropped.

```julia
set_progress!((what, done, total) -> print(stderr, "\\r  \$what chunk \$done/\$total"))
```
"""
function set_progress!(f)
    if f === nothing
        @check LibKoila.koila_set_progress(C_NULL, C_NULL)
        _PROGRESS[] = nothing
    else
        _PROGRESS[] = f
        trampoline = @cfunction(_progress_trampoline, Cvoid, (Ptr{Cvoid}, Cstring, Int64, Int64))
        @check LibKoila.koila_set_progress(trampoline, C_NULL)
    end
    return nothing
end
