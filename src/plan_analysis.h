// What the planner needs to know about a graph's structure: its nodes in order, the lazy
// batch, whether the batch can be split (and why not), and where the batch ends (the
// reductions over it that chunks are combined at). Computed once per root and mode.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph.h"

namespace koila {

enum class Mode { Forward, Training };

struct Analysis {
  std::vector<const Node*> nodes;       // topological order, root last
  int64_t batch = -1;                   // size of the lazy batch, -1: none
  std::string coupled;                  // non-empty: why the batch cannot be split
  bool root_batched = false;            // the result carries the batch: chunks are concatenated
  std::vector<const Node*> boundaries;  // reductions over the batch the (unbatched) root depends on
  bool root_is_boundary = false;

  // Whether running with chunks of `chunk` samples splits the batch.
  bool splits(int64_t chunk) const { return batch >= 0 && chunk >= 0 && chunk < batch; }
};

// The analysis of `root` for `mode`, kept in the root's plan cache (it points at nodes the
// root owns). Thread-safe.
const Analysis& analysis_of(const NodePtr& root, Mode mode);

}  // namespace koila
