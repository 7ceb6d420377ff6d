# GENERATED FILE - DO NOT EDIT.
#
# The raw Julia binding of koila: one function per function of the C API, written by
# bindings/julia/Koila.jl/gen/generate.py from include/koila.h.
# Header sha256: c0c3fd89ca64485cd5c31b53e98d8bf7f6b0dd6a3bace5be8fb0fecdb1a5a942
#
# To regenerate after changing the header, from the repository root:
#     python3 bindings/julia/Koila.jl/gen/generate.py
# and check that it is current with:
#     python3 bindings/julia/Koila.jl/gen/generate.py --check
#
# Calls go through function pointers resolved from the library when the module loads
# (see load_libkoila), so the library's location may be chosen at run time. These
# functions do no checking of their own: they are the C API, with its pointers. Use the
# Koila module for the safe interface.
module LibKoila

const Libdl = Base.Libc.Libdl

"""
    libkoila_path() -> String

Where the koila shared library is taken from, in order: the environment variable
`KOILA_LIB` (the full path of the library file), `KOILA_LIB_DIR` (the directory that holds
`libkoila.so` / `libkoila.dylib` / `koila.dll`), else `Libdl.find_library` on the system
search path (`LD_LIBRARY_PATH`, `DYLD_LIBRARY_PATH`, `PATH`, the loader's cache).
"""
function libkoila_path()
    lib = get(ENV, "KOILA_LIB", "")
    if !isempty(lib)
        isfile(lib) || error("Koila: KOILA_LIB is set to \"$lib\", which is not a file")
        return lib
    end
    dir = get(ENV, "KOILA_LIB_DIR", "")
    if !isempty(dir)
        isdir(dir) || error("Koila: KOILA_LIB_DIR is set to \"$dir\", which is not a directory")
        for name in ("libkoila." * Libdl.dlext, "koila." * Libdl.dlext,
                     "libkoila." * Libdl.dlext * "." * string(KOILA_VERSION_MAJOR))
            path = joinpath(dir, name)
            isfile(path) && return path
        end
        error("Koila: KOILA_LIB_DIR is set to \"$dir\", but it holds no libkoila." * Libdl.dlext)
    end
    lib = Libdl.find_library(["libkoila", "koila"])
    isempty(lib) && error("Koila: cannot find the koila shared library. Set KOILA_LIB to the " *
                          "full path of libkoila." * Libdl.dlext * " (or KOILA_LIB_DIR to its " *
                          "directory), or put its directory on the system library search path.")
    return lib
end

const libkoila_handle = Ref{Ptr{Cvoid}}(C_NULL)
const libkoila_loaded_from = Ref{String}("")

@noinline function _not_loaded(name::Symbol)
    error("Koila: $name called before the koila library was loaded (see the error that " *
          "`using Koila` reported)")
end

"""
    load_libkoila(path = libkoila_path())

Opens the koila shared library and resolves every function of koila.h in it. Runs when the
module is loaded; fails with an error naming the path and every missing function.
"""
function load_libkoila(path::AbstractString = libkoila_path())
    handle = try
        Libdl.dlopen(path)
    catch err
        error("Koila: cannot load the koila library \"$path\": " * sprint(showerror, err))
    end
    pointers = Vector{Ptr{Cvoid}}(undef, length(_FUNCTIONS))
    missing_names = Symbol[]
    for (k, (name, _)) in enumerate(_FUNCTIONS)
        p = Libdl.dlsym_e(handle, name)
        p == C_NULL && push!(missing_names, name)
        pointers[k] = p
    end
    isempty(missing_names) ||
        error("Koila: the library \"$path\" lacks $(length(missing_names)) function(s) of koila.h " *
              "(is it older than the header?): " * join(string.(missing_names), ", "))
    for (k, (_, ref)) in enumerate(_FUNCTIONS)
        ref[] = pointers[k]
    end
    libkoila_handle[] = handle
    libkoila_loaded_from[] = String(path)
    version = unsafe_string(koila_version())
    major = tryparse(Int, first(split(version, '.')))
    if major != KOILA_VERSION_MAJOR
        error("Koila: the library \"$path\" is version $version, but this binding was generated " *
              "from koila.h $(KOILA_VERSION_MAJOR).$(KOILA_VERSION_MINOR).$(KOILA_VERSION_PATCH)")
    end
    return path
end

function __init__()
    load_libkoila()
end

# ----------------------------------------------------------------------------------------
# Constants (#define)
# ----------------------------------------------------------------------------------------

const KOILA_VERSION_MAJOR = 0
const KOILA_VERSION_MINOR = 1
const KOILA_VERSION_PATCH = 0
const KOILA_NO_BATCH = typemin(Int64)

# ----------------------------------------------------------------------------------------
# Opaque handles: only ever seen through pointers
# ----------------------------------------------------------------------------------------

mutable struct koila_tensor end
mutable struct koila_status end
mutable struct koila_plan end
mutable struct koila_module end
mutable struct koila_optimizer end
mutable struct koila_group end
mutable struct koila_timeline end

# ----------------------------------------------------------------------------------------
# Enums: C enums are int-sized, hence Cint
# ----------------------------------------------------------------------------------------

@enum koila_code::Cint begin
    KOILA_OK = 0
    KOILA_ERROR_INVALID_ARGUMENT = 1
    KOILA_ERROR_SHAPE = 2
    KOILA_ERROR_DTYPE = 3
    KOILA_ERROR_DEVICE = 4
    KOILA_ERROR_OUT_OF_MEMORY = 5
    KOILA_ERROR_NOT_SPLITTABLE = 6
    KOILA_ERROR_IO = 7
    KOILA_ERROR_UNSUPPORTED = 8
    KOILA_ERROR_INTERNAL = 9
end

@enum koila_dtype::Cint begin
    KOILA_FLOAT32 = 0
    KOILA_FLOAT64 = 1
    KOILA_FLOAT16 = 2
    KOILA_BFLOAT16 = 3
    KOILA_INT64 = 4
    KOILA_INT32 = 5
    KOILA_INT8 = 6
    KOILA_UINT8 = 7
    KOILA_BOOL = 8
end

@enum koila_reduction::Cint begin
    KOILA_REDUCTION_NONE = 0
    KOILA_REDUCTION_MEAN = 1
    KOILA_REDUCTION_SUM = 2
end

@enum koila_mode::Cint begin
    KOILA_MODE_FORWARD = 0
    KOILA_MODE_TRAINING = 1
end

@enum koila_phase::Cint begin
    KOILA_PHASE_FORWARD = 0
    KOILA_PHASE_BACKWARD = 1
end

@enum koila_memory_part::Cint begin
    KOILA_PART_IN_USE = 0
    KOILA_PART_ACTIVATIONS = 1
    KOILA_PART_GRADIENTS = 2
    KOILA_PART_TEMPORARIES = 3
    KOILA_PART_BEYOND_SIMULATION = 4
end

@enum koila_batch_stats::Cint begin
    KOILA_BATCH_STATS_EXACT = 0
    KOILA_BATCH_STATS_PER_CHUNK = 1
end

@enum koila_chunking::Cint begin
    KOILA_CHUNK_LARGEST = 0
    KOILA_CHUNK_FASTEST = 1
end

@enum koila_recompute::Cint begin
    KOILA_RECOMPUTE_OFF = 0
    KOILA_RECOMPUTE_AS_NEEDED = 1
    KOILA_RECOMPUTE_PREFERRED = 2
end

@enum koila_module_kind::Cint begin
    KOILA_MODULE_TORCHSCRIPT = 0
    KOILA_MODULE_EXPORTED = 1
end

# ----------------------------------------------------------------------------------------
# Callbacks: C function pointers, passed as a @cfunction (a Ptr{Cvoid}) or C_NULL
# ----------------------------------------------------------------------------------------

"""
    koila_progress_fn

C: `typedef void (*koila_progress_fn)(void *user, const char *what, int64_t done, int64_t total);`

Called after each chunk of a planned evaluation or backward, on the thread running it; what is "forward" or "backward"; done counts 1..total. NULL fn turns it off.
"""
const koila_progress_fn = Ptr{Cvoid}

# ----------------------------------------------------------------------------------------
# Functions
# ----------------------------------------------------------------------------------------

const _fptr_koila_version = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_status_code = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_status_message = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_status_free = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_manual_seed = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_from_data = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_zeros = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_ones = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_randn = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_free = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_lazy = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_shape = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_dtype = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_batch_dim = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_is_lazy = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_to_host = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_item = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_to_string = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_eval = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_set_requires_grad = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_backward = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_grad = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_zero_grad = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_set_memory_budget = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_memory_budget = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_memory_stats = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_memory_reset_peak = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_new = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_batch_size = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_chunk_size = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_num_chunks = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_peak_bytes = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_full_peak_bytes = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_budget_bytes = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_needed_bytes = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_recomputed_bytes = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_full_needed_bytes = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_describe = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_free = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_plan_timeline = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_timeline_length = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_timeline_op = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_timeline_phase = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_timeline_chunk = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_timeline_live_bytes = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_timeline_peak_bytes = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_timeline_peak_index = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_timeline_part = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_timeline_free = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_set_batch_stats = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_set_chunking = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_set_recompute = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_set_progress = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_add = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_sub = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_mul = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_div = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_pow = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_maximum = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_minimum = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_eq = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_ne = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_lt = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_le = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_gt = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_ge = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_add_scalar = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_sub_scalar = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_mul_scalar = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_div_scalar = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_pow_scalar = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_neg = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_abs = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_exp = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_log = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_sqrt = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_rsqrt = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_sin = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_cos = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tanh = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_sigmoid = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_relu = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_gelu = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_silu = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_erf = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_hardswish = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_leaky_relu = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_clamp = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_softmax = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_log_softmax = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_dropout = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_matmul = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_linear = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_conv1d = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_conv2d = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_max_pool2d = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_avg_pool2d = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_adaptive_avg_pool2d = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_upsample_nearest2d = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_batch_norm = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_layer_norm = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_embedding = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_sum = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_mean = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_amax = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_amin = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_argmax = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_reshape = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_permute = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_transpose = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_flatten = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_squeeze = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_unsqueeze = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_cat = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_stack = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_narrow = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_index_select = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_cross_entropy = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_nll_loss = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_mse_loss = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_l1_loss = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_binary_cross_entropy_with_logits = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_scaled_dot_product_attention = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_load = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_save = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_forward = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_train = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_is_training = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_num_parameters = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_parameter = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_parameter_name = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_free = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_kind_of = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_num_buffers = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_buffer = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_buffer_name = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_module_forward_all = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_sgd = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_adam = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_step = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_zero_grad = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_free = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_group_new = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_group_new_from_env = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_group_local_rank = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_group_rank = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_group_size = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_group_broadcast = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_group_backward = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_group_free = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_adamw = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_set_lr = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_lr = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_save = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_optimizer_load = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_rng_save = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_rng_load = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_clip_grad_norm = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_from_dlpack = Ref{Ptr{Cvoid}}(C_NULL)
const _fptr_koila_tensor_to_dlpack = Ref{Ptr{Cvoid}}(C_NULL)

# Every function of koila.h, with the slot its address is stored in by load_libkoila.
const _FUNCTIONS = (
    (:koila_version, _fptr_koila_version),
    (:koila_status_code, _fptr_koila_status_code),
    (:koila_status_message, _fptr_koila_status_message),
    (:koila_status_free, _fptr_koila_status_free),
    (:koila_manual_seed, _fptr_koila_manual_seed),
    (:koila_tensor_from_data, _fptr_koila_tensor_from_data),
    (:koila_tensor_zeros, _fptr_koila_tensor_zeros),
    (:koila_tensor_ones, _fptr_koila_tensor_ones),
    (:koila_tensor_randn, _fptr_koila_tensor_randn),
    (:koila_tensor_free, _fptr_koila_tensor_free),
    (:koila_lazy, _fptr_koila_lazy),
    (:koila_tensor_shape, _fptr_koila_tensor_shape),
    (:koila_tensor_dtype, _fptr_koila_tensor_dtype),
    (:koila_tensor_batch_dim, _fptr_koila_tensor_batch_dim),
    (:koila_tensor_is_lazy, _fptr_koila_tensor_is_lazy),
    (:koila_tensor_to_host, _fptr_koila_tensor_to_host),
    (:koila_tensor_item, _fptr_koila_tensor_item),
    (:koila_tensor_to_string, _fptr_koila_tensor_to_string),
    (:koila_eval, _fptr_koila_eval),
    (:koila_tensor_set_requires_grad, _fptr_koila_tensor_set_requires_grad),
    (:koila_backward, _fptr_koila_backward),
    (:koila_tensor_grad, _fptr_koila_tensor_grad),
    (:koila_tensor_zero_grad, _fptr_koila_tensor_zero_grad),
    (:koila_set_memory_budget, _fptr_koila_set_memory_budget),
    (:koila_memory_budget, _fptr_koila_memory_budget),
    (:koila_memory_stats, _fptr_koila_memory_stats),
    (:koila_memory_reset_peak, _fptr_koila_memory_reset_peak),
    (:koila_plan_new, _fptr_koila_plan_new),
    (:koila_plan_batch_size, _fptr_koila_plan_batch_size),
    (:koila_plan_chunk_size, _fptr_koila_plan_chunk_size),
    (:koila_plan_num_chunks, _fptr_koila_plan_num_chunks),
    (:koila_plan_peak_bytes, _fptr_koila_plan_peak_bytes),
    (:koila_plan_full_peak_bytes, _fptr_koila_plan_full_peak_bytes),
    (:koila_plan_budget_bytes, _fptr_koila_plan_budget_bytes),
    (:koila_plan_needed_bytes, _fptr_koila_plan_needed_bytes),
    (:koila_plan_recomputed_bytes, _fptr_koila_plan_recomputed_bytes),
    (:koila_plan_full_needed_bytes, _fptr_koila_plan_full_needed_bytes),
    (:koila_plan_describe, _fptr_koila_plan_describe),
    (:koila_plan_free, _fptr_koila_plan_free),
    (:koila_plan_timeline, _fptr_koila_plan_timeline),
    (:koila_timeline_length, _fptr_koila_timeline_length),
    (:koila_timeline_op, _fptr_koila_timeline_op),
    (:koila_timeline_phase, _fptr_koila_timeline_phase),
    (:koila_timeline_chunk, _fptr_koila_timeline_chunk),
    (:koila_timeline_live_bytes, _fptr_koila_timeline_live_bytes),
    (:koila_timeline_peak_bytes, _fptr_koila_timeline_peak_bytes),
    (:koila_timeline_peak_index, _fptr_koila_timeline_peak_index),
    (:koila_timeline_part, _fptr_koila_timeline_part),
    (:koila_timeline_free, _fptr_koila_timeline_free),
    (:koila_set_batch_stats, _fptr_koila_set_batch_stats),
    (:koila_set_chunking, _fptr_koila_set_chunking),
    (:koila_set_recompute, _fptr_koila_set_recompute),
    (:koila_set_progress, _fptr_koila_set_progress),
    (:koila_add, _fptr_koila_add),
    (:koila_sub, _fptr_koila_sub),
    (:koila_mul, _fptr_koila_mul),
    (:koila_div, _fptr_koila_div),
    (:koila_pow, _fptr_koila_pow),
    (:koila_maximum, _fptr_koila_maximum),
    (:koila_minimum, _fptr_koila_minimum),
    (:koila_eq, _fptr_koila_eq),
    (:koila_ne, _fptr_koila_ne),
    (:koila_lt, _fptr_koila_lt),
    (:koila_le, _fptr_koila_le),
    (:koila_gt, _fptr_koila_gt),
    (:koila_ge, _fptr_koila_ge),
    (:koila_add_scalar, _fptr_koila_add_scalar),
    (:koila_sub_scalar, _fptr_koila_sub_scalar),
    (:koila_mul_scalar, _fptr_koila_mul_scalar),
    (:koila_div_scalar, _fptr_koila_div_scalar),
    (:koila_pow_scalar, _fptr_koila_pow_scalar),
    (:koila_neg, _fptr_koila_neg),
    (:koila_abs, _fptr_koila_abs),
    (:koila_exp, _fptr_koila_exp),
    (:koila_log, _fptr_koila_log),
    (:koila_sqrt, _fptr_koila_sqrt),
    (:koila_rsqrt, _fptr_koila_rsqrt),
    (:koila_sin, _fptr_koila_sin),
    (:koila_cos, _fptr_koila_cos),
    (:koila_tanh, _fptr_koila_tanh),
    (:koila_sigmoid, _fptr_koila_sigmoid),
    (:koila_relu, _fptr_koila_relu),
    (:koila_gelu, _fptr_koila_gelu),
    (:koila_silu, _fptr_koila_silu),
    (:koila_erf, _fptr_koila_erf),
    (:koila_hardswish, _fptr_koila_hardswish),
    (:koila_leaky_relu, _fptr_koila_leaky_relu),
    (:koila_clamp, _fptr_koila_clamp),
    (:koila_softmax, _fptr_koila_softmax),
    (:koila_log_softmax, _fptr_koila_log_softmax),
    (:koila_dropout, _fptr_koila_dropout),
    (:koila_matmul, _fptr_koila_matmul),
    (:koila_linear, _fptr_koila_linear),
    (:koila_conv1d, _fptr_koila_conv1d),
    (:koila_conv2d, _fptr_koila_conv2d),
    (:koila_max_pool2d, _fptr_koila_max_pool2d),
    (:koila_avg_pool2d, _fptr_koila_avg_pool2d),
    (:koila_adaptive_avg_pool2d, _fptr_koila_adaptive_avg_pool2d),
    (:koila_upsample_nearest2d, _fptr_koila_upsample_nearest2d),
    (:koila_batch_norm, _fptr_koila_batch_norm),
    (:koila_layer_norm, _fptr_koila_layer_norm),
    (:koila_embedding, _fptr_koila_embedding),
    (:koila_sum, _fptr_koila_sum),
    (:koila_mean, _fptr_koila_mean),
    (:koila_amax, _fptr_koila_amax),
    (:koila_amin, _fptr_koila_amin),
    (:koila_argmax, _fptr_koila_argmax),
    (:koila_reshape, _fptr_koila_reshape),
    (:koila_permute, _fptr_koila_permute),
    (:koila_transpose, _fptr_koila_transpose),
    (:koila_flatten, _fptr_koila_flatten),
    (:koila_squeeze, _fptr_koila_squeeze),
    (:koila_unsqueeze, _fptr_koila_unsqueeze),
    (:koila_cat, _fptr_koila_cat),
    (:koila_stack, _fptr_koila_stack),
    (:koila_narrow, _fptr_koila_narrow),
    (:koila_index_select, _fptr_koila_index_select),
    (:koila_cross_entropy, _fptr_koila_cross_entropy),
    (:koila_nll_loss, _fptr_koila_nll_loss),
    (:koila_mse_loss, _fptr_koila_mse_loss),
    (:koila_l1_loss, _fptr_koila_l1_loss),
    (:koila_binary_cross_entropy_with_logits, _fptr_koila_binary_cross_entropy_with_logits),
    (:koila_scaled_dot_product_attention, _fptr_koila_scaled_dot_product_attention),
    (:koila_module_load, _fptr_koila_module_load),
    (:koila_module_save, _fptr_koila_module_save),
    (:koila_module_forward, _fptr_koila_module_forward),
    (:koila_module_train, _fptr_koila_module_train),
    (:koila_module_is_training, _fptr_koila_module_is_training),
    (:koila_module_num_parameters, _fptr_koila_module_num_parameters),
    (:koila_module_parameter, _fptr_koila_module_parameter),
    (:koila_module_parameter_name, _fptr_koila_module_parameter_name),
    (:koila_module_free, _fptr_koila_module_free),
    (:koila_module_kind_of, _fptr_koila_module_kind_of),
    (:koila_module_num_buffers, _fptr_koila_module_num_buffers),
    (:koila_module_buffer, _fptr_koila_module_buffer),
    (:koila_module_buffer_name, _fptr_koila_module_buffer_name),
    (:koila_module_forward_all, _fptr_koila_module_forward_all),
    (:koila_optimizer_sgd, _fptr_koila_optimizer_sgd),
    (:koila_optimizer_adam, _fptr_koila_optimizer_adam),
    (:koila_optimizer_step, _fptr_koila_optimizer_step),
    (:koila_optimizer_zero_grad, _fptr_koila_optimizer_zero_grad),
    (:koila_optimizer_free, _fptr_koila_optimizer_free),
    (:koila_group_new, _fptr_koila_group_new),
    (:koila_group_new_from_env, _fptr_koila_group_new_from_env),
    (:koila_group_local_rank, _fptr_koila_group_local_rank),
    (:koila_group_rank, _fptr_koila_group_rank),
    (:koila_group_size, _fptr_koila_group_size),
    (:koila_group_broadcast, _fptr_koila_group_broadcast),
    (:koila_group_backward, _fptr_koila_group_backward),
    (:koila_group_free, _fptr_koila_group_free),
    (:koila_optimizer_adamw, _fptr_koila_optimizer_adamw),
    (:koila_optimizer_set_lr, _fptr_koila_optimizer_set_lr),
    (:koila_optimizer_lr, _fptr_koila_optimizer_lr),
    (:koila_optimizer_save, _fptr_koila_optimizer_save),
    (:koila_optimizer_load, _fptr_koila_optimizer_load),
    (:koila_rng_save, _fptr_koila_rng_save),
    (:koila_rng_load, _fptr_koila_rng_load),
    (:koila_clip_grad_norm, _fptr_koila_clip_grad_norm),
    (:koila_tensor_from_dlpack, _fptr_koila_tensor_from_dlpack),
    (:koila_tensor_to_dlpack, _fptr_koila_tensor_to_dlpack),
)

"""
    koila_version() -> Cstring

C: `const char *koila_version(void);`

"0.1.0". Static storage; never freed.
"""
function koila_version()
    fptr = _fptr_koila_version[]
    fptr == C_NULL && _not_loaded(:koila_version)
    ccall(fptr, Cstring, ())
end

"""
    koila_status_code(s) -> koila_code

C: `koila_code koila_status_code(const koila_status *s);`

The code of a status; NULL (success) gives KOILA_OK.
"""
function koila_status_code(s)
    fptr = _fptr_koila_status_code[]
    fptr == C_NULL && _not_loaded(:koila_status_code)
    ccall(fptr, koila_code, (Ptr{koila_status},), s)
end

"""
    koila_status_message(s) -> Cstring

C: `const char *koila_status_message(const koila_status *s);`

The message of a status; NULL gives "". Valid until the status is freed.
"""
function koila_status_message(s)
    fptr = _fptr_koila_status_message[]
    fptr == C_NULL && _not_loaded(:koila_status_message)
    ccall(fptr, Cstring, (Ptr{koila_status},), s)
end

"""
    koila_status_free(s) -> Cvoid

C: `void koila_status_free(koila_status *s);`
"""
function koila_status_free(s)
    fptr = _fptr_koila_status_free[]
    fptr == C_NULL && _not_loaded(:koila_status_free)
    ccall(fptr, Cvoid, (Ptr{koila_status},), s)
end

"""
    koila_manual_seed(seed) -> Ptr{koila_status}

C: `koila_status *koila_manual_seed(uint64_t seed);`

Seeds every random generator koila uses (randn, dropout) on every device.
"""
function koila_manual_seed(seed)
    fptr = _fptr_koila_manual_seed[]
    fptr == C_NULL && _not_loaded(:koila_manual_seed)
    ccall(fptr, Ptr{koila_status}, (UInt64,), seed)
end

"""
    koila_tensor_from_data(out, data, nbytes, dtype, shape, ndim, device) -> Ptr{koila_status}

C: `koila_status *koila_tensor_from_data(koila_tensor **out, const void *data, size_t nbytes, koila_dtype dtype, const int64_t *shape, size_t ndim, const char *device);`

A concrete tensor holding a copy of `data` (row-major, nbytes == numel * element size). `shape` may be NULL when ndim is 0 (a scalar); `data` may be NULL when numel is 0.
"""
function koila_tensor_from_data(out, data, nbytes, dtype, shape, ndim, device)
    fptr = _fptr_koila_tensor_from_data[]
    fptr == C_NULL && _not_loaded(:koila_tensor_from_data)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{Cvoid}, Csize_t, koila_dtype, Ptr{Int64}, Csize_t, Cstring), out, data, nbytes, dtype, shape, ndim, device)
end

"""
    koila_tensor_zeros(out, shape, ndim, dtype, device) -> Ptr{koila_status}

C: `koila_status *koila_tensor_zeros(koila_tensor **out, const int64_t *shape, size_t ndim, koila_dtype dtype, const char *device);`
"""
function koila_tensor_zeros(out, shape, ndim, dtype, device)
    fptr = _fptr_koila_tensor_zeros[]
    fptr == C_NULL && _not_loaded(:koila_tensor_zeros)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{Int64}, Csize_t, koila_dtype, Cstring), out, shape, ndim, dtype, device)
end

"""
    koila_tensor_ones(out, shape, ndim, dtype, device) -> Ptr{koila_status}

C: `koila_status *koila_tensor_ones(koila_tensor **out, const int64_t *shape, size_t ndim, koila_dtype dtype, const char *device);`
"""
function koila_tensor_ones(out, shape, ndim, dtype, device)
    fptr = _fptr_koila_tensor_ones[]
    fptr == C_NULL && _not_loaded(:koila_tensor_ones)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{Int64}, Csize_t, koila_dtype, Cstring), out, shape, ndim, dtype, device)
end

"""
    koila_tensor_randn(out, shape, ndim, dtype, device) -> Ptr{koila_status}

C: `koila_status *koila_tensor_randn(koila_tensor **out, const int64_t *shape, size_t ndim, koila_dtype dtype, const char *device);`

Standard normal samples; floating dtypes only (KOILA_ERROR_DTYPE otherwise).
"""
function koila_tensor_randn(out, shape, ndim, dtype, device)
    fptr = _fptr_koila_tensor_randn[]
    fptr == C_NULL && _not_loaded(:koila_tensor_randn)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{Int64}, Csize_t, koila_dtype, Cstring), out, shape, ndim, dtype, device)
end

"""
    koila_tensor_free(t) -> Cvoid

C: `void koila_tensor_free(koila_tensor *t);`
"""
function koila_tensor_free(t)
    fptr = _fptr_koila_tensor_free[]
    fptr == C_NULL && _not_loaded(:koila_tensor_free)
    ccall(fptr, Cvoid, (Ptr{koila_tensor},), t)
end

"""
    koila_lazy(out, t, batch_dim) -> Ptr{koila_status}

C: `koila_status *koila_lazy(koila_tensor **out, const koila_tensor *t, int64_t batch_dim);`

The one line: wrap a tensor so that everything computed from it is deferred, and dimension batch_dim is the batch that may be split. batch_dim may be negative (counts from the end) or KOILA_NO_BATCH. The lazy tensor reads the current values of `t` every time it is evaluated (it does not copy them). Wrapping a lazy tensor again is allowed only with the same batch dim (the result is the same recipe).
"""
function koila_lazy(out, t, batch_dim)
    fptr = _fptr_koila_lazy[]
    fptr == C_NULL && _not_loaded(:koila_lazy)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64), out, t, batch_dim)
end

"""
    koila_tensor_shape(t, dims, capacity, ndim) -> Ptr{koila_status}

C: `koila_status *koila_tensor_shape(const koila_tensor *t, int64_t *dims, size_t capacity, size_t *ndim);`

Metadata: never evaluates anything. Writes the rank to *ndim and the first min(ndim, capacity) sizes to dims.
"""
function koila_tensor_shape(t, dims, capacity, ndim)
    fptr = _fptr_koila_tensor_shape[]
    fptr == C_NULL && _not_loaded(:koila_tensor_shape)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor}, Ptr{Int64}, Csize_t, Ptr{Csize_t}), t, dims, capacity, ndim)
end

"""
    koila_tensor_dtype(t, out) -> Ptr{koila_status}

C: `koila_status *koila_tensor_dtype(const koila_tensor *t, koila_dtype *out);`
"""
function koila_tensor_dtype(t, out)
    fptr = _fptr_koila_tensor_dtype[]
    fptr == C_NULL && _not_loaded(:koila_tensor_dtype)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor}, Ptr{koila_dtype}), t, out)
end

"""
    koila_tensor_batch_dim(t, out) -> Ptr{koila_status}

C: `koila_status *koila_tensor_batch_dim(const koila_tensor *t, int64_t *out);`

The dim that carries the batch, or -1 when the tensor has none.
"""
function koila_tensor_batch_dim(t, out)
    fptr = _fptr_koila_tensor_batch_dim[]
    fptr == C_NULL && _not_loaded(:koila_tensor_batch_dim)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor}, Ptr{Int64}), t, out)
end

"""
    koila_tensor_is_lazy(t, out) -> Ptr{koila_status}

C: `koila_status *koila_tensor_is_lazy(const koila_tensor *t, int *out);`
"""
function koila_tensor_is_lazy(t, out)
    fptr = _fptr_koila_tensor_is_lazy[]
    fptr == C_NULL && _not_loaded(:koila_tensor_is_lazy)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor}, Ptr{Cint}), t, out)
end

"""
    koila_tensor_to_host(t, data, nbytes) -> Ptr{koila_status}

C: `koila_status *koila_tensor_to_host(const koila_tensor *t, void *data, size_t nbytes);`

Reading values evaluates (split into chunks when the budget requires it). Reads do not record gradients. nbytes must equal numel * element size; data is written row-major.
"""
function koila_tensor_to_host(t, data, nbytes)
    fptr = _fptr_koila_tensor_to_host[]
    fptr == C_NULL && _not_loaded(:koila_tensor_to_host)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor}, Ptr{Cvoid}, Csize_t), t, data, nbytes)
end

"""
    koila_tensor_item(t, out) -> Ptr{koila_status}

C: `koila_status *koila_tensor_item(const koila_tensor *t, double *out);`

The value of a one-element tensor (any dtype) as a double.
"""
function koila_tensor_item(t, out)
    fptr = _fptr_koila_tensor_item[]
    fptr == C_NULL && _not_loaded(:koila_tensor_item)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor}, Ptr{Cdouble}), t, out)
end

"""
    koila_tensor_to_string(t, buf, capacity, needed) -> Ptr{koila_status}

C: `koila_status *koila_tensor_to_string(const koila_tensor *t, char *buf, size_t capacity, size_t *needed);`

The tensor printed as LibTorch prints it.
"""
function koila_tensor_to_string(t, buf, capacity, needed)
    fptr = _fptr_koila_tensor_to_string[]
    fptr == C_NULL && _not_loaded(:koila_tensor_to_string)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor}, Ptr{UInt8}, Csize_t, Ptr{Csize_t}), t, buf, capacity, needed)
end

"""
    koila_eval(out, t) -> Ptr{koila_status}

C: `koila_status *koila_eval(koila_tensor **out, const koila_tensor *t);`

A concrete tensor with the value of t (t itself, shared, when t is already concrete). The result of evaluating a lazy tensor does not require grad: train through koila_backward on the lazy loss.
"""
function koila_eval(out, t)
    fptr = _fptr_koila_eval[]
    fptr == C_NULL && _not_loaded(:koila_eval)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, t)
end

"""
    koila_tensor_set_requires_grad(t, flag) -> Ptr{koila_status}

C: `koila_status *koila_tensor_set_requires_grad(koila_tensor *t, int flag);`

Concrete floating-point leaves only (parameters). Lazy tensors are refused: gradients of a lazy graph flow to the concrete leaves it was built from.
"""
function koila_tensor_set_requires_grad(t, flag)
    fptr = _fptr_koila_tensor_set_requires_grad[]
    fptr == C_NULL && _not_loaded(:koila_tensor_set_requires_grad)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor}, Cint), t, flag)
end

"""
    koila_backward(loss) -> Ptr{koila_status}

C: `koila_status *koila_backward(const koila_tensor *loss);`

Backward from a scalar loss. With a lazy batch, runs forward+backward chunk by chunk under the memory budget and accumulates gradients so that they equal the full-batch gradients (mean and sum reductions over the batch are scaled exactly, also for uneven chunks). Gradients add into existing .grad, as in PyTorch. A lazy loss may be backpropagated any number of times (each call evaluates it again); a failed call leaves every gradient as it was. Where a weight already has a .grad (every chunk after the first, or a .grad zeroed in place), linear layers add their weight gradient into it inside the matrix product, and in chunked runs convolutions add theirs in eighths of their output channels, instead of making a whole new gradient first (values equal up to float rounding); koila's ops and the linear and convolution layers of modules alike.
"""
function koila_backward(loss)
    fptr = _fptr_koila_backward[]
    fptr == C_NULL && _not_loaded(:koila_backward)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor},), loss)
end

"""
    koila_tensor_grad(out, t) -> Ptr{koila_status}

C: `koila_status *koila_tensor_grad(koila_tensor **out, const koila_tensor *t);`

The gradient of a concrete leaf (or of the tensor a lazy input wraps); *out is NULL when there is none. The returned tensor aliases the gradient.
"""
function koila_tensor_grad(out, t)
    fptr = _fptr_koila_tensor_grad[]
    fptr == C_NULL && _not_loaded(:koila_tensor_grad)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, t)
end

"""
    koila_tensor_zero_grad(t) -> Ptr{koila_status}

C: `koila_status *koila_tensor_zero_grad(koila_tensor *t);`

Sets an existing gradient to zero in place (handles from koila_tensor_grad see it).
"""
function koila_tensor_zero_grad(t)
    fptr = _fptr_koila_tensor_zero_grad[]
    fptr == C_NULL && _not_loaded(:koila_tensor_zero_grad)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_tensor},), t)
end

"""
    koila_set_memory_budget(device, bytes) -> Ptr{koila_status}

C: `koila_status *koila_set_memory_budget(const char *device, uint64_t bytes);`

Bytes koila may use on a device ("cpu", "cuda", "cuda:N"). 0 = automatic: what is in use plus the device's free memory (for CPU what the kernel reports available, within any cgroup limit; for CUDA what the driver reports free plus what the caching allocator holds unused), less a tenth of that free memory as a safety margin. The CPU's figure is read from the kernel at most every 50 ms (a reading costs as much as planning a small step); in between it follows what koila's own tensors take and give back. Thread-safe.
"""
function koila_set_memory_budget(device, bytes)
    fptr = _fptr_koila_set_memory_budget[]
    fptr == C_NULL && _not_loaded(:koila_set_memory_budget)
    ccall(fptr, Ptr{koila_status}, (Cstring, UInt64), device, bytes)
end

"""
    koila_memory_budget(device, out) -> Ptr{koila_status}

C: `koila_status *koila_memory_budget(const char *device, uint64_t *out);`

The budget in force (the automatic one resolved now).
"""
function koila_memory_budget(device, out)
    fptr = _fptr_koila_memory_budget[]
    fptr == C_NULL && _not_loaded(:koila_memory_budget)
    ccall(fptr, Ptr{koila_status}, (Cstring, Ptr{UInt64}), device, out)
end

"""
    koila_memory_stats(device, current, peak) -> Ptr{koila_status}

C: `koila_status *koila_memory_stats(const char *device, uint64_t *current, uint64_t *peak);`

Bytes held by tensors on the device now and the most held at once since the last reset. CPU allocations are counted by koila's tracking allocator (installed when the library loads); CUDA figures come from LibTorch's caching allocator. Either pointer may be NULL.
"""
function koila_memory_stats(device, current, peak)
    fptr = _fptr_koila_memory_stats[]
    fptr == C_NULL && _not_loaded(:koila_memory_stats)
    ccall(fptr, Ptr{koila_status}, (Cstring, Ptr{UInt64}, Ptr{UInt64}), device, current, peak)
end

"""
    koila_memory_reset_peak(device) -> Ptr{koila_status}

C: `koila_status *koila_memory_reset_peak(const char *device);`
"""
function koila_memory_reset_peak(device)
    fptr = _fptr_koila_memory_reset_peak[]
    fptr == C_NULL && _not_loaded(:koila_memory_reset_peak)
    ccall(fptr, Ptr{koila_status}, (Cstring,), device)
end

"""
    koila_plan_new(out, t, mode) -> Ptr{koila_status}

C: `koila_status *koila_plan_new(koila_plan **out, const koila_tensor *t, koila_mode mode);`

What evaluating t (KOILA_MODE_FORWARD) or a backward from t (KOILA_MODE_TRAINING) would do now, without running it. Fails as the run would: KOILA_ERROR_OUT_OF_MEMORY when not even a chunk of one sample fits, KOILA_ERROR_NOT_SPLITTABLE (naming the op) when the graph mixes samples across the batch and does not fit unsplit; the message is the plan's description.
"""
function koila_plan_new(out, t, mode)
    fptr = _fptr_koila_plan_new[]
    fptr == C_NULL && _not_loaded(:koila_plan_new)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_plan}}, Ptr{koila_tensor}, koila_mode), out, t, mode)
end

"""
    koila_plan_batch_size(p) -> Int64

C: `int64_t koila_plan_batch_size(const koila_plan *p);`

-1 when t has no lazy batch.
"""
function koila_plan_batch_size(p)
    fptr = _fptr_koila_plan_batch_size[]
    fptr == C_NULL && _not_loaded(:koila_plan_batch_size)
    ccall(fptr, Int64, (Ptr{koila_plan},), p)
end

"""
    koila_plan_chunk_size(p) -> Int64

C: `int64_t koila_plan_chunk_size(const koila_plan *p);`

The largest chunk: a power of two, or the whole batch when it fits (-1: no batch).
"""
function koila_plan_chunk_size(p)
    fptr = _fptr_koila_plan_chunk_size[]
    fptr == C_NULL && _not_loaded(:koila_plan_chunk_size)
    ccall(fptr, Int64, (Ptr{koila_plan},), p)
end

"""
    koila_plan_num_chunks(p) -> Int64

C: `int64_t koila_plan_num_chunks(const koila_plan *p);`

1 when the whole batch runs at once.
"""
function koila_plan_num_chunks(p)
    fptr = _fptr_koila_plan_num_chunks[]
    fptr == C_NULL && _not_loaded(:koila_plan_num_chunks)
    ccall(fptr, Int64, (Ptr{koila_plan},), p)
end

"""
    koila_plan_peak_bytes(p) -> UInt64

C: `uint64_t koila_plan_peak_bytes(const koila_plan *p);`

Estimated peak bytes on the device during the planned run, usage before it included.
"""
function koila_plan_peak_bytes(p)
    fptr = _fptr_koila_plan_peak_bytes[]
    fptr == C_NULL && _not_loaded(:koila_plan_peak_bytes)
    ccall(fptr, UInt64, (Ptr{koila_plan},), p)
end

"""
    koila_plan_full_peak_bytes(p) -> UInt64

C: `uint64_t koila_plan_full_peak_bytes(const koila_plan *p);`

Estimated peak bytes if the batch ran unsplit.
"""
function koila_plan_full_peak_bytes(p)
    fptr = _fptr_koila_plan_full_peak_bytes[]
    fptr == C_NULL && _not_loaded(:koila_plan_full_peak_bytes)
    ccall(fptr, UInt64, (Ptr{koila_plan},), p)
end

"""
    koila_plan_budget_bytes(p) -> UInt64

C: `uint64_t koila_plan_budget_bytes(const koila_plan *p);`
"""
function koila_plan_budget_bytes(p)
    fptr = _fptr_koila_plan_budget_bytes[]
    fptr == C_NULL && _not_loaded(:koila_plan_budget_bytes)
    ccall(fptr, UInt64, (Ptr{koila_plan},), p)
end

"""
    koila_plan_needed_bytes(p) -> UInt64

C: `uint64_t koila_plan_needed_bytes(const koila_plan *p);`

The budget the planned run needs: the bytes in use (and reserved by runs on other threads) when it was planned, plus its estimate with koila's margin, a tenth of the estimate, on top. The margin is for what an estimate cannot see: the allocator rounding sizes up, a kernel choosing another algorithm (and workspace) when it runs. On CUDA the need also has what the caching allocator reserves beyond the run's tensors (its segments and rounding, modelled on the run's simulated allocations; 22 MiB where the simulation cannot run), and what it holds unused when the plan is made in segments that also hold live tensors (PyTorch's "non-releasable" memory, which it cannot give back; not under expandable segments, whose free pages go back): koila's hard limit caps what that allocator reserves from the device, not only what tensors hold. A run fits when its need is at most the budget: a plan whose estimated peak (koila_plan_peak_bytes, without the margin) is below the budget may still not fit. koila_plan_describe and every refusal state the margin and the need.
"""
function koila_plan_needed_bytes(p)
    fptr = _fptr_koila_plan_needed_bytes[]
    fptr == C_NULL && _not_loaded(:koila_plan_needed_bytes)
    ccall(fptr, UInt64, (Ptr{koila_plan},), p)
end

"""
    koila_plan_recomputed_bytes(p) -> UInt64

C: `uint64_t koila_plan_recomputed_bytes(const koila_plan *p);`

Bytes of activations a chunk of the plan frees in its forward and recomputes in its backward (see koila_set_recompute); 0 when nothing is recomputed, and for NULL. koila_plan_describe names what is recomputed and its cost in extra forward work; koila_plan_timeline shows it in the backward.
"""
function koila_plan_recomputed_bytes(p)
    fptr = _fptr_koila_plan_recomputed_bytes[]
    fptr == C_NULL && _not_loaded(:koila_plan_recomputed_bytes)
    ccall(fptr, UInt64, (Ptr{koila_plan},), p)
end

"""
    koila_plan_full_needed_bytes(p) -> UInt64

C: `uint64_t koila_plan_full_needed_bytes(const koila_plan *p);`

The same if the batch ran unsplit. Under KOILA_CHUNK_LARGEST the batch is split (or the run refused, where it cannot be split) exactly when this exceeds the budget.
"""
function koila_plan_full_needed_bytes(p)
    fptr = _fptr_koila_plan_full_needed_bytes[]
    fptr == C_NULL && _not_loaded(:koila_plan_full_needed_bytes)
    ccall(fptr, UInt64, (Ptr{koila_plan},), p)
end

"""
    koila_plan_describe(p, buf, capacity, needed) -> Ptr{koila_status}

C: `koila_status *koila_plan_describe(const koila_plan *p, char *buf, size_t capacity, size_t *needed);`

A human-readable account: batch, chunk, chunks, estimated peak, budget, and why (e.g. which op prevents splitting). Text conventions as koila_tensor_to_string.
"""
function koila_plan_describe(p, buf, capacity, needed)
    fptr = _fptr_koila_plan_describe[]
    fptr == C_NULL && _not_loaded(:koila_plan_describe)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_plan}, Ptr{UInt8}, Csize_t, Ptr{Csize_t}), p, buf, capacity, needed)
end

"""
    koila_plan_free(p) -> Cvoid

C: `void koila_plan_free(koila_plan *p);`
"""
function koila_plan_free(p)
    fptr = _fptr_koila_plan_free[]
    fptr == C_NULL && _not_loaded(:koila_plan_free)
    ccall(fptr, Cvoid, (Ptr{koila_plan},), p)
end

"""
    koila_plan_timeline(out, p, unsplit) -> Ptr{koila_status}

C: `koila_status *koila_plan_timeline(koila_timeline **out, const koila_plan *p, int unsplit);`

The memory timeline of a plan: the simulation its estimate comes from, run again (nothing is computed) while every top-level operator is observed, giving the bytes on the device op by op through the forward and, for TRAINING, the backward. unsplit = 1: the whole batch at once; 0: the plan's chunks (the simulation follows the first two chunks, as the estimate does: the first creates the gradients, the second adds into them; the same as unsplit when the plan runs unsplit). Byte figures include what was in use when the plan was made. The largest peak of the events is the simulated part of the plan's estimate; what the estimate adds beyond the simulation (calibration by real probes, peaks of earlier runs) is KOILA_PART_BEYOND_SIMULATION, so that the parts of koila_timeline_part add up to koila_plan_peak_bytes (unsplit = 0) or koila_plan_full_peak_bytes (unsplit = 1). Simulated when called, with the gradients and parameters as they are then. Fails with KOILA_ERROR_UNSUPPORTED when the plan has nothing to simulate (a concrete value) or its figures were measured because the simulation fails (the message says why). Release with koila_timeline_free.
"""
function koila_plan_timeline(out, p, unsplit)
    fptr = _fptr_koila_plan_timeline[]
    fptr == C_NULL && _not_loaded(:koila_plan_timeline)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_timeline}}, Ptr{koila_plan}, Cint), out, p, unsplit)
end

"""
    koila_timeline_length(t, out) -> Ptr{koila_status}

C: `koila_status *koila_timeline_length(const koila_timeline *t, size_t *out);`

The number of events (at least 1).
"""
function koila_timeline_length(t, out)
    fptr = _fptr_koila_timeline_length[]
    fptr == C_NULL && _not_loaded(:koila_timeline_length)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_timeline}, Ptr{Csize_t}), t, out)
end

"""
    koila_timeline_op(t, i, buf, capacity, needed) -> Ptr{koila_status}

C: `koila_status *koila_timeline_op(const koila_timeline *t, size_t i, char *buf, size_t capacity, size_t *needed);`

Event i (0 <= i < length; KOILA_ERROR_INVALID_ARGUMENT otherwise): the operator's name ("aten::conv2d" in the forward, the autograd function such as "ConvolutionBackward0" in the backward; an op of a recomputed segment run again in the backward (koila_set_recompute) is named with " (recomputed)" after it, "aten::linear (recomputed)", in the backward phase, after the segment's "RecomputeBackward"; text conventions as koila_tensor_to_string), ...
"""
function koila_timeline_op(t, i, buf, capacity, needed)
    fptr = _fptr_koila_timeline_op[]
    fptr == C_NULL && _not_loaded(:koila_timeline_op)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_timeline}, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Csize_t}), t, i, buf, capacity, needed)
end

"""
    koila_timeline_phase(t, i, out) -> Ptr{koila_status}

C: `koila_status *koila_timeline_phase(const koila_timeline *t, size_t i, koila_phase *out);`

... its phase, ...
"""
function koila_timeline_phase(t, i, out)
    fptr = _fptr_koila_timeline_phase[]
    fptr == C_NULL && _not_loaded(:koila_timeline_phase)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_timeline}, Csize_t, Ptr{koila_phase}), t, i, out)
end

"""
    koila_timeline_chunk(t, i, out) -> Ptr{koila_status}

C: `koila_status *koila_timeline_chunk(const koila_timeline *t, size_t i, int64_t *out);`

... which chunk of the run it belongs to (0-based; 0 when unsplit), ...
"""
function koila_timeline_chunk(t, i, out)
    fptr = _fptr_koila_timeline_chunk[]
    fptr == C_NULL && _not_loaded(:koila_timeline_chunk)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_timeline}, Csize_t, Ptr{Int64}), t, i, out)
end

"""
    koila_timeline_live_bytes(t, i, out) -> Ptr{koila_status}

C: `koila_status *koila_timeline_live_bytes(const koila_timeline *t, size_t i, uint64_t *out);`

... the bytes held after it, ...
"""
function koila_timeline_live_bytes(t, i, out)
    fptr = _fptr_koila_timeline_live_bytes[]
    fptr == C_NULL && _not_loaded(:koila_timeline_live_bytes)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_timeline}, Csize_t, Ptr{UInt64}), t, i, out)
end

"""
    koila_timeline_peak_bytes(t, i, out) -> Ptr{koila_status}

C: `koila_status *koila_timeline_peak_bytes(const koila_timeline *t, size_t i, uint64_t *out);`

... and the most held while it ran (its temporaries included).
"""
function koila_timeline_peak_bytes(t, i, out)
    fptr = _fptr_koila_timeline_peak_bytes[]
    fptr == C_NULL && _not_loaded(:koila_timeline_peak_bytes)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_timeline}, Csize_t, Ptr{UInt64}), t, i, out)
end

"""
    koila_timeline_peak_index(t, out) -> Ptr{koila_status}

C: `koila_status *koila_timeline_peak_index(const koila_timeline *t, size_t *out);`

The event with the largest peak (the first of equals): where the simulated peak is.
"""
function koila_timeline_peak_index(t, out)
    fptr = _fptr_koila_timeline_peak_index[]
    fptr == C_NULL && _not_loaded(:koila_timeline_peak_index)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_timeline}, Ptr{Csize_t}), t, out)
end

"""
    koila_timeline_part(t, part, out) -> Ptr{koila_status}

C: `koila_status *koila_timeline_part(const koila_timeline *t, koila_memory_part part, uint64_t *out);`
"""
function koila_timeline_part(t, part, out)
    fptr = _fptr_koila_timeline_part[]
    fptr == C_NULL && _not_loaded(:koila_timeline_part)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_timeline}, koila_memory_part, Ptr{UInt64}), t, part, out)
end

"""
    koila_timeline_free(t) -> Cvoid

C: `void koila_timeline_free(koila_timeline *t);`
"""
function koila_timeline_free(t)
    fptr = _fptr_koila_timeline_free[]
    fptr == C_NULL && _not_loaded(:koila_timeline_free)
    ccall(fptr, Cvoid, (Ptr{koila_timeline},), t)
end

"""
    koila_set_batch_stats(policy) -> Ptr{koila_status}

C: `koila_status *koila_set_batch_stats(koila_batch_stats policy);`
"""
function koila_set_batch_stats(policy)
    fptr = _fptr_koila_set_batch_stats[]
    fptr == C_NULL && _not_loaded(:koila_set_batch_stats)
    ccall(fptr, Ptr{koila_status}, (koila_batch_stats,), policy)
end

"""
    koila_set_chunking(policy) -> Ptr{koila_status}

C: `koila_status *koila_set_chunking(koila_chunking policy);`
"""
function koila_set_chunking(policy)
    fptr = _fptr_koila_set_chunking[]
    fptr == C_NULL && _not_loaded(:koila_set_chunking)
    ccall(fptr, Ptr{koila_status}, (koila_chunking,), policy)
end

"""
    koila_set_recompute(policy) -> Ptr{koila_status}

C: `koila_status *koila_set_recompute(koila_recompute policy);`
"""
function koila_set_recompute(policy)
    fptr = _fptr_koila_set_recompute[]
    fptr == C_NULL && _not_loaded(:koila_set_recompute)
    ccall(fptr, Ptr{koila_status}, (koila_recompute,), policy)
end

"""
    koila_set_progress(fn, user) -> Ptr{koila_status}

C: `koila_status *koila_set_progress(koila_progress_fn fn, void *user);`

Sets the one progress callback of the process (replacing any set before; NULL fn turns it off) and the `user` pointer it is passed, which koila never reads or frees. What is reported, per run that evaluates a lazy graph (a read, koila_eval) or runs koila_backward: - total is the number of chunks that run uses (koila_plan_num_chunks of its plan); an unsplit run is one chunk: one call with done = total = 1. - Evaluation: "forward" for each chunk. - Backward: "backward" for each chunk. When the loss is computed from values combined over the whole batch (e.g. a mean of a batched sum), the combining pass runs first and is reported as "forward", 1..total, then the backward chunks as "backward", 1..total. A backward from a concrete loss reports "backward" 1 of 1. - After running out of memory the run rolls back and retries with half the chunk: the counts start again at 1 with the retry's (larger) total. Not reported: planning (koila_plan_new, and the probes and simulations any plan runs), reads of concrete tensors (nothing is evaluated). The callback runs on the thread doing the run, while that run holds its share of the budget; runs on several threads call it concurrently. It must return (not longjmp or throw through koila) and should be quick. From the callback, koila functions that do not run a plan (koila_set_progress, metadata, freeing handles) may be called; reads of lazy tensors, koila_eval of one, koila_backward from a lazy loss and koila_plan_new fail there with KOILA_ERROR_UNSUPPORTED (they would run inside the calling run), and what runs from the callback reports nothing.
"""
function koila_set_progress(fn, user)
    fptr = _fptr_koila_set_progress[]
    fptr == C_NULL && _not_loaded(:koila_set_progress)
    ccall(fptr, Ptr{koila_status}, (koila_progress_fn, Ptr{Cvoid}), fn, user)
end

"""
    koila_add(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_add(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`

Elementwise, broadcasting.
"""
function koila_add(out, a, b)
    fptr = _fptr_koila_add[]
    fptr == C_NULL && _not_loaded(:koila_add)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_sub(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_sub(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_sub(out, a, b)
    fptr = _fptr_koila_sub[]
    fptr == C_NULL && _not_loaded(:koila_sub)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_mul(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_mul(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_mul(out, a, b)
    fptr = _fptr_koila_mul[]
    fptr == C_NULL && _not_loaded(:koila_mul)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_div(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_div(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`

True division: integer inputs give a floating result.
"""
function koila_div(out, a, b)
    fptr = _fptr_koila_div[]
    fptr == C_NULL && _not_loaded(:koila_div)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_pow(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_pow(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_pow(out, a, b)
    fptr = _fptr_koila_pow[]
    fptr == C_NULL && _not_loaded(:koila_pow)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_maximum(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_maximum(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_maximum(out, a, b)
    fptr = _fptr_koila_maximum[]
    fptr == C_NULL && _not_loaded(:koila_maximum)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_minimum(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_minimum(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_minimum(out, a, b)
    fptr = _fptr_koila_minimum[]
    fptr == C_NULL && _not_loaded(:koila_minimum)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_eq(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_eq(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`

Comparisons give KOILA_BOOL.
"""
function koila_eq(out, a, b)
    fptr = _fptr_koila_eq[]
    fptr == C_NULL && _not_loaded(:koila_eq)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_ne(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_ne(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_ne(out, a, b)
    fptr = _fptr_koila_ne[]
    fptr == C_NULL && _not_loaded(:koila_ne)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_lt(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_lt(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_lt(out, a, b)
    fptr = _fptr_koila_lt[]
    fptr == C_NULL && _not_loaded(:koila_lt)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_le(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_le(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_le(out, a, b)
    fptr = _fptr_koila_le[]
    fptr == C_NULL && _not_loaded(:koila_le)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_gt(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_gt(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_gt(out, a, b)
    fptr = _fptr_koila_gt[]
    fptr == C_NULL && _not_loaded(:koila_gt)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_ge(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_ge(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`
"""
function koila_ge(out, a, b)
    fptr = _fptr_koila_ge[]
    fptr == C_NULL && _not_loaded(:koila_ge)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_add_scalar(out, a, s) -> Ptr{koila_status}

C: `koila_status *koila_add_scalar(koila_tensor **out, const koila_tensor *a, double s);`

With a scalar.
"""
function koila_add_scalar(out, a, s)
    fptr = _fptr_koila_add_scalar[]
    fptr == C_NULL && _not_loaded(:koila_add_scalar)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Cdouble), out, a, s)
end

"""
    koila_sub_scalar(out, a, s) -> Ptr{koila_status}

C: `koila_status *koila_sub_scalar(koila_tensor **out, const koila_tensor *a, double s);`
"""
function koila_sub_scalar(out, a, s)
    fptr = _fptr_koila_sub_scalar[]
    fptr == C_NULL && _not_loaded(:koila_sub_scalar)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Cdouble), out, a, s)
end

"""
    koila_mul_scalar(out, a, s) -> Ptr{koila_status}

C: `koila_status *koila_mul_scalar(koila_tensor **out, const koila_tensor *a, double s);`
"""
function koila_mul_scalar(out, a, s)
    fptr = _fptr_koila_mul_scalar[]
    fptr == C_NULL && _not_loaded(:koila_mul_scalar)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Cdouble), out, a, s)
end

"""
    koila_div_scalar(out, a, s) -> Ptr{koila_status}

C: `koila_status *koila_div_scalar(koila_tensor **out, const koila_tensor *a, double s);`
"""
function koila_div_scalar(out, a, s)
    fptr = _fptr_koila_div_scalar[]
    fptr == C_NULL && _not_loaded(:koila_div_scalar)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Cdouble), out, a, s)
end

"""
    koila_pow_scalar(out, a, s) -> Ptr{koila_status}

C: `koila_status *koila_pow_scalar(koila_tensor **out, const koila_tensor *a, double s);`
"""
function koila_pow_scalar(out, a, s)
    fptr = _fptr_koila_pow_scalar[]
    fptr == C_NULL && _not_loaded(:koila_pow_scalar)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Cdouble), out, a, s)
end

"""
    koila_neg(out, x) -> Ptr{koila_status}

C: `koila_status *koila_neg(koila_tensor **out, const koila_tensor *x);`

Unary. gelu, silu and hardswish need a floating x (KOILA_ERROR_DTYPE otherwise).
"""
function koila_neg(out, x)
    fptr = _fptr_koila_neg[]
    fptr == C_NULL && _not_loaded(:koila_neg)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_abs(out, x) -> Ptr{koila_status}

C: `koila_status *koila_abs(koila_tensor **out, const koila_tensor *x);`
"""
function koila_abs(out, x)
    fptr = _fptr_koila_abs[]
    fptr == C_NULL && _not_loaded(:koila_abs)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_exp(out, x) -> Ptr{koila_status}

C: `koila_status *koila_exp(koila_tensor **out, const koila_tensor *x);`
"""
function koila_exp(out, x)
    fptr = _fptr_koila_exp[]
    fptr == C_NULL && _not_loaded(:koila_exp)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_log(out, x) -> Ptr{koila_status}

C: `koila_status *koila_log(koila_tensor **out, const koila_tensor *x);`
"""
function koila_log(out, x)
    fptr = _fptr_koila_log[]
    fptr == C_NULL && _not_loaded(:koila_log)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_sqrt(out, x) -> Ptr{koila_status}

C: `koila_status *koila_sqrt(koila_tensor **out, const koila_tensor *x);`
"""
function koila_sqrt(out, x)
    fptr = _fptr_koila_sqrt[]
    fptr == C_NULL && _not_loaded(:koila_sqrt)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_rsqrt(out, x) -> Ptr{koila_status}

C: `koila_status *koila_rsqrt(koila_tensor **out, const koila_tensor *x);`
"""
function koila_rsqrt(out, x)
    fptr = _fptr_koila_rsqrt[]
    fptr == C_NULL && _not_loaded(:koila_rsqrt)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_sin(out, x) -> Ptr{koila_status}

C: `koila_status *koila_sin(koila_tensor **out, const koila_tensor *x);`
"""
function koila_sin(out, x)
    fptr = _fptr_koila_sin[]
    fptr == C_NULL && _not_loaded(:koila_sin)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_cos(out, x) -> Ptr{koila_status}

C: `koila_status *koila_cos(koila_tensor **out, const koila_tensor *x);`
"""
function koila_cos(out, x)
    fptr = _fptr_koila_cos[]
    fptr == C_NULL && _not_loaded(:koila_cos)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_tanh(out, x) -> Ptr{koila_status}

C: `koila_status *koila_tanh(koila_tensor **out, const koila_tensor *x);`
"""
function koila_tanh(out, x)
    fptr = _fptr_koila_tanh[]
    fptr == C_NULL && _not_loaded(:koila_tanh)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_sigmoid(out, x) -> Ptr{koila_status}

C: `koila_status *koila_sigmoid(koila_tensor **out, const koila_tensor *x);`
"""
function koila_sigmoid(out, x)
    fptr = _fptr_koila_sigmoid[]
    fptr == C_NULL && _not_loaded(:koila_sigmoid)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_relu(out, x) -> Ptr{koila_status}

C: `koila_status *koila_relu(koila_tensor **out, const koila_tensor *x);`
"""
function koila_relu(out, x)
    fptr = _fptr_koila_relu[]
    fptr == C_NULL && _not_loaded(:koila_relu)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_gelu(out, x) -> Ptr{koila_status}

C: `koila_status *koila_gelu(koila_tensor **out, const koila_tensor *x);`
"""
function koila_gelu(out, x)
    fptr = _fptr_koila_gelu[]
    fptr == C_NULL && _not_loaded(:koila_gelu)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_silu(out, x) -> Ptr{koila_status}

C: `koila_status *koila_silu(koila_tensor **out, const koila_tensor *x);`
"""
function koila_silu(out, x)
    fptr = _fptr_koila_silu[]
    fptr == C_NULL && _not_loaded(:koila_silu)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_erf(out, x) -> Ptr{koila_status}

C: `koila_status *koila_erf(koila_tensor **out, const koila_tensor *x);`

The error function; integer inputs give a floating result.
"""
function koila_erf(out, x)
    fptr = _fptr_koila_erf[]
    fptr == C_NULL && _not_loaded(:koila_erf)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_hardswish(out, x) -> Ptr{koila_status}

C: `koila_status *koila_hardswish(koila_tensor **out, const koila_tensor *x);`

x * relu6(x + 3) / 6.
"""
function koila_hardswish(out, x)
    fptr = _fptr_koila_hardswish[]
    fptr == C_NULL && _not_loaded(:koila_hardswish)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}), out, x)
end

"""
    koila_leaky_relu(out, x, slope) -> Ptr{koila_status}

C: `koila_status *koila_leaky_relu(koila_tensor **out, const koila_tensor *x, double slope);`
"""
function koila_leaky_relu(out, x, slope)
    fptr = _fptr_koila_leaky_relu[]
    fptr == C_NULL && _not_loaded(:koila_leaky_relu)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Cdouble), out, x, slope)
end

"""
    koila_clamp(out, x, lo, hi) -> Ptr{koila_status}

C: `koila_status *koila_clamp(koila_tensor **out, const koila_tensor *x, double lo, double hi);`

lo <= hi is not required (as in PyTorch, values end up at hi when lo > hi).
"""
function koila_clamp(out, x, lo, hi)
    fptr = _fptr_koila_clamp[]
    fptr == C_NULL && _not_loaded(:koila_clamp)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Cdouble, Cdouble), out, x, lo, hi)
end

"""
    koila_softmax(out, x, dim) -> Ptr{koila_status}

C: `koila_status *koila_softmax(koila_tensor **out, const koila_tensor *x, int64_t dim);`
"""
function koila_softmax(out, x, dim)
    fptr = _fptr_koila_softmax[]
    fptr == C_NULL && _not_loaded(:koila_softmax)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64), out, x, dim)
end

"""
    koila_log_softmax(out, x, dim) -> Ptr{koila_status}

C: `koila_status *koila_log_softmax(koila_tensor **out, const koila_tensor *x, int64_t dim);`
"""
function koila_log_softmax(out, x, dim)
    fptr = _fptr_koila_log_softmax[]
    fptr == C_NULL && _not_loaded(:koila_log_softmax)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64), out, x, dim)
end

"""
    koila_dropout(out, x, p, train) -> Ptr{koila_status}

C: `koila_status *koila_dropout(koila_tensor **out, const koila_tensor *x, double p, int train);`

0 <= p <= 1. With train == 0 the input passes through unchanged.
"""
function koila_dropout(out, x, p, train)
    fptr = _fptr_koila_dropout[]
    fptr == C_NULL && _not_loaded(:koila_dropout)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Cdouble, Cint), out, x, p, train)
end

"""
    koila_matmul(out, a, b) -> Ptr{koila_status}

C: `koila_status *koila_matmul(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);`

Linear algebra. matmul follows torch.matmul (1-D, 2-D and broadcast batched cases); linear computes x @ weight^T + bias with weight [out, in].
"""
function koila_matmul(out, a, b)
    fptr = _fptr_koila_matmul[]
    fptr == C_NULL && _not_loaded(:koila_matmul)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, a, b)
end

"""
    koila_linear(out, x, weight, bias) -> Ptr{koila_status}

C: `koila_status *koila_linear(koila_tensor **out, const koila_tensor *x, const koila_tensor *weight, const koila_tensor *bias);`
"""
function koila_linear(out, x, weight, bias)
    fptr = _fptr_koila_linear[]
    fptr == C_NULL && _not_loaded(:koila_linear)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, x, weight, bias)
end

"""
    koila_conv1d(out, x, w, bias, stride, padding, dilation, groups) -> Ptr{koila_status}

C: `koila_status *koila_conv1d(koila_tensor **out, const koila_tensor *x, const koila_tensor *w, const koila_tensor *bias, const int64_t *stride, const int64_t *padding, const int64_t *dilation, int64_t groups);`

Convolution, pooling and upsampling: 2-element arrays for 2d, 1-element for 1d. A NULL array takes PyTorch's default: stride = kernel size for pooling and 1 for convolution, padding 0, dilation 1. Inputs may be batched [N, C, ...] or unbatched [C, ...]. upsample_nearest2d repeats every pixel scale[0] x scale[1] times (F.interpolate's "nearest" by whole factors).
"""
function koila_conv1d(out, x, w, bias, stride, padding, dilation, groups)
    fptr = _fptr_koila_conv1d[]
    fptr == C_NULL && _not_loaded(:koila_conv1d)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{Int64}, Ptr{Int64}, Ptr{Int64}, Int64), out, x, w, bias, stride, padding, dilation, groups)
end

"""
    koila_conv2d(out, x, w, bias, stride, padding, dilation, groups) -> Ptr{koila_status}

C: `koila_status *koila_conv2d(koila_tensor **out, const koila_tensor *x, const koila_tensor *w, const koila_tensor *bias, const int64_t *stride, const int64_t *padding, const int64_t *dilation, int64_t groups);`
"""
function koila_conv2d(out, x, w, bias, stride, padding, dilation, groups)
    fptr = _fptr_koila_conv2d[]
    fptr == C_NULL && _not_loaded(:koila_conv2d)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{Int64}, Ptr{Int64}, Ptr{Int64}, Int64), out, x, w, bias, stride, padding, dilation, groups)
end

"""
    koila_max_pool2d(out, x, kernel, stride, padding, ceil_mode) -> Ptr{koila_status}

C: `koila_status *koila_max_pool2d(koila_tensor **out, const koila_tensor *x, const int64_t *kernel, const int64_t *stride, const int64_t *padding, int ceil_mode);`
"""
function koila_max_pool2d(out, x, kernel, stride, padding, ceil_mode)
    fptr = _fptr_koila_max_pool2d[]
    fptr == C_NULL && _not_loaded(:koila_max_pool2d)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}, Ptr{Int64}, Ptr{Int64}, Cint), out, x, kernel, stride, padding, ceil_mode)
end

"""
    koila_avg_pool2d(out, x, kernel, stride, padding, ceil_mode) -> Ptr{koila_status}

C: `koila_status *koila_avg_pool2d(koila_tensor **out, const koila_tensor *x, const int64_t *kernel, const int64_t *stride, const int64_t *padding, int ceil_mode);`
"""
function koila_avg_pool2d(out, x, kernel, stride, padding, ceil_mode)
    fptr = _fptr_koila_avg_pool2d[]
    fptr == C_NULL && _not_loaded(:koila_avg_pool2d)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}, Ptr{Int64}, Ptr{Int64}, Cint), out, x, kernel, stride, padding, ceil_mode)
end

"""
    koila_adaptive_avg_pool2d(out, x, output_size) -> Ptr{koila_status}

C: `koila_status *koila_adaptive_avg_pool2d(koila_tensor **out, const koila_tensor *x, const int64_t *output_size);`
"""
function koila_adaptive_avg_pool2d(out, x, output_size)
    fptr = _fptr_koila_adaptive_avg_pool2d[]
    fptr == C_NULL && _not_loaded(:koila_adaptive_avg_pool2d)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}), out, x, output_size)
end

"""
    koila_upsample_nearest2d(out, x, scale) -> Ptr{koila_status}

C: `koila_status *koila_upsample_nearest2d(koila_tensor **out, const koila_tensor *x, const int64_t *scale);`
"""
function koila_upsample_nearest2d(out, x, scale)
    fptr = _fptr_koila_upsample_nearest2d[]
    fptr == C_NULL && _not_loaded(:koila_upsample_nearest2d)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}), out, x, scale)
end

"""
    koila_batch_norm(out, x, weight, bias, running_mean, running_var, training, momentum, eps) -> Ptr{koila_status}

C: `koila_status *koila_batch_norm(koila_tensor **out, const koila_tensor *x, const koila_tensor *weight, const koila_tensor *bias, const koila_tensor *running_mean, const koila_tensor *running_var, int training, double momentum, double eps);`

Normalization and embedding. batch_norm normalizes over every dim but dim 1; in training it uses the batch statistics (and updates running_mean/var, when given, each time it is evaluated), which mixes samples across the batch.
"""
function koila_batch_norm(out, x, weight, bias, running_mean, running_var, training, momentum, eps)
    fptr = _fptr_koila_batch_norm[]
    fptr == C_NULL && _not_loaded(:koila_batch_norm)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{koila_tensor}, Cint, Cdouble, Cdouble), out, x, weight, bias, running_mean, running_var, training, momentum, eps)
end

"""
    koila_layer_norm(out, x, normalized_shape, n, weight, bias, eps) -> Ptr{koila_status}

C: `koila_status *koila_layer_norm(koila_tensor **out, const koila_tensor *x, const int64_t *normalized_shape, size_t n, const koila_tensor *weight, const koila_tensor *bias, double eps);`
"""
function koila_layer_norm(out, x, normalized_shape, n, weight, bias, eps)
    fptr = _fptr_koila_layer_norm[]
    fptr == C_NULL && _not_loaded(:koila_layer_norm)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}, Csize_t, Ptr{koila_tensor}, Ptr{koila_tensor}, Cdouble), out, x, normalized_shape, n, weight, bias, eps)
end

"""
    koila_embedding(out, weight, indices) -> Ptr{koila_status}

C: `koila_status *koila_embedding(koila_tensor **out, const koila_tensor *weight, const koila_tensor *indices);`

Rows of weight [num, dim] picked by integer indices of any shape: indices.shape + [dim].
"""
function koila_embedding(out, weight, indices)
    fptr = _fptr_koila_embedding[]
    fptr == C_NULL && _not_loaded(:koila_embedding)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}), out, weight, indices)
end

"""
    koila_sum(out, x, dims, ndims, keepdim) -> Ptr{koila_status}

C: `koila_status *koila_sum(koila_tensor **out, const koila_tensor *x, const int64_t *dims, size_t ndims, int keepdim);`

Reductions. dims NULL or ndims 0 = all dims.
"""
function koila_sum(out, x, dims, ndims, keepdim)
    fptr = _fptr_koila_sum[]
    fptr == C_NULL && _not_loaded(:koila_sum)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}, Csize_t, Cint), out, x, dims, ndims, keepdim)
end

"""
    koila_mean(out, x, dims, ndims, keepdim) -> Ptr{koila_status}

C: `koila_status *koila_mean(koila_tensor **out, const koila_tensor *x, const int64_t *dims, size_t ndims, int keepdim);`
"""
function koila_mean(out, x, dims, ndims, keepdim)
    fptr = _fptr_koila_mean[]
    fptr == C_NULL && _not_loaded(:koila_mean)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}, Csize_t, Cint), out, x, dims, ndims, keepdim)
end

"""
    koila_amax(out, x, dims, ndims, keepdim) -> Ptr{koila_status}

C: `koila_status *koila_amax(koila_tensor **out, const koila_tensor *x, const int64_t *dims, size_t ndims, int keepdim);`
"""
function koila_amax(out, x, dims, ndims, keepdim)
    fptr = _fptr_koila_amax[]
    fptr == C_NULL && _not_loaded(:koila_amax)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}, Csize_t, Cint), out, x, dims, ndims, keepdim)
end

"""
    koila_amin(out, x, dims, ndims, keepdim) -> Ptr{koila_status}

C: `koila_status *koila_amin(koila_tensor **out, const koila_tensor *x, const int64_t *dims, size_t ndims, int keepdim);`
"""
function koila_amin(out, x, dims, ndims, keepdim)
    fptr = _fptr_koila_amin[]
    fptr == C_NULL && _not_loaded(:koila_amin)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}, Csize_t, Cint), out, x, dims, ndims, keepdim)
end

"""
    koila_argmax(out, x, dim, keepdim) -> Ptr{koila_status}

C: `koila_status *koila_argmax(koila_tensor **out, const koila_tensor *x, int64_t dim, int keepdim);`

KOILA_INT64 indices of the largest value along dim.
"""
function koila_argmax(out, x, dim, keepdim)
    fptr = _fptr_koila_argmax[]
    fptr == C_NULL && _not_loaded(:koila_argmax)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64, Cint), out, x, dim, keepdim)
end

"""
    koila_reshape(out, x, shape, ndim) -> Ptr{koila_status}

C: `koila_status *koila_reshape(koila_tensor **out, const koila_tensor *x, const int64_t *shape, size_t ndim);`

Shape. reshape accepts one -1.
"""
function koila_reshape(out, x, shape, ndim)
    fptr = _fptr_koila_reshape[]
    fptr == C_NULL && _not_loaded(:koila_reshape)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}, Csize_t), out, x, shape, ndim)
end

"""
    koila_permute(out, x, dims, ndim) -> Ptr{koila_status}

C: `koila_status *koila_permute(koila_tensor **out, const koila_tensor *x, const int64_t *dims, size_t ndim);`
"""
function koila_permute(out, x, dims, ndim)
    fptr = _fptr_koila_permute[]
    fptr == C_NULL && _not_loaded(:koila_permute)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{Int64}, Csize_t), out, x, dims, ndim)
end

"""
    koila_transpose(out, x, d0, d1) -> Ptr{koila_status}

C: `koila_status *koila_transpose(koila_tensor **out, const koila_tensor *x, int64_t d0, int64_t d1);`
"""
function koila_transpose(out, x, d0, d1)
    fptr = _fptr_koila_transpose[]
    fptr == C_NULL && _not_loaded(:koila_transpose)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64, Int64), out, x, d0, d1)
end

"""
    koila_flatten(out, x, start, end_) -> Ptr{koila_status}

C: `koila_status *koila_flatten(koila_tensor **out, const koila_tensor *x, int64_t start, int64_t end);`
"""
function koila_flatten(out, x, start, end_)
    fptr = _fptr_koila_flatten[]
    fptr == C_NULL && _not_loaded(:koila_flatten)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64, Int64), out, x, start, end_)
end

"""
    koila_squeeze(out, x, dim) -> Ptr{koila_status}

C: `koila_status *koila_squeeze(koila_tensor **out, const koila_tensor *x, int64_t dim);`

Removes dim when its size is 1; otherwise returns x's shape unchanged (as PyTorch).
"""
function koila_squeeze(out, x, dim)
    fptr = _fptr_koila_squeeze[]
    fptr == C_NULL && _not_loaded(:koila_squeeze)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64), out, x, dim)
end

"""
    koila_unsqueeze(out, x, dim) -> Ptr{koila_status}

C: `koila_status *koila_unsqueeze(koila_tensor **out, const koila_tensor *x, int64_t dim);`
"""
function koila_unsqueeze(out, x, dim)
    fptr = _fptr_koila_unsqueeze[]
    fptr == C_NULL && _not_loaded(:koila_unsqueeze)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64), out, x, dim)
end

"""
    koila_cat(out, ts, n, dim) -> Ptr{koila_status}

C: `koila_status *koila_cat(koila_tensor **out, koila_tensor *const *ts, size_t n, int64_t dim);`
"""
function koila_cat(out, ts, n, dim)
    fptr = _fptr_koila_cat[]
    fptr == C_NULL && _not_loaded(:koila_cat)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{Ptr{koila_tensor}}, Csize_t, Int64), out, ts, n, dim)
end

"""
    koila_stack(out, ts, n, dim) -> Ptr{koila_status}

C: `koila_status *koila_stack(koila_tensor **out, koila_tensor *const *ts, size_t n, int64_t dim);`
"""
function koila_stack(out, ts, n, dim)
    fptr = _fptr_koila_stack[]
    fptr == C_NULL && _not_loaded(:koila_stack)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{Ptr{koila_tensor}}, Csize_t, Int64), out, ts, n, dim)
end

"""
    koila_narrow(out, x, dim, start, length) -> Ptr{koila_status}

C: `koila_status *koila_narrow(koila_tensor **out, const koila_tensor *x, int64_t dim, int64_t start, int64_t length);`
"""
function koila_narrow(out, x, dim, start, length)
    fptr = _fptr_koila_narrow[]
    fptr == C_NULL && _not_loaded(:koila_narrow)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64, Int64, Int64), out, x, dim, start, length)
end

"""
    koila_index_select(out, x, dim, index) -> Ptr{koila_status}

C: `koila_status *koila_index_select(koila_tensor **out, const koila_tensor *x, int64_t dim, const koila_tensor *index);`

index: 1-D integer tensor.
"""
function koila_index_select(out, x, dim, index)
    fptr = _fptr_koila_index_select[]
    fptr == C_NULL && _not_loaded(:koila_index_select)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Int64, Ptr{koila_tensor}), out, x, dim, index)
end

"""
    koila_cross_entropy(out, logits, target, r) -> Ptr{koila_status}

C: `koila_status *koila_cross_entropy(koila_tensor **out, const koila_tensor *logits, const koila_tensor *target, koila_reduction r);`

Losses. cross_entropy takes logits [N, C, ...] and either class indices [N, ...] (integer) or class probabilities shaped like the logits; nll_loss takes log-probabilities and class indices. Class index -100 is ignored, as in PyTorch.
"""
function koila_cross_entropy(out, logits, target, r)
    fptr = _fptr_koila_cross_entropy[]
    fptr == C_NULL && _not_loaded(:koila_cross_entropy)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, koila_reduction), out, logits, target, r)
end

"""
    koila_nll_loss(out, log_probs, target, r) -> Ptr{koila_status}

C: `koila_status *koila_nll_loss(koila_tensor **out, const koila_tensor *log_probs, const koila_tensor *target, koila_reduction r);`
"""
function koila_nll_loss(out, log_probs, target, r)
    fptr = _fptr_koila_nll_loss[]
    fptr == C_NULL && _not_loaded(:koila_nll_loss)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, koila_reduction), out, log_probs, target, r)
end

"""
    koila_mse_loss(out, a, b, r) -> Ptr{koila_status}

C: `koila_status *koila_mse_loss(koila_tensor **out, const koila_tensor *a, const koila_tensor *b, koila_reduction r);`
"""
function koila_mse_loss(out, a, b, r)
    fptr = _fptr_koila_mse_loss[]
    fptr == C_NULL && _not_loaded(:koila_mse_loss)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, koila_reduction), out, a, b, r)
end

"""
    koila_l1_loss(out, a, b, r) -> Ptr{koila_status}

C: `koila_status *koila_l1_loss(koila_tensor **out, const koila_tensor *a, const koila_tensor *b, koila_reduction r);`
"""
function koila_l1_loss(out, a, b, r)
    fptr = _fptr_koila_l1_loss[]
    fptr == C_NULL && _not_loaded(:koila_l1_loss)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, koila_reduction), out, a, b, r)
end

"""
    koila_binary_cross_entropy_with_logits(out, logits, target, r) -> Ptr{koila_status}

C: `koila_status *koila_binary_cross_entropy_with_logits(koila_tensor **out, const koila_tensor *logits, const koila_tensor *target, koila_reduction r);`
"""
function koila_binary_cross_entropy_with_logits(out, logits, target, r)
    fptr = _fptr_koila_binary_cross_entropy_with_logits[]
    fptr == C_NULL && _not_loaded(:koila_binary_cross_entropy_with_logits)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, koila_reduction), out, logits, target, r)
end

"""
    koila_scaled_dot_product_attention(out, q, k, v, attn_mask, is_causal) -> Ptr{koila_status}

C: `koila_status *koila_scaled_dot_product_attention(koila_tensor **out, const koila_tensor *q, const koila_tensor *k, const koila_tensor *v, const koila_tensor *attn_mask, int is_causal);`

Attention: softmax(q k^T / sqrt(E) + mask) v with q [..., L, E], k [..., S, E], v [..., S, Ev]. attn_mask (optional) broadcasts to [..., L, S]: a KOILA_BOOL mask keeps the positions that are true, a floating mask is added. is_causal masks j > i; it may be combined with attn_mask. On the CPU with LibTorch 2.x it runs PyTorch's own scaled_dot_product_attention (flash attention where PyTorch takes it, which keeps no [L, S] weights for the backward); with both a mask and is_causal, on other devices and with LibTorch 1.13, the weights are computed and kept.
"""
function koila_scaled_dot_product_attention(out, q, k, v, attn_mask, is_causal)
    fptr = _fptr_koila_scaled_dot_product_attention[]
    fptr == C_NULL && _not_loaded(:koila_scaled_dot_product_attention)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{koila_tensor}, Ptr{koila_tensor}, Cint), out, q, k, v, attn_mask, is_causal)
end

"""
    koila_module_load(out, path, device) -> Ptr{koila_status}

C: `koila_status *koila_module_load(koila_module **out, const char *path, const char *device);`

Loads a module onto a device ("cpu", "cuda", "cuda:N"): a TorchScript file, or a .pt2 archive written by torch.export.save (see "Exported programs" below; the file's content decides, not its name). A missing, unreadable or corrupt file is KOILA_ERROR_IO with the path in the message; a program koila cannot run is KOILA_ERROR_UNSUPPORTED naming what.
"""
function koila_module_load(out, path, device)
    fptr = _fptr_koila_module_load[]
    fptr == C_NULL && _not_loaded(:koila_module_load)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_module}}, Cstring, Cstring), out, path, device)
end

"""
    koila_module_save(m, path) -> Ptr{koila_status}

C: `koila_status *koila_module_save(const koila_module *m, const char *path);`

Saves the module with its current parameters and buffers, in the form it was loaded from (TorchScript, or a .pt2 archive that torch.export.load reads). Atomic: the file is written beside path (as ".NAME.koila-PID-N.tmp"), flushed to disk and renamed over path, and the folder is flushed, so that whatever happens to the process during the call, path holds afterwards the complete old file or the complete new one. A save killed midway can leave its temporary behind; the next save to the same path removes it. KOILA_ERROR_IO when the file cannot be written (a missing folder, a full disk, a file size limit), with path as it was.
"""
function koila_module_save(m, path)
    fptr = _fptr_koila_module_save[]
    fptr == C_NULL && _not_loaded(:koila_module_save)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_module}, Cstring), m, path)
end

"""
    koila_module_forward(out, m, inputs, n) -> Ptr{koila_status}

C: `koila_status *koila_module_forward(koila_tensor **out, koila_module *m, koila_tensor *const *inputs, size_t n);`

The result of m.forward(inputs[0], ..., inputs[n-1]); lazy if any input is, else computed at once (recording gradients, as eager LibTorch). The module must return one tensor (KOILA_ERROR_UNSUPPORTED otherwise). Inputs the module rejects fail here, with the module's complaint in the message: KOILA_ERROR_INVALID_ARGUMENT for the wrong number or kind of arguments, KOILA_ERROR_SHAPE for shapes it does not accept. The call runs the module as it is when the call is built (training flag included, see koila_module_train); parameters and buffers are shared, so updates to them are seen by every later evaluation. Running it on meta tensors and on the probe changes no buffer (batch norm statistics) and no random generator state.
"""
function koila_module_forward(out, m, inputs, n)
    fptr = _fptr_koila_module_forward[]
    fptr == C_NULL && _not_loaded(:koila_module_forward)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_module}, Ptr{Ptr{koila_tensor}}, Csize_t), out, m, inputs, n)
end

"""
    koila_module_train(m, on) -> Ptr{koila_status}

C: `koila_status *koila_module_train(koila_module *m, int on);`

Sets the training flag (on: 1, off: 0) of the module and its submodules; it applies to calls built afterwards. An exported program keeps the mode it was exported in: asking for the other is KOILA_ERROR_UNSUPPORTED naming it (see "Exported programs").
"""
function koila_module_train(m, on)
    fptr = _fptr_koila_module_train[]
    fptr == C_NULL && _not_loaded(:koila_module_train)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_module}, Cint), m, on)
end

"""
    koila_module_is_training(m, out) -> Ptr{koila_status}

C: `koila_status *koila_module_is_training(const koila_module *m, int *out);`

1 when the module is in training mode.
"""
function koila_module_is_training(m, out)
    fptr = _fptr_koila_module_is_training[]
    fptr == C_NULL && _not_loaded(:koila_module_is_training)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_module}, Ptr{Cint}), m, out)
end

"""
    koila_module_num_parameters(m, out) -> Ptr{koila_status}

C: `koila_status *koila_module_num_parameters(const koila_module *m, size_t *out);`

Parameters of the module and its submodules, in the order of named_parameters().
"""
function koila_module_num_parameters(m, out)
    fptr = _fptr_koila_module_num_parameters[]
    fptr == C_NULL && _not_loaded(:koila_module_num_parameters)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_module}, Ptr{Csize_t}), m, out)
end

"""
    koila_module_parameter(out, m, i) -> Ptr{koila_status}

C: `koila_status *koila_module_parameter(koila_tensor **out, koila_module *m, size_t i);`

Aliases the module's i-th parameter: gradients from koila_backward and optimizer updates are seen by the module, and koila_tensor_set_requires_grad on it changes the module's parameter. Modules saved from Python keep requires_grad; modules made in C++ with register_parameter do not set it.
"""
function koila_module_parameter(out, m, i)
    fptr = _fptr_koila_module_parameter[]
    fptr == C_NULL && _not_loaded(:koila_module_parameter)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_module}, Csize_t), out, m, i)
end

"""
    koila_module_parameter_name(m, i, buf, capacity, needed) -> Ptr{koila_status}

C: `koila_status *koila_module_parameter_name(const koila_module *m, size_t i, char *buf, size_t capacity, size_t *needed);`

The dotted name of the i-th parameter ("conv1.weight"). Text conventions as koila_tensor_to_string.
"""
function koila_module_parameter_name(m, i, buf, capacity, needed)
    fptr = _fptr_koila_module_parameter_name[]
    fptr == C_NULL && _not_loaded(:koila_module_parameter_name)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_module}, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Csize_t}), m, i, buf, capacity, needed)
end

"""
    koila_module_free(m) -> Cvoid

C: `void koila_module_free(koila_module *m);`

Lazy results built from the module keep what they need alive: freeing the module handle first is safe.
"""
function koila_module_free(m)
    fptr = _fptr_koila_module_free[]
    fptr == C_NULL && _not_loaded(:koila_module_free)
    ccall(fptr, Cvoid, (Ptr{koila_module},), m)
end

"""
    koila_module_kind_of(m, out) -> Ptr{koila_status}

C: `koila_status *koila_module_kind_of(const koila_module *m, koila_module_kind *out);`

What the module was loaded from. Module getters keep their siblings' order (module first, out last).
"""
function koila_module_kind_of(m, out)
    fptr = _fptr_koila_module_kind_of[]
    fptr == C_NULL && _not_loaded(:koila_module_kind_of)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_module}, Ptr{koila_module_kind}), m, out)
end

"""
    koila_module_num_buffers(m, out) -> Ptr{koila_status}

C: `koila_status *koila_module_num_buffers(const koila_module *m, size_t *out);`

Buffers (batch norm running statistics, masks, ...) of the module and its submodules, in the order of named_buffers(), for both kinds: count, alias (updates koila makes, such as running statistics after a training step, are seen through it), dotted name (text conventions as koila_tensor_to_string).
"""
function koila_module_num_buffers(m, out)
    fptr = _fptr_koila_module_num_buffers[]
    fptr == C_NULL && _not_loaded(:koila_module_num_buffers)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_module}, Ptr{Csize_t}), m, out)
end

"""
    koila_module_buffer(out, m, i) -> Ptr{koila_status}

C: `koila_status *koila_module_buffer(koila_tensor **out, koila_module *m, size_t i);`
"""
function koila_module_buffer(out, m, i)
    fptr = _fptr_koila_module_buffer[]
    fptr == C_NULL && _not_loaded(:koila_module_buffer)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{koila_module}, Csize_t), out, m, i)
end

"""
    koila_module_buffer_name(m, i, buf, capacity, needed) -> Ptr{koila_status}

C: `koila_status *koila_module_buffer_name(const koila_module *m, size_t i, char *buf, size_t capacity, size_t *needed);`
"""
function koila_module_buffer_name(m, i, buf, capacity, needed)
    fptr = _fptr_koila_module_buffer_name[]
    fptr == C_NULL && _not_loaded(:koila_module_buffer_name)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_module}, Csize_t, Ptr{UInt8}, Csize_t, Ptr{Csize_t}), m, i, buf, capacity, needed)
end

"""
    koila_module_forward_all(out, capacity, count, m, inputs, n) -> Ptr{koila_status}

C: `koila_status *koila_module_forward_all(koila_tensor **out, size_t capacity, size_t *count, koila_module *m, koila_tensor *const *inputs, size_t n);`

The results of m.forward(inputs...) when it returns several tensors: a tuple, a list or a dict, nested ones flattened depth-first (dict entries in the order the module returns them; an exported program's results in its output order, which is that flattening). Writes their count to *count; when capacity >= *count, writes one handle per result to out[0..*count-1], each as koila_module_forward's result would be (lazy if any input is, else computed at once; with its own batch dim or none), and NULL for a None entry. When capacity < *count it writes no handle and fails with KOILA_ERROR_INVALID_ARGUMENT naming the count, so that a call with capacity 0 (out may then be NULL) asks for the count; that call runs nothing (the count comes from a run on meta tensors, or on the probe where that fails). A module that returns one tensor gives 1; a result of another type (an int, a string) is KOILA_ERROR_UNSUPPORTED naming it. An evaluation runs the module once for all the results it needs: a training step may take its loss from several (koila_add of two heads' losses) and koila_backward runs the module once per chunk. Reading results one by one is one evaluation each, as reading any two lazy tensors is. A result that does not carry the batch when the inputs do (a sum over the batch) mixes samples, so the whole call does: it runs unsplit. The module's results must keep their structure from call to call (which are None); where a later run gives None for a result inferred as a tensor, that run fails with KOILA_ERROR_UNSUPPORTED. Calls are inferred once per structure, as koila_module_forward's, each result as a call of its own.
"""
function koila_module_forward_all(out, capacity, count, m, inputs, n)
    fptr = _fptr_koila_module_forward_all[]
    fptr == C_NULL && _not_loaded(:koila_module_forward_all)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Csize_t, Ptr{Csize_t}, Ptr{koila_module}, Ptr{Ptr{koila_tensor}}, Csize_t), out, capacity, count, m, inputs, n)
end

"""
    koila_optimizer_sgd(out, params, n, lr, momentum, weight_decay) -> Ptr{koila_status}

C: `koila_status *koila_optimizer_sgd(koila_optimizer **out, koila_tensor *const *params, size_t n, double lr, double momentum, double weight_decay);`

Optimizers over concrete floating-point leaves that require grad (each at most once), as torch::optim: SGD with momentum and weight decay (L2, added to the gradient), Adam with weight decay (L2; koila_optimizer_adamw decouples it). Parameters without a gradient are skipped by a step. lr, momentum, weight_decay and eps must be >= 0 and finite; 0 <= beta < 1.
"""
function koila_optimizer_sgd(out, params, n, lr, momentum, weight_decay)
    fptr = _fptr_koila_optimizer_sgd[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_sgd)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_optimizer}}, Ptr{Ptr{koila_tensor}}, Csize_t, Cdouble, Cdouble, Cdouble), out, params, n, lr, momentum, weight_decay)
end

"""
    koila_optimizer_adam(out, params, n, lr, beta1, beta2, eps, weight_decay) -> Ptr{koila_status}

C: `koila_status *koila_optimizer_adam(koila_optimizer **out, koila_tensor *const *params, size_t n, double lr, double beta1, double beta2, double eps, double weight_decay);`
"""
function koila_optimizer_adam(out, params, n, lr, beta1, beta2, eps, weight_decay)
    fptr = _fptr_koila_optimizer_adam[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_adam)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_optimizer}}, Ptr{Ptr{koila_tensor}}, Csize_t, Cdouble, Cdouble, Cdouble, Cdouble, Cdouble), out, params, n, lr, beta1, beta2, eps, weight_decay)
end

"""
    koila_optimizer_step(o) -> Ptr{koila_status}

C: `koila_status *koila_optimizer_step(koila_optimizer *o);`

Updates the parameters in place from their gradients.
"""
function koila_optimizer_step(o)
    fptr = _fptr_koila_optimizer_step[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_step)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_optimizer},), o)
end

"""
    koila_optimizer_zero_grad(o) -> Ptr{koila_status}

C: `koila_status *koila_optimizer_zero_grad(koila_optimizer *o);`

Sets the parameters' gradients to zero in place (as koila_tensor_zero_grad), and gives each parameter without one a zero gradient: every step's backward then starts alike (a chunked backward adds into an existing gradient in another order than it makes a new one), which a run resumed from a checkpoint needs to continue bit for bit.
"""
function koila_optimizer_zero_grad(o)
    fptr = _fptr_koila_optimizer_zero_grad[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_zero_grad)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_optimizer},), o)
end

"""
    koila_optimizer_free(o) -> Cvoid

C: `void koila_optimizer_free(koila_optimizer *o);`
"""
function koila_optimizer_free(o)
    fptr = _fptr_koila_optimizer_free[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_free)
    ccall(fptr, Cvoid, (Ptr{koila_optimizer},), o)
end

"""
    koila_group_new(out, backend, init, rank, world_size, timeout_ms) -> Ptr{koila_status}

C: `koila_status *koila_group_new(koila_group **out, const char *backend, const char *init, int rank, int world_size, int64_t timeout_ms);`

Joins a group of world_size processes as `rank` (0 <= rank < world_size). backend: "gloo" or "nccl"; init: "tcp://HOST:PORT" (rank 0 listens there) or "file:///PATH" (a file every rank can reach, which must not be left over from an earlier group). Gloo connects through the interface GLOO_SOCKET_IFNAME names, else loopback when init is a file or a loopback address, else this host's address. timeout_ms (> 0) bounds the rendezvous and every later collective. Fails with KOILA_ERROR_IO when the others do not join within timeout_ms (or init cannot be reached or created), KOILA_ERROR_UNSUPPORTED for "nccl" when LibTorch has no NCCL, KOILA_ERROR_INVALID_ARGUMENT for an unknown backend, a malformed init or a rank out of range. A process that left SIGPIPE at its default disposition has it ignored from this call on: Gloo's writes to the socket of a rank that died raise it, and it would kill this process instead of failing the call with KOILA_ERROR_IO (Python ignores SIGPIPE at startup for the same reason). A handler or disposition the program set itself is kept.
"""
function koila_group_new(out, backend, init, rank, world_size, timeout_ms)
    fptr = _fptr_koila_group_new[]
    fptr == C_NULL && _not_loaded(:koila_group_new)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_group}}, Cstring, Cstring, Cint, Cint, Int64), out, backend, init, rank, world_size, timeout_ms)
end

"""
    koila_group_new_from_env(out, backend, timeout_ms) -> Ptr{koila_status}

C: `koila_status *koila_group_new_from_env(koila_group **out, const char *backend, int64_t timeout_ms);`

Joins the group that a launcher describes in the environment, as torchrun (torch.distributed.run; --no-python for programs that are not Python) sets it for each worker: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and LOCAL_RANK (the CUDA device of "nccl" is cuda:LOCAL_RANK). Where TORCHELASTIC_USE_AGENT_STORE is "True", the store at MASTER_ADDR:MASTER_PORT is the launcher's and the worker joins it as torch.distributed's own env:// initialization does (a client, its keys under "/worker/attempt_N" for TORCHELASTIC_RESTART_COUNT=N, so that restarted workers meet afresh); otherwise rank 0 listens there. Gloo connects through the interface GLOO_SOCKET_IFNAME names, else loopback when MASTER_ADDR is a loopback address, else this machine's address on the route to MASTER_ADDR. A missing or malformed variable is KOILA_ERROR_INVALID_ARGUMENT naming it. Timeouts and failures as koila_group_new (a store that cannot be reached: KOILA_ERROR_IO within timeout_ms). Who can join: c10d's store and Gloo's connections have no authentication. Anything that reaches MASTER_ADDR:MASTER_PORT (or the ports Gloo's pairs listen on) can join or disturb the group; a stranger's connection fails the group's calls with KOILA_ERROR_IO (within the timeout), it does not crash or hang them. Keep a group on a private network: a MASTER_ADDR on an interface only the workers reach (not 0.0.0.0, not a public address), GLOO_SOCKET_IFNAME naming that interface, and a firewall closing the ports to others.
"""
function koila_group_new_from_env(out, backend, timeout_ms)
    fptr = _fptr_koila_group_new_from_env[]
    fptr == C_NULL && _not_loaded(:koila_group_new_from_env)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_group}}, Cstring, Int64), out, backend, timeout_ms)
end

"""
    koila_group_local_rank(g) -> Cint

C: `int koila_group_local_rank(const koila_group *g);`

LOCAL_RANK for a group joined from the environment; the rank for one made by koila_group_new; -1 for NULL.
"""
function koila_group_local_rank(g)
    fptr = _fptr_koila_group_local_rank[]
    fptr == C_NULL && _not_loaded(:koila_group_local_rank)
    ccall(fptr, Cint, (Ptr{koila_group},), g)
end

"""
    koila_group_rank(g) -> Cint

C: `int koila_group_rank(const koila_group *g);`

-1 for NULL.
"""
function koila_group_rank(g)
    fptr = _fptr_koila_group_rank[]
    fptr == C_NULL && _not_loaded(:koila_group_rank)
    ccall(fptr, Cint, (Ptr{koila_group},), g)
end

"""
    koila_group_size(g) -> Cint

C: `int koila_group_size(const koila_group *g);`

-1 for NULL.
"""
function koila_group_size(g)
    fptr = _fptr_koila_group_size[]
    fptr == C_NULL && _not_loaded(:koila_group_size)
    ccall(fptr, Cint, (Ptr{koila_group},), g)
end

"""
    koila_group_broadcast(g, ts, n, root) -> Ptr{koila_status}

C: `koila_status *koila_group_broadcast(koila_group *g, koila_tensor *const *ts, size_t n, int root);`

Every rank ends with root's values of the tensors (e.g. parameters before training). The tensors must be concrete, on the group's device (CPU for Gloo), and the same number and sizes on every rank: otherwise every rank fails (before anything is sent) with the failing rank's code. Gradients are not recorded. Not transactional: when a rank dies or times out during the transfer, the call fails with KOILA_ERROR_IO and a receiving rank's tensors may hold some of root's values and some of their own (the group is then unusable: free it, join a new one and broadcast again).
"""
function koila_group_broadcast(g, ts, n, root)
    fptr = _fptr_koila_group_broadcast[]
    fptr == C_NULL && _not_loaded(:koila_group_broadcast)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_group}, Ptr{Ptr{koila_tensor}}, Csize_t, Cint), g, ts, n, root)
end

"""
    koila_group_backward(g, loss, params, n) -> Ptr{koila_status}

C: `koila_status *koila_group_backward(koila_group *g, const koila_tensor *loss, koila_tensor *const *params, size_t n);`

Every rank passes the loss over its own shard of the batch (shards may differ in size) and the same params, in the same order (concrete leaves that require grad, listing every tensor the loss's gradients reach). Runs the planned backward locally (chunked under the local budget), then all-reduces so that on every rank the gradient of the loss over the union of the shards is added into the .grad of params: - a MEAN over the batch (e.g. cross_entropy with KOILA_REDUCTION_MEAN) weighs each rank by the count it averaged over (its shard's size; ignored targets excluded), so uneven shards give the full batch's gradient; - a loss of SUM reductions over the batch adds the ranks' gradients; - any other loss (a concrete one, no lazy batch) averages them. Terms that do not depend on the batch (a weight penalty) are counted once. Before any gradient changes, the ranks agree: a failure on any rank (bad arguments, planning, out of memory, a bad graph) fails the call on every rank with that rank's code and a message naming it ("rank 1 failed with KOILA_ERROR_OUT_OF_MEMORY: ..."), and no rank's gradients change. A rank that dies or does not arrive makes the call fail with KOILA_ERROR_IO on the others within the group's timeout (then, too, no gradient has changed). Gradients are all-reduced in buckets of 4 MiB (larger tensors alone, in place; the environment variable KOILA_GROUP_BUCKET_BYTES sets another size), two in flight at a time; the two staging buffers are allocated within the budget before the ranks agree, and when they do not fit on some rank every rank reduces each gradient alone, in place.
"""
function koila_group_backward(g, loss, params, n)
    fptr = _fptr_koila_group_backward[]
    fptr == C_NULL && _not_loaded(:koila_group_backward)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_group}, Ptr{koila_tensor}, Ptr{Ptr{koila_tensor}}, Csize_t), g, loss, params, n)
end

"""
    koila_group_free(g) -> Cvoid

C: `void koila_group_free(koila_group *g);`
"""
function koila_group_free(g)
    fptr = _fptr_koila_group_free[]
    fptr == C_NULL && _not_loaded(:koila_group_free)
    ccall(fptr, Cvoid, (Ptr{koila_group},), g)
end

"""
    koila_optimizer_adamw(out, params, n, lr, beta1, beta2, eps, weight_decay) -> Ptr{koila_status}

C: `koila_status *koila_optimizer_adamw(koila_optimizer **out, koila_tensor *const *params, size_t n, double lr, double beta1, double beta2, double eps, double weight_decay);`

AdamW: Adam with decoupled weight decay, as torch.optim.AdamW (the parameters shrink by lr * weight_decay before the Adam update; the gradient is not changed). The same parameter rules and ranges as koila_optimizer_adam.
"""
function koila_optimizer_adamw(out, params, n, lr, beta1, beta2, eps, weight_decay)
    fptr = _fptr_koila_optimizer_adamw[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_adamw)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_optimizer}}, Ptr{Ptr{koila_tensor}}, Csize_t, Cdouble, Cdouble, Cdouble, Cdouble, Cdouble), out, params, n, lr, beta1, beta2, eps, weight_decay)
end

"""
    koila_optimizer_set_lr(o, lr) -> Ptr{koila_status}

C: `koila_status *koila_optimizer_set_lr(koila_optimizer *o, double lr);`

Sets the learning rate of every later step (a schedule is the caller's loop calling this). lr must be >= 0 and finite. Saved and loaded with the optimizer's state.
"""
function koila_optimizer_set_lr(o, lr)
    fptr = _fptr_koila_optimizer_set_lr[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_set_lr)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_optimizer}, Cdouble), o, lr)
end

"""
    koila_optimizer_lr(o, out) -> Ptr{koila_status}

C: `koila_status *koila_optimizer_lr(const koila_optimizer *o, double *out);`

The learning rate in force.
"""
function koila_optimizer_lr(o, out)
    fptr = _fptr_koila_optimizer_lr[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_lr)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_optimizer}, Ptr{Cdouble}), o, out)
end

"""
    koila_optimizer_save(o, path) -> Ptr{koila_status}

C: `koila_status *koila_optimizer_save(const koila_optimizer *o, const char *path);`

Saves the optimizer's whole state: its kind, hyperparameters (the learning rate in force included), and for each parameter its step count and moment or momentum buffers. The file is versioned and ends with a CRC-32 of everything before it. Atomic, as koila_module_save: whatever happens to the process during the call, the file at path is afterwards either the complete old file or the complete new one; a failed write is KOILA_ERROR_IO with the old file as it was.
"""
function koila_optimizer_save(o, path)
    fptr = _fptr_koila_optimizer_save[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_save)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_optimizer}, Cstring), o, path)
end

"""
    koila_optimizer_load(o, path) -> Ptr{koila_status}

C: `koila_status *koila_optimizer_load(koila_optimizer *o, const char *path);`

Loads what koila_optimizer_save wrote into an optimizer of the same kind over parameters of the same number, dtypes and shapes, in the same order (the parameters' values are the module's: load them with koila_module_load). The file's hyperparameters replace the optimizer's. A mismatch (another kind, another number of parameters, a parameter of another dtype or shape) is KOILA_ERROR_INVALID_ARGUMENT naming the first one; a missing, truncated or corrupt file (its checksum does not match), or one written by a newer koila, is KOILA_ERROR_IO. Either way the optimizer is unchanged.
"""
function koila_optimizer_load(o, path)
    fptr = _fptr_koila_optimizer_load[]
    fptr == C_NULL && _not_loaded(:koila_optimizer_load)
    ccall(fptr, Ptr{koila_status}, (Ptr{koila_optimizer}, Cstring), o, path)
end

"""
    koila_rng_save(path) -> Ptr{koila_status}

C: `koila_status *koila_rng_save(const char *path);`

Saves the state of every random generator koila uses, which koila_manual_seed seeds: the CPU's, and each CUDA device's. Atomic, as koila_optimizer_save (versioned, with a CRC-32; a failed write is KOILA_ERROR_IO with the old file as it was). Planning never draws from these generators (probes, sample-mixing checks, KOILA_CHUNK_FASTEST's timing, calibration, and the attempt a retry after running out of memory replaces: the retry draws what it would have drawn), so a seeded step gives the same result whether or not its structure was planned before in the process, and a step after koila_rng_load the same as the step after the save in the run that saved. Dropout draws its masks chunk by chunk: a step is reproduced under the same budget and chunking options (a run in other chunks draws other, equally random masks).
"""
function koila_rng_save(path)
    fptr = _fptr_koila_rng_save[]
    fptr == C_NULL && _not_loaded(:koila_rng_save)
    ccall(fptr, Ptr{koila_status}, (Cstring,), path)
end

"""
    koila_rng_load(path) -> Ptr{koila_status}

C: `koila_status *koila_rng_load(const char *path);`

Loads what koila_rng_save wrote: every generator the file holds takes its saved state. A missing, truncated or corrupt file, one written by a newer koila, or a state this LibTorch's generator refuses is KOILA_ERROR_IO; a file holding a CUDA device this process does not have is KOILA_ERROR_INVALID_ARGUMENT naming it. Either way no generator changes. A file saved without CUDA leaves the CUDA generators as they are.
"""
function koila_rng_load(path)
    fptr = _fptr_koila_rng_load[]
    fptr == C_NULL && _not_loaded(:koila_rng_load)
    ccall(fptr, Ptr{koila_status}, (Cstring,), path)
end

"""
    koila_clip_grad_norm(out, params, n, max_norm) -> Ptr{koila_status}

C: `koila_status *koila_clip_grad_norm(double *out, koila_tensor *const *params, size_t n, double max_norm);`

Scales the gradients of params in place so that their joint 2-norm is at most max_norm, as torch.nn.utils.clip_grad_norm_: every gradient is multiplied by min(1, max_norm / (norm + 1e-6)). Writes the norm before clipping to *out. params are concrete leaves, each at most once (as for the optimizers); those without a gradient are skipped, and with none *out is 0. After koila_backward the gradients are the whole batch's, also when it ran in chunks. max_norm must be >= 0 and finite. A norm that is not finite (an inf or NaN in a gradient) is KOILA_ERROR_INVALID_ARGUMENT with the norm written to *out and no gradient changed (skip that step).
"""
function koila_clip_grad_norm(out, params, n, max_norm)
    fptr = _fptr_koila_clip_grad_norm[]
    fptr == C_NULL && _not_loaded(:koila_clip_grad_norm)
    ccall(fptr, Ptr{koila_status}, (Ptr{Cdouble}, Ptr{Ptr{koila_tensor}}, Csize_t, Cdouble), out, params, n, max_norm)
end

"""
    koila_tensor_from_dlpack(out, managed, versioned) -> Ptr{koila_status}

C: `koila_status *koila_tensor_from_dlpack(koila_tensor **out, void *managed, int versioned);`

DLPack (https://dmlc.github.io/dlpack/): sharing memory with other array libraries. koila.h does not include dlpack.h: the pointers are void *. Both forms of the exchange struct are taken and made: DLManagedTensor (versioned = 0, every DLPack) and DLManagedTensorVersioned (versioned = 1, DLPack >= 1.0), on every LibTorch koila builds against. A versioned other than 0 or 1 is KOILA_ERROR_INVALID_ARGUMENT, and then koila does not touch managed (it cannot know its layout). From: takes a DLManagedTensor * or DLManagedTensorVersioned * and owns it from then on, also when the call fails: koila calls its deleter exactly once (at once on failure, or when the last koila tensor sharing the memory is freed). No copy: the tensor shares the producer's memory, and writes through koila (an optimizer step) are seen by the producer. The result is concrete and has no batch dim (wrap it with koila_lazy). Refused with KOILA_ERROR_UNSUPPORTED: a major version other than 1; a device other than the CPU (or pinned host memory) or, in a CUDA build, a CUDA device; a dtype outside koila_dtype, or with lanes != 1; a read-only tensor (flag DLPACK_FLAG_BITMASK_READ_ONLY: koila's tensors are writable); negative strides; a data pointer plus byte_offset not aligned to the element size. Refused with KOILA_ERROR_INVALID_ARGUMENT: managed NULL, a negative ndim or size, NULL shape with ndim > 0, NULL data with elements. To: evaluates a lazy tensor first, then writes to *out a new DLManagedTensor * or DLManagedTensorVersioned * (DLPack 1.1) that shares the tensor's memory (its sizes and strides, any layout) and keeps it alive; the consumer calls its deleter once. The tensor's autograd history is not part of it (as torch.utils.dlpack.to_dlpack of a detached tensor). A dtype DLPack has no code for is KOILA_ERROR_UNSUPPORTED.
"""
function koila_tensor_from_dlpack(out, managed, versioned)
    fptr = _fptr_koila_tensor_from_dlpack[]
    fptr == C_NULL && _not_loaded(:koila_tensor_from_dlpack)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{koila_tensor}}, Ptr{Cvoid}, Cint), out, managed, versioned)
end

"""
    koila_tensor_to_dlpack(out, t, versioned) -> Ptr{koila_status}

C: `koila_status *koila_tensor_to_dlpack(void **out, const koila_tensor *t, int versioned);`
"""
function koila_tensor_to_dlpack(out, t, versioned)
    fptr = _fptr_koila_tensor_to_dlpack[]
    fptr == C_NULL && _not_loaded(:koila_tensor_to_dlpack)
    ccall(fptr, Ptr{koila_status}, (Ptr{Ptr{Cvoid}}, Ptr{koila_tensor}, Cint), out, t, versioned)
end

export libkoila_path, load_libkoila

end # module LibKoila
