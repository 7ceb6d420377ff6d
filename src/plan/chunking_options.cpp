#include "plan/chunking_options.h"

#include <atomic>

namespace koila {
namespace {

std::atomic<BatchStats> batch_stats_policy{BatchStats::Exact};
std::atomic<Chunking> chunking_policy{Chunking::Largest};
std::atomic<Recompute> recompute_policy{Recompute::AsNeeded};

}  // namespace

void set_batch_stats(BatchStats policy) { batch_stats_policy.store(policy); }
BatchStats batch_stats() { return batch_stats_policy.load(); }

void set_chunking(Chunking policy) { chunking_policy.store(policy); }
Chunking chunking() { return chunking_policy.load(); }

void set_recompute(Recompute policy) { recompute_policy.store(policy); }
Recompute recompute() { return recompute_policy.load(); }

const char* batch_stats_name(BatchStats policy) {
  return policy == BatchStats::PerChunk ? "KOILA_BATCH_STATS_PER_CHUNK" : "KOILA_BATCH_STATS_EXACT";
}

const char* chunking_name(Chunking policy) {
  return policy == Chunking::Fastest ? "KOILA_CHUNK_FASTEST" : "KOILA_CHUNK_LARGEST";
}

}  // namespace koila
