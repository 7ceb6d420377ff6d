// The batch planner: estimates the peak memory of evaluating a graph (FORWARD) or of a
// backward from it (TRAINING) for a given chunk of the batch, picks the largest chunk that
// fits the device's budget (or, under Chunking::Fastest, the fastest measured of those
// that fit), and runs the batch chunk by chunk so that results and gradients equal the
// unsplit ones.
//
// The pieces, one job each: run/analysis (where the batch goes), run/chunked_run (the chunk
// strategy, shared by runs, simulations and probes), plan/estimate (figures and where they
// came from), plan/memo (what is remembered per root and per graph structure),
// memory/reservations (one budget for many threads), plan/fastest (Chunking::Fastest's
// candidates and choice); this file searches the chunk and runs it, planning once a run.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "memory/placed_device.h"
#include "run/analysis.h"
#include "run/chunked_run.h"

namespace koila {

struct Plan {
  RunMode mode = RunMode::Forward;
  PlacedDevice device;  // canonical: "cuda" is "cuda:N"
  int64_t batch = -1;   // batch size, -1: no lazy batch
  int64_t chunk = -1;   // samples per chunk (the batch when it runs unsplit)
  int64_t chunks = 1;
  std::string coupled;                         // non-empty: why the batch cannot be split (names the op)
  BatchStats batch_stats = BatchStats::Exact;  // the policy in force when planned
  bool per_chunk_stats = false;                // batch norm in training computes each chunk's own statistics
  std::string stats_coupled;                   // the op that couples the batch through its statistics, if any
  Chunking chunking = Chunking::Largest;       // the policy in force when planned
  bool timed = false;                          // FASTEST: the run times its chunk as a candidate (fastest.h)
  std::string chunk_choice;                    // FASTEST: how the chunk was chosen (candidates, timings)
  uint64_t in_use_bytes = 0;                   // in use on the device when planned
  uint64_t reserved_by_others_bytes = 0;       // reserved by runs on other threads, not yet allocated
  // What the device's allocator holds unused and cannot give back when planned
  // (held_unreleasable, memory/device_memory.h): taken, as the bytes in use are, for the run's
  // need and the cap, not for the peak (which counts what tensors hold). 0 on the CPU.
  uint64_t held_bytes = 0;
  uint64_t budget_bytes = 0;
  uint64_t unsplit_extra_bytes = 0;  // estimated beyond what is in use, unsplit
  uint64_t extra_bytes = 0;          // estimated beyond what is in use, as planned
  // What the device's allocator reserves beyond those bytes (Estimator::allocator_overhead):
  // on CUDA the caching allocator's segments, modelled; 0 on the CPU.
  uint64_t unsplit_allocator_bytes = 0;
  uint64_t allocator_bytes = 0;
  // Recomputation (run/recompute.h): the policy in force when planned, and what the run
  // recomputes (null: nothing; chosen only where no chunk fits without it). `unrecomputed_*`:
  // the same chunk's figures without it. `least_recomputed_needed`: where nothing fits even
  // recomputing the most koila can plan, the budget that would fit that (0: not known).
  Recompute recompute_policy = Recompute::AsNeeded;
  std::shared_ptr<const RecomputePlan> recompute;
  uint64_t unrecomputed_extra_bytes = 0;
  uint64_t least_recomputed_needed = 0;
  int64_t least_recomputed_chunk = 0;
  uint64_t recomputed_bytes() const { return recompute ? recompute->freed_bytes : 0; }
  std::string source;  // where the figures came from (see plan/estimate.h)
  NodePtr root;        // what is evaluated or differentiated (plan/timeline.h simulates it again)
  // What the run cannot use: in use, reserved by others and held by the allocator when planned.
  uint64_t taken_bytes() const { return in_use_bytes + reserved_by_others_bytes + held_bytes; }
  uint64_t peak() const { return in_use_bytes + reserved_by_others_bytes + extra_bytes; }
  uint64_t full_peak() const { return in_use_bytes + reserved_by_others_bytes + unsplit_extra_bytes; }
  // The budget a run estimated at `extra` bytes beyond what is in use needs: the bytes taken
  // (taken_bytes), plus the estimate with koila's margin (kMargin, plan/estimate.h) on top,
  // plus what the device's allocator reserves beyond the estimate (`allocator`). A run
  // fits when its need is at most the budget. On CUDA a planned run's allocator is capped at
  // this need (see koila.h).
  uint64_t needed(uint64_t extra, uint64_t allocator) const;
  uint64_t needed() const { return needed(extra_bytes, allocator_bytes); }
  uint64_t full_needed() const { return needed(unsplit_extra_bytes, unsplit_allocator_bytes); }
  std::string describe() const;
};

// Plans without running anything (but for the real probes of plan/estimate.h, once per
// graph structure). Fails with Code::OutOfMemory when not even one
// sample fits, Code::NotSplittable when the graph couples the batch and does not
// fit unsplit (the message is the plan's description).
Plan make_plan(const NodePtr& root, RunMode mode);

// Estimated bytes beyond current usage of running `root` in `mode` with chunks of `chunk`
// samples (-1: unsplit), as a plan made now estimates them. Exposed for tests and benchmarks.
uint64_t estimate_extra(const NodePtr& root, RunMode mode, int64_t chunk);
// What the device's allocator reserves beyond that estimate (Estimator::allocator_overhead):
// 0 on the CPU.
uint64_t estimate_allocator_overhead(const NodePtr& root, RunMode mode, int64_t chunk);

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
