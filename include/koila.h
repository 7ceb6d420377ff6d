/*
 * koila.h - the C API of koila: lazy LibTorch tensors that never run out of memory.
 *
 * This header is the contract. It is pure C99: no C++ and no LibTorch types appear here.
 *
 * Conventions
 *   - Every fallible call returns koila_status*. NULL means success. A non-NULL status
 *     carries a koila_code and a message; release it with koila_status_free().
 *   - Output parameters come first and are named `out`. What comes back through `T **out`
 *     belongs to the caller and is released once with koila_T_free(). Every _free accepts
 *     NULL, and handles may be freed in any order (a tensor keeps alive the graph it
 *     depends on).
 *   - After a failed call, every `T **out` holds NULL (other outputs are left untouched).
 *   - Flags (`int` arguments such as keepdim, train, training, ceil_mode, is_causal, flag,
 *     on) are strictly 0 or 1: any other value is KOILA_ERROR_INVALID_ARGUMENT, not "true".
 *   - Enum arguments (koila_dtype, koila_mode, koila_reduction) are read as the int they
 *     are passed as and range-checked: a value outside the enum is
 *     KOILA_ERROR_INVALID_ARGUMENT, naming the argument.
 *   - Arrays come as pointer + count; the pointer may be NULL only when the count is 0
 *     (or where a function says NULL takes a default).
 *   - Dims and sizes are int64_t; negative dims count from the end, as in PyTorch.
 *   - Devices are strings: "cpu", "cuda", "cuda:N".
 *   - Input buffers are copied; the caller keeps ownership of its memory.
 *   - A handle may move between threads but must not be used from two threads at once.
 *   - Text out (_to_string, _describe): writes at most `capacity` bytes, always
 *     NUL-terminated when capacity > 0, and sets *needed to the full length plus one.
 *     `buf` may be NULL when capacity is 0, to ask for the size.
 */
#ifndef KOILA_H
#define KOILA_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(KOILA_BUILDING_LIBRARY)
#    define KOILA_API __declspec(dllexport)
#  else
#    define KOILA_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__)
#  define KOILA_API __attribute__((visibility("default")))
#else
#  define KOILA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define KOILA_VERSION_MAJOR 0
#define KOILA_VERSION_MINOR 1
#define KOILA_VERSION_PATCH 0

/* Opaque handles. */
typedef struct koila_tensor koila_tensor;
typedef struct koila_status koila_status;
typedef struct koila_plan koila_plan;
typedef struct koila_module koila_module;
typedef struct koila_optimizer koila_optimizer;
typedef struct koila_group koila_group;
typedef struct koila_timeline koila_timeline;

typedef enum koila_code {
  KOILA_OK = 0,
  KOILA_ERROR_INVALID_ARGUMENT = 1, /* NULL where a handle is needed, bad dim, bad size */
  KOILA_ERROR_SHAPE = 2,            /* shapes that do not fit the op; message names both */
  KOILA_ERROR_DTYPE = 3,
  KOILA_ERROR_DEVICE = 4,           /* unknown or unavailable device */
  KOILA_ERROR_OUT_OF_MEMORY = 5,    /* not even a chunk of one sample fits the budget */
  KOILA_ERROR_NOT_SPLITTABLE = 6,   /* graph mixes samples across the batch and does not fit unsplit */
  KOILA_ERROR_IO = 7,               /* file missing, unreadable or corrupt */
  KOILA_ERROR_UNSUPPORTED = 8,
  KOILA_ERROR_INTERNAL = 9
} koila_code;

typedef enum koila_dtype {
  KOILA_FLOAT32 = 0,
  KOILA_FLOAT64 = 1,
  KOILA_FLOAT16 = 2,
  KOILA_BFLOAT16 = 3,
  KOILA_INT64 = 4,
  KOILA_INT32 = 5,
  KOILA_INT8 = 6,
  KOILA_UINT8 = 7,
  KOILA_BOOL = 8
} koila_dtype;

typedef enum koila_reduction {
  KOILA_REDUCTION_NONE = 0,
  KOILA_REDUCTION_MEAN = 1,
  KOILA_REDUCTION_SUM = 2
} koila_reduction;

typedef enum koila_mode { KOILA_MODE_FORWARD = 0, KOILA_MODE_TRAINING = 1 } koila_mode;

/* Passed as batch_dim to koila_lazy: defer the tensor but give it no batch dimension
   (everything computed from it is lazy, nothing is split along it). */
#define KOILA_NO_BATCH INT64_MIN

/* ------------------------------------------------------------------------------------ */
/* Library and status                                                                    */
/* ------------------------------------------------------------------------------------ */

/* "0.1.0". Static storage; never freed. */
KOILA_API const char *koila_version(void);
/* The code of a status; NULL (success) gives KOILA_OK. */
KOILA_API koila_code koila_status_code(const koila_status *s);
/* The message of a status; NULL gives "". Valid until the status is freed. */
KOILA_API const char *koila_status_message(const koila_status *s);
KOILA_API void koila_status_free(koila_status *s);
/* Seeds every random generator koila uses (randn, dropout) on every device. */
KOILA_API koila_status *koila_manual_seed(uint64_t seed);

/* ------------------------------------------------------------------------------------ */
/* Tensors                                                                                */
/* ------------------------------------------------------------------------------------ */

/* A concrete tensor holding a copy of `data` (row-major, nbytes == numel * element size).
   `shape` may be NULL when ndim is 0 (a scalar); `data` may be NULL when numel is 0. */
KOILA_API koila_status *koila_tensor_from_data(koila_tensor **out, const void *data,
                                               size_t nbytes, koila_dtype dtype,
                                               const int64_t *shape, size_t ndim,
                                               const char *device);
KOILA_API koila_status *koila_tensor_zeros(koila_tensor **out, const int64_t *shape,
                                           size_t ndim, koila_dtype dtype, const char *device);
KOILA_API koila_status *koila_tensor_ones(koila_tensor **out, const int64_t *shape,
                                          size_t ndim, koila_dtype dtype, const char *device);
/* Standard normal samples; floating dtypes only (KOILA_ERROR_DTYPE otherwise). */
KOILA_API koila_status *koila_tensor_randn(koila_tensor **out, const int64_t *shape,
                                           size_t ndim, koila_dtype dtype, const char *device);
KOILA_API void koila_tensor_free(koila_tensor *t);

/* The one line: wrap a tensor so that everything computed from it is deferred, and
   dimension batch_dim is the batch that may be split. batch_dim may be negative (counts
   from the end) or KOILA_NO_BATCH. The lazy tensor reads the current values of `t` every
   time it is evaluated (it does not copy them). Wrapping a lazy tensor again is allowed
   only with the same batch dim (the result is the same recipe). */
KOILA_API koila_status *koila_lazy(koila_tensor **out, const koila_tensor *t, int64_t batch_dim);

/* Metadata: never evaluates anything. */
/* Writes the rank to *ndim and the first min(ndim, capacity) sizes to dims. */
KOILA_API koila_status *koila_tensor_shape(const koila_tensor *t, int64_t *dims,
                                           size_t capacity, size_t *ndim);
KOILA_API koila_status *koila_tensor_dtype(const koila_tensor *t, koila_dtype *out);
/* The dim that carries the batch, or -1 when the tensor has none. */
KOILA_API koila_status *koila_tensor_batch_dim(const koila_tensor *t, int64_t *out);
KOILA_API koila_status *koila_tensor_is_lazy(const koila_tensor *t, int *out);

/* Reading values evaluates (split into chunks when the budget requires it). Reads do not
   record gradients. */
/* nbytes must equal numel * element size; data is written row-major. */
KOILA_API koila_status *koila_tensor_to_host(const koila_tensor *t, void *data, size_t nbytes);
/* The value of a one-element tensor (any dtype) as a double. */
KOILA_API koila_status *koila_tensor_item(const koila_tensor *t, double *out);
/* The tensor printed as LibTorch prints it. */
KOILA_API koila_status *koila_tensor_to_string(const koila_tensor *t, char *buf,
                                               size_t capacity, size_t *needed);
/* A concrete tensor with the value of t (t itself, shared, when t is already concrete).
   The result of evaluating a lazy tensor does not require grad: train through
   koila_backward on the lazy loss. */
KOILA_API koila_status *koila_eval(koila_tensor **out, const koila_tensor *t);

/* ------------------------------------------------------------------------------------ */
/* Autograd and training                                                                  */
/* ------------------------------------------------------------------------------------ */

/* Concrete floating-point leaves only (parameters). Lazy tensors are refused: gradients
   of a lazy graph flow to the concrete leaves it was built from. */
KOILA_API koila_status *koila_tensor_set_requires_grad(koila_tensor *t, int flag);
/* Backward from a scalar loss. With a lazy batch, runs forward+backward chunk by chunk
   under the memory budget and accumulates gradients so that they equal the full-batch
   gradients (mean and sum reductions over the batch are scaled exactly, also for uneven
   chunks). Gradients add into existing .grad, as in PyTorch. A lazy loss may be
   backpropagated any number of times (each call evaluates it again); a failed call
   leaves every gradient as it was. Where a weight already has a .grad (every chunk after
   the first, or a .grad zeroed in place), linear layers add their weight gradient into it
   inside the matrix product, and in chunked runs convolutions add theirs in eighths of
   their output channels, instead of making a whole new gradient first (values equal up to
   float rounding); koila's ops and the linear and convolution layers of modules alike. */
KOILA_API koila_status *koila_backward(const koila_tensor *loss);
/* The gradient of a concrete leaf (or of the tensor a lazy input wraps); *out is NULL
   when there is none. The returned tensor aliases the gradient. */
KOILA_API koila_status *koila_tensor_grad(koila_tensor **out, const koila_tensor *t);
/* Sets an existing gradient to zero in place (handles from koila_tensor_grad see it). */
KOILA_API koila_status *koila_tensor_zero_grad(koila_tensor *t);

/* ------------------------------------------------------------------------------------ */
/* Memory: budget, measurement, plan                                                      */
/*                                                                                        */
/* Reads and koila_backward plan before they run: they estimate the peak memory of the    */
/* work (parameters, gradients, inputs, activations kept for backward, temporaries, each  */
/* freed at its last use), and when the whole batch does not fit the device's budget they */
/* run it in chunks of the largest power of two of samples that fits (koila_set_chunking  */
/* can pick the fastest chunk that fits instead). Results and gradients equal the         */
/* unsplit ones (up to floating-point summation order). Dropout in training draws its     */
/* masks chunk by chunk, so they differ from an unsplit run's masks (as two unsplit runs' */
/* masks differ).                                                                         */
/*                                                                                        */
/* Where estimates come from (the plan's description names it): the run's own chunk       */
/* strategy simulated on meta tensors, nothing computed; calibrated by real probes of     */
/* the first chunk of 2 and 4 samples (1 or 2 for batches under 8), which catch what      */
/* backends allocate beyond the simulation (oneDNN, cuDNN, cuBLAS workspaces; at least    */
/* 64 bytes, for the scalars real kernels wrap into tensors). On the CPU that is added op */
/* by op: each op of the run's simulation gets what the probes took beyond it at the same */
/* op, so that a workspace counts where its kernel runs. Elsewhere (other devices; runs   */
/* whose ops the probes' do not match) it is added at the peak: for a chunk of a probe's  */
/* size what that probe showed, for others the most the probes showed, and beyond the     */
/* largest its growth a sample. Chunks of one sample are calibrated by a probe of their   */
/* own when a plan first needs them (backends choose other kernels for one sample): the   */
/* run's first two chunks, their gradients added into copies of the parameters as the     */
/* run adds them into .grad. When the                                                     */
/* simulation fails (an op without a meta kernel) the figures are measured instead:       */
/* real probes of 1, 2, 4, ... samples up to a quarter of the batch, and a line none of   */
/* them exceeds. Probes drop their gradients (.grad never changes), run on copies of      */
/* state an op changes in place (running statistics), restore the random generator, and   */
/* stay within the budget (a plan that refuses runs nothing). Every planned run records   */
/* its measured peak, and later plans of the same graph never use less.                   */
/* Cost, once per graph structure and mode (same ops, shapes, dtypes, devices and grad    */
/* flags; the last 512 structures are remembered, so a graph rebuilt every step costs it  */
/* once): a few simulations and at most about one step's work in probes (6 samples when   */
/* calibrating; when measuring, under one batch). Training simulates again, without       */
/* probing, when the .grad go from absent to zeroed (the second step of a loop).          */
/*                                                                                        */
/* On the CPU the budget is a hard limit during these planned runs: an allocation that    */
/* would take what tensors hold beyond it fails inside koila, the run rolls back (no      */
/* gradient has changed) and retries with half the chunk, so the peak stays within the    */
/* budget even where an estimate fell short. If chunks of one sample still overrun, the   */
/* call fails with KOILA_ERROR_OUT_OF_MEMORY and nothing has changed. On CUDA (built with */
/* it) koila plans what LibTorch's caching allocator reserves, not only what tensors      */
/* hold: the run's simulated allocations are replayed through a model of that allocator   */
/* (its 512-byte rounding, 2 MiB and 20 MiB segments, best fit and splitting), and what   */
/* its segments take beyond the tensors is part of the run's need                         */
/* (koila_plan_needed_bytes), as is what it already holds unused beside live tensors.     */
/* What koila changes in that allocator, which it shares with                             */
/* the caller's own CUDA work: during a planned run (and each calibration probe) it caps  */
/* what the allocator reserves (its memory fraction) at what the plan needs, never above  */
/* the budget, and lifts the cap when the run ends; when the allocator holds more than    */
/* the cap as the run starts, and before a retry, what it caches unused goes back to the  */
/* device (emptyCache). Nothing else: its settings (PYTORCH_CUDA_ALLOC_CONF, expandable   */
/* segments) stay the caller's, and koila plans for whichever are in force. Because the   */
/* cap is the plan's need, a kernel that takes whatever the allocator can give (cuDNN's   */
/* convolution workspace, 440 MiB for a small CNN's backward at batch 1024 on an H100     */
/* when the device has room) takes only what the plan leaves, and a plan peaks alike with */
/* and without room. Where a chunk that cannot be halved runs out under that cap, it runs */
/* once more under the budget. KOILA_CUDA_CAP=budget (read once, at the first plan) caps  */
/* at the budget instead, as koila did before: cuDNN then takes larger workspaces when    */
/* the budget allows them, and the estimates do not count them. While a sample-mixing     */
/* probe runs a module on CUDA (the first plan of a module call), cuDNN runs              */
/* deterministic and without benchmarking or TF32, and cuBLAS without TF32; these are     */
/* LibTorch's process-wide settings, put back when the probe ends.                        */
/*                                                                                        */
/* Threads share a device's budget: a planned run reserves its estimated peak while it    */
/* runs, and plans made meanwhile count what the running ones reserved and have not yet   */
/* allocated as in use, so they choose smaller chunks. A run that does not fit beside     */
/* the others even in chunks of one sample waits until one of them ends, then plans       */
/* again; it fails only when it does not fit alone.                                       */
/* ------------------------------------------------------------------------------------ */

/* Bytes koila may use on a device ("cpu", "cuda", "cuda:N"). 0 = automatic: what is in
   use plus the device's free memory (for CPU what the kernel reports available, within
   any cgroup limit; for CUDA what the driver reports free plus what the caching allocator
   holds unused), less a tenth of that free memory as a safety margin. The CPU's figure is
   read from the kernel at most every 50 ms (a reading costs as much as planning a small
   step); in between it follows what koila's own tensors take and give back. Thread-safe. */
KOILA_API koila_status *koila_set_memory_budget(const char *device, uint64_t bytes);
/* The budget in force (the automatic one resolved now). */
KOILA_API koila_status *koila_memory_budget(const char *device, uint64_t *out);

/* Bytes held by tensors on the device now and the most held at once since the last
   reset. CPU allocations are counted by koila's tracking allocator (installed when the
   library loads); CUDA figures come from LibTorch's caching allocator. Either pointer
   may be NULL. */
KOILA_API koila_status *koila_memory_stats(const char *device, uint64_t *current, uint64_t *peak);
KOILA_API koila_status *koila_memory_reset_peak(const char *device);

/* What evaluating t (KOILA_MODE_FORWARD) or a backward from t (KOILA_MODE_TRAINING)
   would do now, without running it. Fails as the run would: KOILA_ERROR_OUT_OF_MEMORY
   when not even a chunk of one sample fits, KOILA_ERROR_NOT_SPLITTABLE (naming the op)
   when the graph mixes samples across the batch and does not fit unsplit; the message
   is the plan's description. */
KOILA_API koila_status *koila_plan_new(koila_plan **out, const koila_tensor *t, koila_mode mode);
/* -1 when t has no lazy batch. */
KOILA_API int64_t koila_plan_batch_size(const koila_plan *p);
/* The largest chunk: a power of two, or the whole batch when it fits (-1: no batch). */
KOILA_API int64_t koila_plan_chunk_size(const koila_plan *p);
/* 1 when the whole batch runs at once. */
KOILA_API int64_t koila_plan_num_chunks(const koila_plan *p);
/* Estimated peak bytes on the device during the planned run, usage before it included. */
KOILA_API uint64_t koila_plan_peak_bytes(const koila_plan *p);
/* Estimated peak bytes if the batch ran unsplit. */
KOILA_API uint64_t koila_plan_full_peak_bytes(const koila_plan *p);
KOILA_API uint64_t koila_plan_budget_bytes(const koila_plan *p);
/* The budget the planned run needs: the bytes in use (and reserved by runs on other
   threads) when it was planned, plus its estimate with koila's margin, a tenth of the
   estimate, on top. The margin is for what an estimate cannot see: the allocator rounding
   sizes up, a kernel choosing another algorithm (and workspace) when it runs. On CUDA the
   need also has what the caching allocator reserves beyond the run's tensors (its
   segments and rounding, modelled on the run's simulated allocations; 22 MiB where the
   simulation cannot run), and what it holds unused when the plan is made in segments that
   also hold live tensors (PyTorch's "non-releasable" memory, which it cannot give back; not
   under expandable segments, whose free pages go back): koila's hard limit caps what that
   allocator reserves from the device, not only what tensors hold. A run fits
   when its need is at most the budget: a plan whose estimated peak (koila_plan_peak_bytes,
   without the margin) is below the budget may still not fit. koila_plan_describe and every
   refusal state the margin and the need. */
KOILA_API uint64_t koila_plan_needed_bytes(const koila_plan *p);
/* Bytes of activations a chunk of the plan frees in its forward and recomputes in its
   backward (see koila_set_recompute); 0 when nothing is recomputed, and for NULL.
   koila_plan_describe names what is recomputed and its cost in extra forward work;
   koila_plan_timeline shows it in the backward. */
KOILA_API uint64_t koila_plan_recomputed_bytes(const koila_plan *p);
/* The same if the batch ran unsplit. Under KOILA_CHUNK_LARGEST the batch is split (or the
   run refused, where it cannot be split) exactly when this exceeds the budget. */
KOILA_API uint64_t koila_plan_full_needed_bytes(const koila_plan *p);
/* A human-readable account: batch, chunk, chunks, estimated peak, budget, and why (e.g.
   which op prevents splitting). Text conventions as koila_tensor_to_string. */
KOILA_API koila_status *koila_plan_describe(const koila_plan *p, char *buf, size_t capacity, size_t *needed);
KOILA_API void koila_plan_free(koila_plan *p);

/* The memory timeline of a plan: the simulation its estimate comes from, run again (nothing
   is computed) while every top-level operator is observed, giving the bytes on the device
   op by op through the forward and, for TRAINING, the backward. unsplit = 1: the whole
   batch at once; 0: the plan's chunks (the simulation follows the first two chunks, as the
   estimate does: the first creates the gradients, the second adds into them; the same as
   unsplit when the plan runs unsplit). Byte figures include what was in use when the plan
   was made. The largest peak of the events is the simulated part of the plan's estimate;
   what the estimate adds beyond the simulation (calibration by real probes, peaks of
   earlier runs) is KOILA_PART_BEYOND_SIMULATION, so that the parts of
   koila_timeline_part add up to koila_plan_peak_bytes (unsplit = 0) or
   koila_plan_full_peak_bytes (unsplit = 1). Simulated when called, with the gradients and
   parameters as they are then. Fails with KOILA_ERROR_UNSUPPORTED when the plan has nothing
   to simulate (a concrete value) or its figures were measured because the simulation
   fails (the message says why). Release with koila_timeline_free. */
KOILA_API koila_status *koila_plan_timeline(koila_timeline **out, const koila_plan *p, int unsplit);
/* The number of events (at least 1). */
KOILA_API koila_status *koila_timeline_length(const koila_timeline *t, size_t *out);
/* Event i (0 <= i < length; KOILA_ERROR_INVALID_ARGUMENT otherwise): the operator's name
   ("aten::conv2d" in the forward, the autograd function such as "ConvolutionBackward0" in
   the backward; an op of a recomputed segment run again in the backward (koila_set_recompute)
   is named with " (recomputed)" after it, "aten::linear (recomputed)", in the backward phase,
   after the segment's "RecomputeBackward"; text conventions as koila_tensor_to_string), ... */
KOILA_API koila_status *koila_timeline_op(const koila_timeline *t, size_t i, char *buf,
                                          size_t capacity, size_t *needed);
typedef enum koila_phase { KOILA_PHASE_FORWARD = 0, KOILA_PHASE_BACKWARD = 1 } koila_phase;
/* ... its phase, ... */
KOILA_API koila_status *koila_timeline_phase(const koila_timeline *t, size_t i, koila_phase *out);
/* ... which chunk of the run it belongs to (0-based; 0 when unsplit), ... */
KOILA_API koila_status *koila_timeline_chunk(const koila_timeline *t, size_t i, int64_t *out);
/* ... the bytes held after it, ... */
KOILA_API koila_status *koila_timeline_live_bytes(const koila_timeline *t, size_t i, uint64_t *out);
/* ... and the most held while it ran (its temporaries included). */
KOILA_API koila_status *koila_timeline_peak_bytes(const koila_timeline *t, size_t i, uint64_t *out);
/* The event with the largest peak (the first of equals): where the simulated peak is. */
KOILA_API koila_status *koila_timeline_peak_index(const koila_timeline *t, size_t *out);
/* Where the memory goes at the peak. The parts add up to the plan's estimate of the run. */
typedef enum koila_memory_part {
  KOILA_PART_IN_USE = 0,      /* held before the run: parameters, inputs, optimizer state,
                                 buffers (measured by koila's allocator figures) */
  KOILA_PART_ACTIVATIONS = 1, /* allocated by the forward and still held at the peak: for
                                 TRAINING what autograd keeps for the backward, for FORWARD
                                 the results still needed after the op (simulated) */
  KOILA_PART_GRADIENTS = 2,   /* .grad of the leaves (parameters) held at the peak
                                 (simulated) */
  KOILA_PART_TEMPORARIES = 3, /* the rest of the peak: gradients of activations, values
                                 recomputed in the backward (koila_set_recompute), the
                                 buffers of the op at the peak (simulated) */
  KOILA_PART_BEYOND_SIMULATION = 4 /* what the estimate adds beyond the simulation:
                                      backend workspaces found by real probes
                                      (calibrated), peaks of earlier runs (observed) */
} koila_memory_part;
KOILA_API koila_status *koila_timeline_part(const koila_timeline *t, koila_memory_part part,
                                            uint64_t *out);
KOILA_API void koila_timeline_free(koila_timeline *t);

/* ------------------------------------------------------------------------------------ */
/* Chunking options                                                                       */
/*                                                                                        */
/* Global settings, thread-safe, like budgets.                                            */
/* ------------------------------------------------------------------------------------ */

/* How batch norm in training (koila_batch_norm with training = 1, and BatchNorm layers of
   TorchScript modules in training) is chunked. Global, thread-safe; read when a plan is
   made (koila_plan_new, or the plan of a read or backward), and the plan's description
   says which applied.
     - EXACT (the default): batch norm in training normalizes with the statistics of the
       whole batch, so it couples the batch: the graph runs unsplit or fails with
       KOILA_ERROR_NOT_SPLITTABLE, whose message names this option.
     - PER_CHUNK: when the batch is split, each chunk normalizes with its own mean and
       variance, as gradient accumulation does in every framework. Results and gradients
       are those of the chunks' losses weighted by their share of the batch (they differ
       from the unsplit ones). Running statistics end as one update with the whole batch's
       mean and unbiased variance would leave them, combined exactly from the chunks'
       statistics: one update per evaluation or backward, as an unsplit run makes (a
       module's num_batches_tracked counts one too). An unsplit run is unchanged.
   Under either policy, a planned run that fails (or rolls back to retry with a smaller
   chunk after running out of memory) leaves the running statistics and counters as they
   were, so that a retry updates them once.
   Other ops that mix samples still couple the batch. A module counts as coupled only by
   batch norm when, with its BatchNorm layers (submodules holding running_mean and
   running_var) switched to evaluation, changing one sample changes no other sample's
   output; BatchNorm without running statistics stays coupled. An unknown value is
   KOILA_ERROR_INVALID_ARGUMENT and changes nothing. */
typedef enum koila_batch_stats {
  KOILA_BATCH_STATS_EXACT = 0,    /* default: batch norm in training couples the batch */
  KOILA_BATCH_STATS_PER_CHUNK = 1 /* each chunk normalizes with its own statistics */
} koila_batch_stats;
KOILA_API koila_status *koila_set_batch_stats(koila_batch_stats policy);

/* Which chunk size a plan picks among those that fit the budget. Global, thread-safe; read
   when a plan is made; under FASTEST the plan's description says which chunk and why.
     - LARGEST (the default): the whole batch if it fits, else the largest power of two.
     - FASTEST: among the chunk sizes that fit, the one measured fastest. The candidates
       are LARGEST's choice and the powers of two below it that fit, 5 at most (for a
       batch of 256 that fits: 256, 128, 64, 32, 16). The first planned runs of a graph
       structure (as the plan memo of the Memory section tells them apart: mode included,
       and for a backward whether each .grad is absent, all zeros or neither) measure
       them, largest first: each run times the next candidate (the run is the measurement;
       nothing runs twice for it), in two rounds over the candidates, and a candidate's
       time is the faster of its two runs, so at most 10 runs measure. A round stops early
       at a candidate 25% or more slower than the best before it (smaller chunks rarely
       win back). Later runs use the fastest measured candidate that still fits, a smaller
       chunk counting as faster than a larger one only when it is 10% faster or more
       (timings vary by several percent from run to run); the times are remembered per
       structure, so a budget that changes changes only the candidates (one that shrinks
       lets smaller ones in, which are then measured). A run's time is its wall-clock time
       by a steady clock, planning excluded (a CUDA device is synchronized at both ends),
       and includes whatever slows it, such as runs on other threads; a run that runs out
       of memory and retries with a smaller chunk records no time. A plan (koila_plan_new
       too, with .grad as the run will find it) shows the chunk the next run uses and says
       why: the candidate it measures ("measuring candidate 2 of 5 (chunks of 128), round
       1 of 2"), or the fastest with the times measured. Results stay equal to the unsplit
       ones up to float rounding. A batch that cannot be split, and batch norm under
       KOILA_BATCH_STATS_PER_CHUNK (where the chunk size changes the results), keep
       LARGEST's choice.
   An unknown value is KOILA_ERROR_INVALID_ARGUMENT and changes nothing. */
typedef enum koila_chunking {
  KOILA_CHUNK_LARGEST = 0, /* default: whole batch if it fits, else the largest power of two */
  KOILA_CHUNK_FASTEST = 1  /* among the chunk sizes that fit, the one measured fastest */
} koila_chunking;
KOILA_API koila_status *koila_set_chunking(koila_chunking policy);

/* Recomputation: training when not even one sample fits.
   Process-wide, like koila_set_chunking. Under AS_NEEDED, a plan of a backward that finds no
   chunk that fits the budget (not even one sample; or, for a graph that mixes samples, such as
   batch norm in training under KOILA_BATCH_STATS_EXACT, not the whole batch) frees chosen
   activations during the forward and recomputes them during the backward: koila picks ranges
   of the ops in the order they run, each run again from the values it starts from when its
   backward comes, so that the run fits with as little extra forward work as it can find, then
   the largest chunk that fits with them. How they are chosen: a dynamic program over the run's
   order of ops (src/plan/recompute_choice.h), checked by simulating the recomputing run on meta
   tensors as every plan is, and calibrated as the same chunk without recomputation is.
   Gradients equal those of the same chunks without recomputation (bit for bit on the CPU,
   where the kernels are deterministic, but for the rounding of weight gradients that a split
   run adds straight into .grad); random ops (dropout, stochastic depth) replay their random
   numbers; batch norm's running statistics and a module's buffers are updated once, by the
   first run (the second runs on copies). KOILA_ERROR_OUT_OF_MEMORY / KOILA_ERROR_NOT_SPLITTABLE
   only when even the most recomputation koila can plan does not fit; the message then says
   the least budget that would. A plan that fits without recomputation recomputes nothing.
   Evaluations (no backward) never recompute: they keep nothing for a backward.
   Granularity: one op of koila's graph; inside a TorchScript module or .pt2 program call (one
   op of koila's graph), one node of the call's forward graph after koila inlined it: where
   recomputing koila's ops does not fit, such a call runs in segments of its graph, keeping only
   the values that cross between segments, each segment run again in its backward (cuts only
   where every crossing value is a tensor no later node writes in place, or holds no tensor).
   An unknown value is KOILA_ERROR_INVALID_ARGUMENT and changes nothing. */
typedef enum koila_recompute {
  KOILA_RECOMPUTE_OFF = 0,       /* never recompute: as before this section existed */
  KOILA_RECOMPUTE_AS_NEEDED = 1, /* default: only where no chunk fits without it */
  /* Recompute rather than split: where the unsplit run does not fit, the largest chunk that fits
     recomputing (the whole batch first), as AS_NEEDED chooses when no chunk fits; chunks without
     recomputation only where none fits recomputing. For whole-batch results (batch statistics,
     one pass) and for devices where one large chunk recomputing runs faster than small ones;
     `koila fit` asks with it for the largest batch that runs unsplit recomputing. */
  KOILA_RECOMPUTE_PREFERRED = 2
} koila_recompute;
KOILA_API koila_status *koila_set_recompute(koila_recompute policy);

/* Called after each chunk of a planned evaluation or backward, on the thread running it;
   what is "forward" or "backward"; done counts 1..total. NULL fn turns it off. */
typedef void (*koila_progress_fn)(void *user, const char *what, int64_t done, int64_t total);
/* Sets the one progress callback of the process (replacing any set before; NULL fn turns
   it off) and the `user` pointer it is passed, which koila never reads or frees.
   What is reported, per run that evaluates a lazy graph (a read, koila_eval) or runs
   koila_backward:
     - total is the number of chunks that run uses (koila_plan_num_chunks of its plan);
       an unsplit run is one chunk: one call with done = total = 1.
     - Evaluation: "forward" for each chunk.
     - Backward: "backward" for each chunk. When the loss is computed from values combined
       over the whole batch (e.g. a mean of a batched sum), the combining pass runs first
       and is reported as "forward", 1..total, then the backward chunks as "backward",
       1..total. A backward from a concrete loss reports "backward" 1 of 1.
     - After running out of memory the run rolls back and retries with half the chunk:
       the counts start again at 1 with the retry's (larger) total.
   Not reported: planning (koila_plan_new, and the probes and simulations any plan runs),
   reads of concrete tensors (nothing is evaluated).
   The callback runs on the thread doing the run, while that run holds its share of the
   budget; runs on several threads call it concurrently. It must return (not longjmp or
   throw through koila) and should be quick. From the callback, koila functions that do
   not run a plan (koila_set_progress, metadata, freeing handles) may be called; reads of
   lazy tensors, koila_eval of one, koila_backward from a lazy loss and koila_plan_new
   fail there with KOILA_ERROR_UNSUPPORTED (they would run inside the calling run), and
   what runs from the callback reports nothing. */
KOILA_API koila_status *koila_set_progress(koila_progress_fn fn, void *user);

/* ------------------------------------------------------------------------------------ */
/* Operators                                                                              */
/*                                                                                        */
/* All return a new tensor through `out`; the result is lazy when any input is lazy, else */
/* computed at once. Shape and dtype errors are reported by the call that builds the op,  */
/* never later at evaluation. Optional tensors (bias, weight, masks) may be NULL. Arrays  */
/* of ints come as pointer + count. Broadcasting and dtype promotion follow PyTorch.      */
/* ------------------------------------------------------------------------------------ */

/* Generated from src/ops/ops.toml by scripts/gen_ops.py: edit the table, not this part. */

/* Elementwise, broadcasting. */
KOILA_API koila_status *koila_add(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_sub(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_mul(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
/* True division: integer inputs give a floating result. */
KOILA_API koila_status *koila_div(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_pow(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_maximum(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_minimum(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
/* Comparisons give KOILA_BOOL. */
KOILA_API koila_status *koila_eq(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_ne(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_lt(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_le(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_gt(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_ge(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);

/* With a scalar. */
KOILA_API koila_status *koila_add_scalar(koila_tensor **out, const koila_tensor *a, double s);
KOILA_API koila_status *koila_sub_scalar(koila_tensor **out, const koila_tensor *a, double s);
KOILA_API koila_status *koila_mul_scalar(koila_tensor **out, const koila_tensor *a, double s);
KOILA_API koila_status *koila_div_scalar(koila_tensor **out, const koila_tensor *a, double s);
KOILA_API koila_status *koila_pow_scalar(koila_tensor **out, const koila_tensor *a, double s);

/* Unary. gelu, silu and hardswish need a floating x (KOILA_ERROR_DTYPE otherwise). */
KOILA_API koila_status *koila_neg(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_abs(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_exp(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_log(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_sqrt(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_rsqrt(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_sin(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_cos(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_tanh(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_sigmoid(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_relu(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_gelu(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_silu(koila_tensor **out, const koila_tensor *x);
/* The error function; integer inputs give a floating result. */
KOILA_API koila_status *koila_erf(koila_tensor **out, const koila_tensor *x);
/* x * relu6(x + 3) / 6. */
KOILA_API koila_status *koila_hardswish(koila_tensor **out, const koila_tensor *x);
KOILA_API koila_status *koila_leaky_relu(koila_tensor **out, const koila_tensor *x, double slope);
/* lo <= hi is not required (as in PyTorch, values end up at hi when lo > hi). */
KOILA_API koila_status *koila_clamp(koila_tensor **out, const koila_tensor *x, double lo, double hi);
KOILA_API koila_status *koila_softmax(koila_tensor **out, const koila_tensor *x, int64_t dim);
KOILA_API koila_status *koila_log_softmax(koila_tensor **out, const koila_tensor *x, int64_t dim);
/* 0 <= p <= 1. With train == 0 the input passes through unchanged. */
KOILA_API koila_status *koila_dropout(koila_tensor **out, const koila_tensor *x, double p, int train);

/* Linear algebra. matmul follows torch.matmul (1-D, 2-D and broadcast batched cases);
   linear computes x @ weight^T + bias with weight [out, in]. */
KOILA_API koila_status *koila_matmul(koila_tensor **out, const koila_tensor *a, const koila_tensor *b);
KOILA_API koila_status *koila_linear(koila_tensor **out, const koila_tensor *x,
                                     const koila_tensor *weight, const koila_tensor *bias);

/* Convolution, pooling and upsampling: 2-element arrays for 2d, 1-element for 1d. A NULL
   array takes PyTorch's default: stride = kernel size for pooling and 1 for convolution,
   padding 0, dilation 1. Inputs may be batched [N, C, ...] or unbatched [C, ...].
   upsample_nearest2d repeats every pixel scale[0] x scale[1] times (F.interpolate's
   "nearest" by whole factors). */
KOILA_API koila_status *koila_conv1d(koila_tensor **out, const koila_tensor *x, const koila_tensor *w,
                                     const koila_tensor *bias, const int64_t *stride,
                                     const int64_t *padding, const int64_t *dilation, int64_t groups);
KOILA_API koila_status *koila_conv2d(koila_tensor **out, const koila_tensor *x, const koila_tensor *w,
                                     const koila_tensor *bias, const int64_t *stride,
                                     const int64_t *padding, const int64_t *dilation, int64_t groups);
KOILA_API koila_status *koila_max_pool2d(koila_tensor **out, const koila_tensor *x,
                                         const int64_t *kernel, const int64_t *stride,
                                         const int64_t *padding, int ceil_mode);
KOILA_API koila_status *koila_avg_pool2d(koila_tensor **out, const koila_tensor *x,
                                         const int64_t *kernel, const int64_t *stride,
                                         const int64_t *padding, int ceil_mode);
KOILA_API koila_status *koila_adaptive_avg_pool2d(koila_tensor **out, const koila_tensor *x,
                                                  const int64_t *output_size);
KOILA_API koila_status *koila_upsample_nearest2d(koila_tensor **out, const koila_tensor *x,
                                                 const int64_t *scale);

/* Normalization and embedding. batch_norm normalizes over every dim but dim 1; in training
   it uses the batch statistics (and updates running_mean/var, when given, each time it is
   evaluated), which mixes samples across the batch. */
KOILA_API koila_status *koila_batch_norm(koila_tensor **out, const koila_tensor *x,
                                         const koila_tensor *weight, const koila_tensor *bias,
                                         const koila_tensor *running_mean,
                                         const koila_tensor *running_var, int training, double momentum,
                                         double eps);
KOILA_API koila_status *koila_layer_norm(koila_tensor **out, const koila_tensor *x,
                                         const int64_t *normalized_shape, size_t n,
                                         const koila_tensor *weight, const koila_tensor *bias,
                                         double eps);
/* Rows of weight [num, dim] picked by integer indices of any shape: indices.shape + [dim]. */
KOILA_API koila_status *koila_embedding(koila_tensor **out, const koila_tensor *weight,
                                        const koila_tensor *indices);

/* Reductions. dims NULL or ndims 0 = all dims. */
KOILA_API koila_status *koila_sum(koila_tensor **out, const koila_tensor *x, const int64_t *dims,
                                  size_t ndims, int keepdim);
KOILA_API koila_status *koila_mean(koila_tensor **out, const koila_tensor *x, const int64_t *dims,
                                   size_t ndims, int keepdim);
KOILA_API koila_status *koila_amax(koila_tensor **out, const koila_tensor *x, const int64_t *dims,
                                   size_t ndims, int keepdim);
KOILA_API koila_status *koila_amin(koila_tensor **out, const koila_tensor *x, const int64_t *dims,
                                   size_t ndims, int keepdim);
/* KOILA_INT64 indices of the largest value along dim. */
KOILA_API koila_status *koila_argmax(koila_tensor **out, const koila_tensor *x, int64_t dim,
                                     int keepdim);

/* Shape. reshape accepts one -1. */
KOILA_API koila_status *koila_reshape(koila_tensor **out, const koila_tensor *x, const int64_t *shape,
                                      size_t ndim);
KOILA_API koila_status *koila_permute(koila_tensor **out, const koila_tensor *x, const int64_t *dims,
                                      size_t ndim);
KOILA_API koila_status *koila_transpose(koila_tensor **out, const koila_tensor *x, int64_t d0,
                                        int64_t d1);
KOILA_API koila_status *koila_flatten(koila_tensor **out, const koila_tensor *x, int64_t start,
                                      int64_t end);
/* Removes dim when its size is 1; otherwise returns x's shape unchanged (as PyTorch). */
KOILA_API koila_status *koila_squeeze(koila_tensor **out, const koila_tensor *x, int64_t dim);
KOILA_API koila_status *koila_unsqueeze(koila_tensor **out, const koila_tensor *x, int64_t dim);
KOILA_API koila_status *koila_cat(koila_tensor **out, koila_tensor *const *ts, size_t n, int64_t dim);
KOILA_API koila_status *koila_stack(koila_tensor **out, koila_tensor *const *ts, size_t n, int64_t dim);
KOILA_API koila_status *koila_narrow(koila_tensor **out, const koila_tensor *x, int64_t dim,
                                     int64_t start, int64_t length);
/* index: 1-D integer tensor. */
KOILA_API koila_status *koila_index_select(koila_tensor **out, const koila_tensor *x, int64_t dim,
                                           const koila_tensor *index);

/* Losses. cross_entropy takes logits [N, C, ...] and either class indices [N, ...]
   (integer) or class probabilities shaped like the logits; nll_loss takes log-probabilities
   and class indices. Class index -100 is ignored, as in PyTorch. */
KOILA_API koila_status *koila_cross_entropy(koila_tensor **out, const koila_tensor *logits,
                                            const koila_tensor *target, koila_reduction r);
KOILA_API koila_status *koila_nll_loss(koila_tensor **out, const koila_tensor *log_probs,
                                       const koila_tensor *target, koila_reduction r);
KOILA_API koila_status *koila_mse_loss(koila_tensor **out, const koila_tensor *a, const koila_tensor *b,
                                       koila_reduction r);
KOILA_API koila_status *koila_l1_loss(koila_tensor **out, const koila_tensor *a, const koila_tensor *b,
                                      koila_reduction r);
KOILA_API koila_status *koila_binary_cross_entropy_with_logits(koila_tensor **out,
                                                               const koila_tensor *logits,
                                                               const koila_tensor *target,
                                                               koila_reduction r);

/* Attention: softmax(q k^T / sqrt(E) + mask) v with q [..., L, E], k [..., S, E], v [...,
   S, Ev]. attn_mask (optional) broadcasts to [..., L, S]: a KOILA_BOOL mask keeps the
   positions that are true, a floating mask is added. is_causal masks j > i; it may be
   combined with attn_mask. On the CPU with LibTorch 2.x it runs PyTorch's own
   scaled_dot_product_attention (flash attention where PyTorch takes it, which keeps no [L,
   S] weights for the backward); with both a mask and is_causal, on other devices and with
   LibTorch 1.13, the weights are computed and kept. */
KOILA_API koila_status *koila_scaled_dot_product_attention(koila_tensor **out, const koila_tensor *q,
                                                           const koila_tensor *k, const koila_tensor *v,
                                                           const koila_tensor *attn_mask,
                                                           int is_causal);

/* End of the generated operators. */

/* ------------------------------------------------------------------------------------ */
/* Modules and optimizers                                                                 */
/*                                                                                        */
/* TorchScript modules saved from Python (torch.jit.script or torch.jit.trace, then save) */
/* or from C++. A module call is part of the lazy graph: its result's shape, dtype and    */
/* batch dim are known when the call is built (koila runs the module on meta tensors, and */
/* on a probe of at most three real samples to check that it keeps samples apart), and    */
/* the planner estimates and splits it like any op. A module that mixes samples across    */
/* the batch (batch norm in training, a reduction over the batch) couples the batch.      */
/* koila runs modules operator by operator (graph executor optimization off, on its own   */
/* clone of the module's methods), so that estimates follow exactly what runs; the        */
/* caller's own runs of the module are not affected. If an op inside a module has no Meta */
/* kernel in this LibTorch, shapes come from the probe and the plan's estimate is coarse  */
/* (its description says so) and does not see the module's inner activations.            */
/*                                                                                        */
/* What a call's meta runs and probe find is remembered per structure of call, so that a */
/* training loop that calls a module on a new batch every step infers it once, not every  */
/* step. A structure is: the module handle (a module loaded again starts afresh), the     */
/* training flag of each of its submodules, and for each input whether it is lazy, its    */
/* dtype, device, batch dim and shape apart from the batch size; batches of one, of two   */
/* and of three or more samples are probed differently and count as three structures.    */
/* Changing any of these infers the call anew (koila_module_train, another input shape).  */
/* What changes between steps does not: parameters, buffers and the inputs' contents      */
/* change the values a call computes, not its result's shape, where its batch goes or     */
/* whether it mixes samples, because the memo is used only for modules whose shapes come  */
/* from the meta runs, where no op can branch on a tensor's values. At a batch size the   */
/* structure was not called with yet, one meta run checks that the result still follows  */
/* the batch size along the same dim; a module whose result depends on the batch size in  */
/* any other way (or that has ops without Meta kernels) is inferred at every call. A      */
/* module's other attributes (those its forward reads besides `training`) are not part of */
/* the structure: koila's API cannot change them.                                         */
/* ------------------------------------------------------------------------------------ */

/* Loads a module onto a device ("cpu", "cuda", "cuda:N"): a TorchScript file, or a .pt2
   archive written by torch.export.save (see "Exported programs" below; the file's content
   decides, not its name). A missing, unreadable or corrupt file is KOILA_ERROR_IO with the
   path in the message; a program koila cannot run is KOILA_ERROR_UNSUPPORTED naming what. */
KOILA_API koila_status *koila_module_load(koila_module **out, const char *path, const char *device);
/* Saves the module with its current parameters and buffers, in the form it was loaded from
   (TorchScript, or a .pt2 archive that torch.export.load reads). Atomic: the file is written
   beside path (as ".NAME.koila-PID-N.tmp"), flushed to disk and renamed over path, and the
   folder is flushed, so that whatever happens to the process during the call, path holds
   afterwards the complete old file or the complete new one. A save killed midway can leave
   its temporary behind; the next save to the same path removes it. KOILA_ERROR_IO when the
   file cannot be written (a missing folder, a full disk, a file size limit), with path as it
   was. */
KOILA_API koila_status *koila_module_save(const koila_module *m, const char *path);
/* The result of m.forward(inputs[0], ..., inputs[n-1]); lazy if any input is, else computed
   at once (recording gradients, as eager LibTorch). The module must return one tensor
   (KOILA_ERROR_UNSUPPORTED otherwise). Inputs the module rejects fail here, with the
   module's complaint in the message: KOILA_ERROR_INVALID_ARGUMENT for the wrong number or
   kind of arguments, KOILA_ERROR_SHAPE for shapes it does not accept. The call runs the
   module as it is when the call is built (training flag included, see
   koila_module_train); parameters and buffers are shared, so updates to them are seen by
   every later evaluation. Running it on meta tensors and on the probe changes no buffer
   (batch norm statistics) and no random generator state. */
KOILA_API koila_status *koila_module_forward(koila_tensor **out, koila_module *m,
                                             koila_tensor *const *inputs, size_t n);
/* Sets the training flag (on: 1, off: 0) of the module and its submodules; it applies to
   calls built afterwards. An exported program keeps the mode it was exported in: asking for
   the other is KOILA_ERROR_UNSUPPORTED naming it (see "Exported programs"). */
KOILA_API koila_status *koila_module_train(koila_module *m, int on);
/* 1 when the module is in training mode. */
KOILA_API koila_status *koila_module_is_training(const koila_module *m, int *out);
/* Parameters of the module and its submodules, in the order of named_parameters(). */
KOILA_API koila_status *koila_module_num_parameters(const koila_module *m, size_t *out);
/* Aliases the module's i-th parameter: gradients from koila_backward and optimizer updates
   are seen by the module, and koila_tensor_set_requires_grad on it changes the module's
   parameter. Modules saved from Python keep requires_grad; modules made in C++ with
   register_parameter do not set it. */
KOILA_API koila_status *koila_module_parameter(koila_tensor **out, koila_module *m, size_t i);
/* The dotted name of the i-th parameter ("conv1.weight"). Text conventions as
   koila_tensor_to_string. */
KOILA_API koila_status *koila_module_parameter_name(const koila_module *m, size_t i, char *buf,
                                                    size_t capacity, size_t *needed);
/* Lazy results built from the module keep what they need alive: freeing the module
   handle first is safe. */
KOILA_API void koila_module_free(koila_module *m);

/* ------------------------------------------------------------------------------------ */
/* Exported programs and modules with several results                                    */
/*                                                                                        */
/* PyTorch 2.x deprecates TorchScript in favour of torch.export. A program saved with     */
/*   ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},)) */
/*   torch.export.save(ep, "model.pt2")                                                   */
/* loads with koila_module_load and trains like a TorchScript module: each node of its    */
/* graph calls its ATen operator by name and exact overload through LibTorch's dispatcher, */
/* with autograd, so its calls are estimated, split into chunks and backpropagated as any  */
/* module's. Read: .pt2 archives of format version 0 whose program has schema version 8    */
/* (what torch.export.save writes from PyTorch 2.7 on, 2.11 to 2.14 included), weights    */
/* stored raw (not pickled). Refused with KOILA_ERROR_UNSUPPORTED, naming what: other     */
/* versions, operators this LibTorch lacks (LibTorch 1.13 lacks every operator newer than */
/* it, scaled_dot_product_attention among them), higher-order operators (control flow,    */
/* torch.no_grad() regions), custom objects, inputs that are not tensors, and programs    */
/* that change their inputs or parameters in place. Its parameters and buffers are listed */
/* in PyTorch's named_parameters() / named_buffers() order, with their dotted names.      */
/*                                                                                        */
/* A program keeps what it was exported with:                                             */
/* - its mode: batch norm and dropout take training or evaluation as a constant, so        */
/*   koila_module_train with the other mode is KOILA_ERROR_UNSUPPORTED and                */
/*   koila_module_is_training reports the exported mode (a program without such operators */
/*   accepts both and reports the last set, training at first);                           */
/* - its shapes: an input dim exported as a constant must be given that size              */
/*   (KOILA_ERROR_SHAPE). A program exported without a dynamic batch dim runs whole; a    */
/*   plan that must split it is KOILA_ERROR_NOT_SPLITTABLE saying to export it with        */
/*   dynamic_shapes. Sizes computed from a dynamic dim are computed again for each chunk.  */
/* Operators given the device of export (torch.zeros(..., device=x.device)) run on the     */
/* device the program was loaded onto.                                                    */
/* ------------------------------------------------------------------------------------ */

typedef enum koila_module_kind {
  KOILA_MODULE_TORCHSCRIPT = 0,
  KOILA_MODULE_EXPORTED = 1
} koila_module_kind;
/* What the module was loaded from. Module getters keep their siblings' order (module first,
   out last). */
KOILA_API koila_status *koila_module_kind_of(const koila_module *m, koila_module_kind *out);

/* Buffers (batch norm running statistics, masks, ...) of the module and its submodules, in
   the order of named_buffers(), for both kinds: count, alias (updates koila makes, such as
   running statistics after a training step, are seen through it), dotted name (text
   conventions as koila_tensor_to_string). */
KOILA_API koila_status *koila_module_num_buffers(const koila_module *m, size_t *out);
KOILA_API koila_status *koila_module_buffer(koila_tensor **out, koila_module *m, size_t i);
KOILA_API koila_status *koila_module_buffer_name(const koila_module *m, size_t i, char *buf,
                                                 size_t capacity, size_t *needed);

/* The results of m.forward(inputs...) when it returns several tensors: a tuple, a list or a
   dict, nested ones flattened depth-first (dict entries in the order the module returns
   them; an exported program's results in its output order, which is that flattening).
   Writes their count to *count; when capacity >= *count, writes one handle per result to
   out[0..*count-1], each as koila_module_forward's result would be (lazy if any input is,
   else computed at once; with its own batch dim or none), and NULL for a None entry. When
   capacity < *count it writes no handle and fails with KOILA_ERROR_INVALID_ARGUMENT naming
   the count, so that a call with capacity 0 (out may then be NULL) asks for the count; that
   call runs nothing (the count comes from a run on meta tensors, or on the probe where
   that fails). A module that returns one tensor gives 1; a result of another type (an int,
   a string) is KOILA_ERROR_UNSUPPORTED naming it. An evaluation runs the module once for
   all the results it needs: a training step may take its loss from several (koila_add of
   two heads' losses) and koila_backward runs the module once per chunk. Reading results
   one by one is one evaluation each, as reading any two lazy tensors is. A result that does not carry the batch when the
   inputs do (a sum over the batch) mixes samples, so the whole call does: it runs unsplit.
   The module's results must keep their structure from call to call (which are None);
   where a later run gives None for a result inferred as a tensor, that run fails with
   KOILA_ERROR_UNSUPPORTED. Calls are inferred once per structure, as koila_module_forward's,
   each result as a call of its own. */
KOILA_API koila_status *koila_module_forward_all(koila_tensor **out, size_t capacity,
                                                 size_t *count, koila_module *m,
                                                 koila_tensor *const *inputs, size_t n);

/* Optimizers over concrete floating-point leaves that require grad (each at most once),
   as torch::optim: SGD with momentum and weight decay (L2, added to the gradient), Adam
   with weight decay (L2; koila_optimizer_adamw decouples it). Parameters without a gradient are skipped by a step.
   lr, momentum, weight_decay and eps must be >= 0 and finite; 0 <= beta < 1. */
KOILA_API koila_status *koila_optimizer_sgd(koila_optimizer **out, koila_tensor *const *params,
                                            size_t n, double lr, double momentum,
                                            double weight_decay);
KOILA_API koila_status *koila_optimizer_adam(koila_optimizer **out, koila_tensor *const *params,
                                             size_t n, double lr, double beta1, double beta2,
                                             double eps, double weight_decay);
/* Updates the parameters in place from their gradients. */
KOILA_API koila_status *koila_optimizer_step(koila_optimizer *o);
/* Sets the parameters' gradients to zero in place (as koila_tensor_zero_grad), and gives
   each parameter without one a zero gradient: every step's backward then starts alike (a
   chunked backward adds into an existing gradient in another order than it makes a new
   one), which a run resumed from a checkpoint needs to continue bit for bit. */
KOILA_API koila_status *koila_optimizer_zero_grad(koila_optimizer *o);
KOILA_API void koila_optimizer_free(koila_optimizer *o);

/* ------------------------------------------------------------------------------------ */
/* Process groups: data parallel across processes and GPUs                                */
/*                                                                                        */
/* Every process holds the model and trains on its own shard of the batch; the gradients  */
/* are combined so that every rank ends with those of the loss over the union of the      */
/* shards. Through LibTorch's c10d: Gloo for CPU tensors, NCCL for CUDA tensors (only when */
/* LibTorch was built with it), with c10d's TCPStore or FileStore for the rendezvous.     */
/* Collectives are matched by order: every rank makes the same group calls in the same    */
/* order. A collective that fails (a rank died, or did not arrive within the group's      */
/* timeout) is KOILA_ERROR_IO and leaves the group unusable: later calls fail at once     */
/* with KOILA_ERROR_IO; free it and join a new one.                                       */
/* ------------------------------------------------------------------------------------ */

/* Joins a group of world_size processes as `rank` (0 <= rank < world_size). backend:
   "gloo" or "nccl"; init: "tcp://HOST:PORT" (rank 0 listens there) or "file:///PATH" (a
   file every rank can reach, which must not be left over from an earlier group). Gloo
   connects through the interface GLOO_SOCKET_IFNAME names, else loopback when init is a
   file or a loopback address, else this host's address. timeout_ms (> 0) bounds the
   rendezvous and every later collective. Fails with KOILA_ERROR_IO when the others do not
   join within timeout_ms (or init cannot be reached or created), KOILA_ERROR_UNSUPPORTED
   for "nccl" when LibTorch has no NCCL, KOILA_ERROR_INVALID_ARGUMENT for an unknown
   backend, a malformed init or a rank out of range. A process that left SIGPIPE at its
   default disposition has it ignored from this call on: Gloo's writes to the socket of a
   rank that died raise it, and it would kill this process instead of failing the call with
   KOILA_ERROR_IO (Python ignores SIGPIPE at startup for the same reason). A handler or
   disposition the program set itself is kept. */
KOILA_API koila_status *koila_group_new(koila_group **out, const char *backend, const char *init,
                                        int rank, int world_size, int64_t timeout_ms);
/* Joins the group that a launcher describes in the environment, as torchrun
   (torch.distributed.run; --no-python for programs that are not Python) sets it for each
   worker: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and LOCAL_RANK (the CUDA device of
   "nccl" is cuda:LOCAL_RANK). Where TORCHELASTIC_USE_AGENT_STORE is "True", the store at
   MASTER_ADDR:MASTER_PORT is the launcher's and the worker joins it as torch.distributed's own
   env:// initialization does (a client, its keys under "/worker/attempt_N" for
   TORCHELASTIC_RESTART_COUNT=N, so that restarted workers meet afresh); otherwise rank 0
   listens there. Gloo connects through the interface GLOO_SOCKET_IFNAME names, else loopback
   when MASTER_ADDR is a loopback address, else this machine's address on the route to
   MASTER_ADDR. A missing or malformed variable is KOILA_ERROR_INVALID_ARGUMENT naming it.
   Timeouts and failures as koila_group_new (a store that cannot be reached: KOILA_ERROR_IO
   within timeout_ms).
   Who can join: c10d's store and Gloo's connections have no authentication. Anything that
   reaches MASTER_ADDR:MASTER_PORT (or the ports Gloo's pairs listen on) can join or disturb
   the group; a stranger's connection fails the group's calls with KOILA_ERROR_IO (within
   the timeout), it does not crash or hang them. Keep a group on a private network: a
   MASTER_ADDR on an interface only the workers reach (not 0.0.0.0, not a public address),
   GLOO_SOCKET_IFNAME naming that interface, and a firewall closing the ports to others. */
KOILA_API koila_status *koila_group_new_from_env(koila_group **out, const char *backend,
                                                 int64_t timeout_ms);
/* LOCAL_RANK for a group joined from the environment; the rank for one made by
   koila_group_new; -1 for NULL. */
KOILA_API int koila_group_local_rank(const koila_group *g);
/* -1 for NULL. */
KOILA_API int koila_group_rank(const koila_group *g);
/* -1 for NULL. */
KOILA_API int koila_group_size(const koila_group *g);
/* Every rank ends with root's values of the tensors (e.g. parameters before training).
   The tensors must be concrete, on the group's device (CPU for Gloo), and the same number
   and sizes on every rank: otherwise every rank fails (before anything is sent) with the
   failing rank's code. Gradients are not recorded. Not transactional: when a rank dies
   or times out during the transfer, the call fails with KOILA_ERROR_IO and a receiving
   rank's tensors may hold some of root's values and some of their own (the group is
   then unusable: free it, join a new one and broadcast again). */
KOILA_API koila_status *koila_group_broadcast(koila_group *g, koila_tensor *const *ts, size_t n,
                                              int root);
/* Every rank passes the loss over its own shard of the batch (shards may differ in size)
   and the same params, in the same order (concrete leaves that require grad, listing
   every tensor the loss's gradients reach). Runs the planned backward locally (chunked
   under the local budget), then all-reduces so that on every rank the gradient of the
   loss over the union of the shards is added into the .grad of params:
     - a MEAN over the batch (e.g. cross_entropy with KOILA_REDUCTION_MEAN) weighs each
       rank by the count it averaged over (its shard's size; ignored targets excluded), so
       uneven shards give the full batch's gradient;
     - a loss of SUM reductions over the batch adds the ranks' gradients;
     - any other loss (a concrete one, no lazy batch) averages them.
   Terms that do not depend on the batch (a weight penalty) are counted once.
   Before any gradient changes, the ranks agree: a failure on any rank (bad arguments,
   planning, out of memory, a bad graph) fails the call on every rank with that rank's
   code and a message naming it ("rank 1 failed with KOILA_ERROR_OUT_OF_MEMORY: ..."),
   and no rank's gradients change. A rank that dies or does not arrive makes the call fail
   with KOILA_ERROR_IO on the others within the group's timeout (then, too, no gradient
   has changed). Gradients are all-reduced in buckets of 4 MiB (larger tensors alone, in
   place; the environment variable KOILA_GROUP_BUCKET_BYTES sets another size), two in
   flight at a time; the two staging buffers are allocated within the budget before the
   ranks agree, and when they do not fit on some rank every rank reduces each gradient
   alone, in place. */
KOILA_API koila_status *koila_group_backward(koila_group *g, const koila_tensor *loss,
                                             koila_tensor *const *params, size_t n);
KOILA_API void koila_group_free(koila_group *g);

/* ------------------------------------------------------------------------------------ */
/* Checkpoints, optimizers and exchanging tensors                                          */
/*                                                                                        */
/* A run that stops (killed, preempted) and restarts from a koila_module_save and a        */
/* koila_optimizer_save made between two steps continues exactly: the parameters after    */
/* every later step are the same, bit for bit, as those of a run that never stopped, also */
/* when the backward runs in chunks (given the same budget and chunking options, on the   */
/* same machine and LibTorch). With koila_rng_save and koila_rng_load, dropout's masks    */
/* too: training with dropout resumed from module, optimizer and generator files equals   */
/* training that never stopped. What is not saved: the data loader's position, and the    */
/* caller's own counters.                                                                 */
/* ------------------------------------------------------------------------------------ */

/* AdamW: Adam with decoupled weight decay, as torch.optim.AdamW (the parameters shrink by
   lr * weight_decay before the Adam update; the gradient is not changed). The same
   parameter rules and ranges as koila_optimizer_adam. */
KOILA_API koila_status *koila_optimizer_adamw(koila_optimizer **out, koila_tensor *const *params,
                                              size_t n, double lr, double beta1, double beta2,
                                              double eps, double weight_decay);
/* Sets the learning rate of every later step (a schedule is the caller's loop calling
   this). lr must be >= 0 and finite. Saved and loaded with the optimizer's state. */
KOILA_API koila_status *koila_optimizer_set_lr(koila_optimizer *o, double lr);
/* The learning rate in force. */
KOILA_API koila_status *koila_optimizer_lr(const koila_optimizer *o, double *out);
/* Saves the optimizer's whole state: its kind, hyperparameters (the learning rate in
   force included), and for each parameter its step count and moment or momentum buffers.
   The file is versioned and ends with a CRC-32 of everything before it. Atomic, as
   koila_module_save: whatever happens to the process during the call, the file at path is
   afterwards either the complete old file or the complete new one; a failed write is
   KOILA_ERROR_IO with the old file as it was. */
KOILA_API koila_status *koila_optimizer_save(const koila_optimizer *o, const char *path);
/* Loads what koila_optimizer_save wrote into an optimizer of the same kind over
   parameters of the same number, dtypes and shapes, in the same order (the parameters'
   values are the module's: load them with koila_module_load). The file's hyperparameters
   replace the optimizer's. A mismatch (another kind, another number of parameters, a
   parameter of another dtype or shape) is KOILA_ERROR_INVALID_ARGUMENT naming the first
   one; a missing, truncated or corrupt file (its checksum does not match), or one written
   by a newer koila, is KOILA_ERROR_IO. Either way the optimizer is unchanged. */
KOILA_API koila_status *koila_optimizer_load(koila_optimizer *o, const char *path);
/* Saves the state of every random generator koila uses, which koila_manual_seed seeds:
   the CPU's, and each CUDA device's. Atomic, as koila_optimizer_save (versioned, with a
   CRC-32; a failed write is KOILA_ERROR_IO with the old file as it was). Planning never
   draws from these generators (probes, sample-mixing checks, KOILA_CHUNK_FASTEST's timing,
   calibration, and the attempt a retry after running out of memory replaces: the retry
   draws what it would have drawn), so a seeded step gives the same result whether or not
   its structure was planned before in the process, and a step after koila_rng_load the
   same as the step after the save in the run that saved. Dropout draws its masks chunk by
   chunk: a step is reproduced under the same budget and chunking options (a run in other
   chunks draws other, equally random masks). */
KOILA_API koila_status *koila_rng_save(const char *path);
/* Loads what koila_rng_save wrote: every generator the file holds takes its saved state.
   A missing, truncated or corrupt file, one written by a newer koila, or a state this
   LibTorch's generator refuses is KOILA_ERROR_IO; a file holding a CUDA device this process
   does not have is KOILA_ERROR_INVALID_ARGUMENT naming it. Either way no generator changes.
   A file saved without CUDA leaves the CUDA generators as they are. */
KOILA_API koila_status *koila_rng_load(const char *path);
/* Scales the gradients of params in place so that their joint 2-norm is at most
   max_norm, as torch.nn.utils.clip_grad_norm_: every gradient is multiplied by
   min(1, max_norm / (norm + 1e-6)). Writes the norm before clipping to *out. params are
   concrete leaves, each at most once (as for the optimizers); those without a gradient
   are skipped, and with none *out is 0. After koila_backward the gradients are the whole
   batch's, also when it ran in chunks. max_norm must be >= 0 and finite. A norm that is
   not finite (an inf or NaN in a gradient) is KOILA_ERROR_INVALID_ARGUMENT with the norm
   written to *out and no gradient changed (skip that step). */
KOILA_API koila_status *koila_clip_grad_norm(double *out, koila_tensor *const *params, size_t n,
                                             double max_norm);

/* DLPack (https://dmlc.github.io/dlpack/): sharing memory with other array libraries.
   koila.h does not include dlpack.h: the pointers are void *. Both forms of the exchange
   struct are taken and made: DLManagedTensor (versioned = 0, every DLPack) and
   DLManagedTensorVersioned (versioned = 1, DLPack >= 1.0), on every LibTorch koila builds
   against. A versioned other than 0 or 1 is KOILA_ERROR_INVALID_ARGUMENT, and then koila
   does not touch managed (it cannot know its layout).

   From: takes a DLManagedTensor * or DLManagedTensorVersioned * and owns it from then on,
   also when the call fails: koila calls its deleter exactly once (at once on failure, or
   when the last koila tensor sharing the memory is freed). No copy: the tensor shares the
   producer's memory, and writes through koila (an optimizer step) are seen by the
   producer. The result is concrete and has no batch dim (wrap it with koila_lazy).
   Refused with KOILA_ERROR_UNSUPPORTED: a major version other than 1; a device other than the
   CPU (or pinned host memory) or, in a CUDA build, a CUDA device; a dtype outside
   koila_dtype, or with lanes != 1; a read-only tensor (flag DLPACK_FLAG_BITMASK_READ_ONLY:
   koila's tensors are writable); negative strides; a data pointer plus byte_offset not
   aligned to the element size. Refused with KOILA_ERROR_INVALID_ARGUMENT: managed NULL,
   a negative ndim or size, NULL shape with ndim > 0, NULL data with elements.
   To: evaluates a lazy tensor first, then writes to *out a new DLManagedTensor * or
   DLManagedTensorVersioned * (DLPack 1.1) that shares the tensor's memory (its sizes and
   strides, any layout) and keeps it alive; the consumer calls its deleter once. The
   tensor's autograd history is not part of it (as torch.utils.dlpack.to_dlpack of a
   detached tensor). A dtype DLPack has no code for is KOILA_ERROR_UNSUPPORTED. */
KOILA_API koila_status *koila_tensor_from_dlpack(koila_tensor **out, void *managed, int versioned);
KOILA_API koila_status *koila_tensor_to_dlpack(void **out, const koila_tensor *t, int versioned);

#ifdef __cplusplus
}
#endif

#endif /* KOILA_H */
