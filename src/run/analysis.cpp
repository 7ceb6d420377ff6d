#include "run/analysis.h"

#include <mutex>

#include "run/executor.h"

namespace koila {
namespace {

const char* reduction_name(BatchReduction r) {
  switch (r) {
    case BatchReduction::Sum: return "sum";
    case BatchReduction::Mean: return "mean";
    case BatchReduction::Max: return "max";
    case BatchReduction::Min: return "min";
    case BatchReduction::None: break;
  }
  return "none";
}

}  // namespace

std::unique_ptr<Analysis> analyze(const NodePtr& root, RunMode mode) {
  auto a = std::make_unique<Analysis>();
  a->whole = make_schedule({root.get()});
  for (const Node* node : a->nodes()) {
    if (node->kind == NodeKind::Input && node->meta.batch_dim >= 0) {
      const int64_t size = node->meta.batch_size();
      if (a->batch < 0) {
        a->batch = size;
      } else if (size != a->batch && a->coupled.empty()) {
        a->coupled = "the lazy inputs have different batch sizes (" + std::to_string(a->batch) + " and " +
                     std::to_string(size) + ")";
      }
    }
    if (node->kind != NodeKind::Op) continue;
    a->linear_layers += node->linear_layers;
    if (!node->couples.empty() && a->coupled.empty()) a->coupled = node->op + " " + node->couples;
    if (!node->stats_couples.empty() && a->stats_coupled.empty())
      a->stats_coupled = node->op + " " + node->stats_couples;
    bool batched_input = false;
    for (const NodePtr& in : node->inputs) batched_input |= in && in->meta.batch_dim >= 0;
    if (node->reduction != BatchReduction::None && batched_input) {
      a->boundaries.push_back(node);
      if (mode == RunMode::Training && a->coupled.empty() &&
          (node->reduction == BatchReduction::Max || node->reduction == BatchReduction::Min))
        a->coupled = node->op + " takes the " + reduction_name(node->reduction) +
                     " over the batch, whose gradient cannot be split into chunks";
    }
  }
  if (a->batch < 0) {
    a->boundaries.clear();
    a->coupled.clear();
    a->stats_coupled.clear();
    return a;
  }
  a->root_batched = root->meta.batch_dim >= 0;
  if (a->root_batched) a->boundaries.clear();  // any reduction feeding it couples the batch already
  a->root_is_boundary = a->boundaries.size() == 1 && a->boundaries[0] == root.get();
  if (!a->root_is_boundary && !a->boundaries.empty()) a->boundaries_only = make_schedule(a->boundaries);
  if (!a->root_batched && a->boundaries.empty() && a->coupled.empty())
    a->coupled = root->op + " gives a result that neither carries the batch nor reduces over it";
  return a;
}

std::string coupling(const Analysis& a, BatchStats policy) {
  if (!a.coupled.empty() || a.stats_coupled.empty() || policy == BatchStats::PerChunk) return a.coupled;
  return a.stats_coupled +
         " (koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK) lets each chunk normalize with its own statistics)";
}

bool per_chunk_stats(const Analysis& a, BatchStats policy, int64_t chunk) {
  return policy == BatchStats::PerChunk && a.coupled.empty() && !a.stats_coupled.empty() && a.splits(chunk);
}

}  // namespace koila
