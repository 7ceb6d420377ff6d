// Batch rules: where the batch dim goes through an op, and whether the op mixes samples.
// Rules see only metadata. A rule that cannot prove an op keeps samples apart reports
// that it couples the batch; the planner then refuses to split rather than compute
// something different.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace koila::batch {

using Metas = std::vector<const Meta*>;

BatchResult couple(std::string reason);

// Broadcasting elementwise ops (also every unary op).
BatchResult elementwise(const Metas& in, const Meta& out);

// Ops whose only batched input is `in[0]` and whose output keeps its dims in place, except
// that dims listed in `mixed` (normalized against in[0]'s rank) mix their elements.
BatchRule same_dims_except(std::vector<int64_t> mixed, std::string what);

// Reductions over `dims` (empty = all) that end the batch with `reduction` when the batch
// dim is among them.
BatchRule reduce(std::vector<int64_t> dims, bool keepdim, BatchReduction reduction);

// Reshape: the batch survives when the dims before it keep their total size and it stays
// whole.
BatchResult view(const std::vector<int64_t>& in_shape, int64_t batch_dim, const std::vector<int64_t>& out_shape);

// A reason to refuse when an unbatched input, aligned to the output from the right as in
// broadcasting, has a size other than 1 at the output's batch dim `out_pos`: splitting the
// batch would need to split that input too. Empty when there is none.
std::string unbatched_spanning(const Metas& in, int64_t out_rank, int64_t out_pos);

}  // namespace koila::batch
