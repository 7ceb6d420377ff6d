// What to recompute (issue 51): ranges of a run's schedule whose values are freed in the forward
// and computed again in the backward (run/recompute.h), chosen so that a run frees what it must
// for the least recomputation.
//
// The algorithm. The graph's ops are taken in the order the run evaluates them, and a candidate
// segment is any contiguous range of that order: its inputs all come before it, so any set of
// disjoint ranges can be recomputed, whatever the graph's shape (skip connections, several
// outputs). Of a range, what it frees is the bytes that autograd saves of its values read only
// inside it (measured: Estimator::saved_by_autograd; a relu's input is not saved, a linear
// layer's is), less its inputs that autograd did not save but the segment must keep; what it
// costs is its ops' arithmetic (forward_cost). While a segment's backward runs, its values exist
// again: a set of ranges saves about what they free together less the largest one's.
//
// For a cap M on what one range frees, a dynamic program over the order finds the ranges of at
// most M each that free the most for the least cost (maximizing freed - lambda * cost; lambda
// searched by bisection for the cheapest set that frees what is asked plus M); a knapsack over
// the same order, with bytes freed in 128ths of what is asked, finds the sets between two of
// those that the Lagrangian search cannot (off_hull). The caps tried
// are a geometric series; the cheapest answer over them wins. This is the linearized form of
// Checkmate's problem (Jain et al., MLSys 2020) that Rockmate and Chen et al.'s sqrt(n) work with,
// solved exactly per cap and lambda instead of by a MILP: fast enough to run at a plan (a graph of
// a few thousand ops in well under a second), and, unlike fixed rules (a segment per residual
// block, every sqrt(n) ops), it follows the graph's own sizes and costs: a U-Net's long skips
// stay outputs, cheap elementwise ops are recomputed before convolutions are.
//
// That model counts every value kept against the largest segment. A second, the timeline
// (RecomputeTimeline below), follows the backward through the order: a segment's backward
// runs while what was kept before it is held and what came after it is gone, so a CNN's first
// layers (its largest) may be recomputed in long segments and its last in short ones. A dynamic
// program over the order, whose state is the bytes kept so far (in 64 steps of the room, each
// remembering its exact bytes), finds the cheapest set under a room, and by bisection the least
// room. The planner simulates the answers of both and takes the cheaper that fits (the bench's
// transformer: least budget 0.31 -> 0.23 of its activations; the mlp's 0.29 -> 0.25).
//
// The figures are a model (which values autograd really saves is not known here): the planner
// simulates each choice and asks again for more where the simulation says it falls short.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "run/executor.h"

namespace koila {

using Ranges = std::vector<std::pair<size_t, size_t>>;

// Ranges of `schedule` (positions in its order) for chunks of `chunk` samples (-1: unsplit) that
// free at least `to_free` bytes beyond the largest range's, for the least cost. `most` (when
// given) is set when no set of ranges frees that much: the ranges returned are then those that
// free the most.
// `saved`: for each position, the bytes autograd saves of that value (saved_by_autograd).
// `off_hull` (when given) gets a cheaper set that frees as much in the model, found by a
// knapsack where the Lagrangian search (which finds only sets on the lower convex hull of cost
// against bytes freed) jumps past it; empty where there is none. The model errs: the planner
// simulates both.
Ranges choose_ranges(const Schedule& schedule, int64_t chunk, const std::vector<double>& saved, uint64_t to_free,
                     bool* most = nullptr, Ranges* off_hull = nullptr);

// What a set of ranges frees in the model (beyond the largest range's), for the planner's
// corrections.
uint64_t modelled_saving(const Schedule& schedule, int64_t chunk, const std::vector<double>& saved,
                         const Ranges& ranges);

// The timeline model (recompute_choice.cpp) of one schedule's order, for chunks of `chunk`
// (`saved` as for choose_ranges): what the backward holds when each segment's backward runs (the
// values kept before it, its own, its gradients in flight), whose most over the order is a set's
// modelled peak, in bytes of values. Its figures are made once, for every question asked of it.
struct RangeFigures;
class RecomputeTimeline {
 public:
  RecomputeTimeline(const Schedule& schedule, int64_t chunk, const std::vector<double>& saved);
  ~RecomputeTimeline();
  RecomputeTimeline(const RecomputeTimeline&) = delete;
  RecomputeTimeline& operator=(const RecomputeTimeline&) = delete;

  // The cheapest ranges whose modelled peak is at most `room`; nullopt where none are (or the
  // graph is too large to search).
  std::optional<Ranges> within(double room) const;
  // The least modelled peak of any set of ranges (within 1%), and (when given) that set.
  double least_room(Ranges* ranges) const;
  // The modelled peak of `ranges` (none: the run without recomputation).
  double peak(const Ranges& ranges) const;

 private:
  std::unique_ptr<const RangeFigures> figures_;
};

}  // namespace koila
