// The batch planner: estimates the peak memory of evaluating a graph (FORWARD) or of a
// backward from it (TRAINING) for a given chunk of the batch, picks the largest chunk that
// fits the device's budget (or, under KOILA_CHUNK_FASTEST, the fastest measured of those
// that fit), and runs the batch chunk by chunk so that results and gradients equal the
// unsplit ones.
//
// The pieces, one job each: plan_analysis (where the batch goes), chunked_run (the chunk
// strategy, shared by runs, simulations and probes), plan_estimate (figures and where they
// came from), plan_memo (what is remembered per graph structure), reservations (one budget
// for many threads), fastest (KOILA_CHUNK_FASTEST's candidates and choice); this file
// searches the chunk and runs it.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "chunked_run.h"
#include "graph.h"
#include "plan_analysis.h"

namespace koila {

struct Plan {
  Mode mode = Mode::Forward;
  c10::Device device = c10::Device(c10::kCPU);
  std::string target;         // "[8, 10] float" — what is evaluated
  int64_t batch = -1;         // batch size, -1: no lazy batch
  int64_t chunk = -1;         // samples per chunk (the batch when it runs unsplit)
  int64_t chunks = 1;
  std::string coupled;        // non-empty: why the batch cannot be split (names the op)
  koila_batch_stats batch_stats = KOILA_BATCH_STATS_EXACT;  // the policy in force when planned
  bool per_chunk_stats = false;  // batch norm in training computes each chunk's own statistics
  std::string stats_coupled;     // the op that couples the batch through its statistics, if any
  koila_chunking chunking = KOILA_CHUNK_LARGEST;  // the policy in force when planned
  bool timed = false;            // FASTEST: the run times its chunk as a candidate (fastest.h)
  std::string chunk_choice;      // FASTEST: how the chunk was chosen (candidates, timings)
  uint64_t current = 0;       // bytes in use on the device when planned
  uint64_t others = 0;        // bytes reserved by runs on other threads and not yet allocated
  uint64_t budget = 0;
  uint64_t full_extra = 0;    // estimated bytes beyond `current`, unsplit
  uint64_t extra = 0;         // estimated bytes beyond `current`, as planned
  std::string source;         // where the figures came from (see plan_estimate.h)
  NodePtr root;               // what is evaluated or differentiated (plan_timeline.h simulates it again)
  uint64_t peak() const { return current + others + extra; }
  uint64_t full_peak() const { return current + others + full_extra; }
  std::string describe() const;
};

// Plans without running anything (but for the real probes of plan_estimate.h, once per
// graph structure). Fails with KOILA_ERROR_OUT_OF_MEMORY when not even one
// sample fits, KOILA_ERROR_NOT_SPLITTABLE when the graph couples the batch and does not
// fit unsplit (the message is the plan's description).
Plan make_plan(const NodePtr& root, Mode mode);

// Estimated bytes beyond current usage of running `root` in `mode` with chunks of `chunk`
// samples (-1: unsplit). Exposed for tests and benchmarks.
uint64_t estimate_extra(const NodePtr& root, Mode mode, int64_t chunk);

// The value of `root` (lazy or not), planned and chunked; retries with half the chunk when
// the device runs out of memory anyway. Records no autograd.
at::Tensor run_forward(const NodePtr& root, Plan* used = nullptr);

// Backward from a one-element loss, planned and chunked. Gradients add into the .grad of
// every tensor that requires grad (chunk by chunk when split); a failure, a retry after
// running out of memory included, leaves every gradient as it was.
// `before_commit` (see chunked_run.h), when given, sees the gradients once they are all
// computed and before any is final; after it has been called, an error is not retried.
void run_backward(const NodePtr& loss, Plan* used = nullptr, const BeforeCommit& before_commit = {});

}  // namespace koila

// The C handle of a plan (koila_plan_new, koila_plan_timeline).
struct koila_plan {
  koila::Plan plan;
};
