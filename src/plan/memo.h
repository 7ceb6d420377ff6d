// What the planner remembers about a graph. Two levels:
//   - per root node, while it lives: its analysis (which points into the graph), and the part
//     of its structure's key that building fixed (the nodes' own keys, Node::key, and which
//     node feeds which), in a table of the planner's, not on the node;
//   - per graph structure (GraphRecord): estimates, probe measurements and the peaks of
//     earlier runs, shared by every graph built the same way (same ops, shapes, dtypes,
//     devices, batch dims, gradient flags, the arguments that change what an op keeps
//     (OpSpec::signature: dropout's p, causal attention, a permutation's order, a module
//     call's code and training flags) and, for training, whether each .grad is absent,
//     all zeros or neither), so that a graph rebuilt every step is simulated and probed
//     once, not every step; and, under Chunking::Fastest, how long runs of each chunk
//     size took (fastest.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/structure_key.h"
#include "graph/graph.h"
#include "plan/fastest.h"
#include "plan/op_events.h"
#include "run/analysis.h"
#include "run/grad_starts.h"

namespace koila {

// The analysis of `root` for `mode` (run/analysis.h), made at its first plan and kept while
// the root lives (it points at nodes the root owns). Thread-safe.
const Analysis& analysis_of(const NodePtr& root, RunMode mode);

// Of one top-level op of a probe: what it held beyond its simulation during the op (`peak`)
// and after it (`live`), in bytes (less than 0: less).
struct OpExtra {
  int64_t peak = 0;
  int64_t live = 0;
};

// A simulation of a chunk size: its peak (extra bytes) and its ops (op_events.h).
struct Simulated {
  uint64_t peak = 0;
  // On CUDA: the least cap on what the caching allocator reserves under which the simulated
  // allocations succeed (memory/caching_allocator_model.h); 0 elsewhere.
  uint64_t allocator_peak = 0;
  std::vector<OpPoint> ops;
  // What the calibration adds to it op by op (Estimator), once computed.
  mutable std::optional<uint64_t> added_op_by_op;
};

// What the calibration probes of a structure found. Backend temporaries do not depend on
// how the leaves' .grad stand, so the records of one structure that differ only there share
// it: the usual loop finds every .grad absent in its first step and all zeros in its second,
// and the second is simulated again (it holds gradients differently) but not probed again.
struct Calibration {
  // Held while a plan reads or fills it, after the record's own mutex.
  std::mutex mutex;
  bool done = false;    // probed (or the probe failed but for memory); false: not yet, or no room then
  std::string failure;  // non-empty: the probe failed (why)
  // Samples -> bytes the probe took beyond the simulation (or less).
  std::map<int64_t, int64_t> probes;
  // What is added to a simulated figure for a chunk c: `bytes` (the most of the probes), and
  // `slope` bytes a sample beyond the largest probe (temporaries that grow with the chunk,
  // such as im2col buffers of convolutions oneDNN does not take); for a chunk of a probe's
  // size, what that probe took instead (at least the kernels' scalars): the larger probe's
  // workspaces are not a smaller chunk's (oneDNN's LSTM on LibTorch 2.x, +29% in chunks of 2).
  uint64_t bytes = 0;
  double slope = 0;
  // Chunks probed as the run's chunks go (gradients added into .grad as they come and put back
  // after; not all held at once as the calibration probes hold them), when a plan first needs
  // one: those smaller than the smallest probe (1 sample, where backends choose other kernels:
  // LibTorch's CPU convolution takes other buffers for one sample than for 2 or 4, oneDNN
  // reorders no weights), and, where no ops are followed (a device), those within the probes'
  // sizes: samples -> bytes beyond the simulation of the same chunks (at least the kernels'
  // scalars), added instead of `bytes`. Absent: not probed yet (or no room then); nullopt: the
  // probe failed, `bytes` stays.
  std::map<int64_t, std::optional<uint64_t>> as_run;
  // Op by op (on the CPU, where every probe ran at least 90% of its simulation's ops, by key):
  // samples -> op key -> what the probe held beyond the simulation at that op, so that a
  // chunk's figure adds each op's own to that op's simulated peak, instead of the most any
  // op showed to the chunk's peak wherever it lies (a kernel's workspace at a small layer
  // is not added to the largest). Empty: `bytes` and `slope` as above.
  std::map<int64_t, std::unordered_map<uint64_t, OpExtra>> by_op;
};

struct GraphRecord {
  // Held while a plan consults or fills the record: plans of one structure on several
  // threads simulate and probe it once.
  std::mutex mutex;
  std::map<std::pair<int64_t, int64_t>, Simulated> simulated;  // (chunk, max chunks) -> what it took
  std::string simulation_failure;                              // non-empty: the simulation failed (why)
  std::shared_ptr<Calibration> calibration;                    // shared with the structure's other .grad states
  bool probed = false;                                         // the fit done or tried
  std::string probe_failure;                                   // non-empty: the fit's probes failed (why)
  std::map<int64_t, uint64_t> probes;                          // the fit's probes: chunk -> measured extra bytes
  double intercept = 0, slope = 0;                             // the fit: extra = intercept + slope * chunk
  std::map<int64_t, uint64_t> observed;                        // planned runs: chunk -> most extra bytes measured
  // Recomputing runs (run/recompute.h), by (chunk, RecomputePlan::key()): their simulations, and
  // the most extra bytes planned runs measured.
  std::map<std::pair<int64_t, uint64_t>, Simulated> recomputed;
  std::map<std::pair<int64_t, uint64_t>, uint64_t> observed_recomputed;
  // The ranges recomputed, chosen for (chunk, room), with their cost (RecomputePlan::
  // recomputed_cost), and those that free the most, by chunk: plans of every step choose once,
  // and a plan with more room than another's starts from the cheapest choice that fits it. What
  // autograd saves of each value, by chunk.
  struct RecomputeChoice {
    std::vector<std::pair<size_t, size_t>> ranges;
    double cost = 0;
  };
  std::map<std::pair<int64_t, uint64_t>, RecomputeChoice> recompute_choices;
  std::map<int64_t, std::vector<std::pair<size_t, size_t>>> most_recomputed;
  std::map<int64_t, std::vector<double>> saved_by_autograd;
  std::map<int64_t, uint64_t> freed_inside_programs;  // chunk -> Estimator::freed_inside_programs
  // By chunk: the timeline model's least room (RecomputeTimeline::least_room, the costliest
  // question asked of it) and that room's ranges, found once for the search for the most
  // recomputation and for that for the least that fits.
  std::map<int64_t, std::pair<double, std::vector<std::pair<size_t, size_t>>>> timeline_least;
  ChunkTimings timings;             // Chunking::Fastest: the candidates' timed runs (fastest.h)
  ChunkTimings recomputed_timings;  // the same, of candidates that recompute (planner.cpp)
};

// The record for the structure of `root` in `mode` (with the gradient flags and .grad its
// leaves have now). How each leaf's .grad stands, read for the key, is noted in `starts`
// when given (for the run the plan makes). Records of structures not planned for a long
// time are forgotten (at most kMaxRecords are kept).
std::shared_ptr<GraphRecord> graph_record(const NodePtr& root, const Analysis& a, RunMode mode,
                                          GradStarts* starts = nullptr);

constexpr size_t kMaxRecords = 512;

namespace testing {
// Forgets every graph record (tests that count probes or simulations start clean).
void forget_graph_records();
}  // namespace testing

}  // namespace koila
