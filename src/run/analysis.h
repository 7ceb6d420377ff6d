// What the planner needs to know about a graph's structure: its nodes in order, the lazy
// batch, whether the batch can be split (and why not), and where the batch ends (the
// reductions over it that chunks are combined at), and how to evaluate it. Computed once
// per root and mode (plan/memo.h keeps it); the chunk strategy (chunked_run.h) runs from it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/policies.h"
#include "graph/graph.h"
#include "run/executor.h"

namespace koila {

enum class RunMode { Forward, Training };

struct Analysis {
  int64_t batch = -1;   // size of the lazy batch, -1: none
  std::string coupled;  // non-empty: why the batch cannot be split
  // Non-empty: the first op that couples the batch only through batch statistics (see
  // BatchResult::stats_couples), and how; whether that prevents splitting is up to the
  // policy in force (see coupling()).
  std::string stats_coupled;
  bool root_batched = false;            // the result carries the batch: chunks are concatenated
  uint64_t linear_layers = 0;           // how many linear layers its ops run (Node::linear_layers)
  std::vector<const Node*> boundaries;  // reductions over the batch the (unbatched) root depends on
  bool root_is_boundary = false;
  // How to evaluate the root (made once, run every step and chunk).
  Schedule whole;
  // How to evaluate the boundaries: the whole schedule where the root is the one boundary
  // (a loss reducing the batch, the usual training graph: not copied at every step's plan).
  const Schedule& at_boundaries() const { return root_is_boundary ? whole : boundaries_only; }
  Schedule boundaries_only;  // (the boundaries' schedule where they are not just the root)

  // The graph's nodes in topological order, root last.
  const std::vector<const Node*>& nodes() const { return whole.order; }

  // Whether running with chunks of `chunk` samples splits the batch.
  bool splits(int64_t chunk) const { return batch >= 0 && chunk >= 0 && chunk < batch; }
};

// Why the batch of `a` cannot be split under the batch statistics policy `policy` (empty:
// it can). Under BatchStats::Exact the reason names the option that would allow it.
std::string coupling(const Analysis& a, BatchStats policy);

// Whether chunks of `chunk` samples split a graph that batch norm couples only through its
// statistics under `policy`: the chunks then compute their own statistics (batch_stats.h).
bool per_chunk_stats(const Analysis& a, BatchStats policy, int64_t chunk);

// Analyses `root` for `mode` (the planner keeps it per root: plan/memo.h).
std::unique_ptr<Analysis> analyze(const NodePtr& root, RunMode mode);

}  // namespace koila
